"""The stack tier's side of the version proof: this venv runs vLLM 0.33.0 (the image's), the
overlay claims it, and the overlay claims nothing no tier runs.

The 0.33.0 behaviour itself is proven by the other tests of this tier (plugin load, router and
o_proj paths, switches); here the installed source is also checked target by target
(:func:`sparkpair_overlay.targets.check_source`), which names the target when one moves.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import stacklib
from sparkpair_overlay.targets import check_source
from sparkpair_overlay.versions import VERIFIED_VLLM_VERSIONS, is_verified

pytestmark = pytest.mark.stack

#: The vLLM-real tier's version (``tests/vllm_real/test_version_proof.py`` PROVEN_INSTALLED).
VLLM_REAL_TIER_VERSION_FILE = stacklib.REPO / "tests" / "vllm_real" / "test_version_proof.py"


def vllm_real_tier_version() -> str:
    found = re.findall(r'^PROVEN_INSTALLED = "([^"]+)"$', VLLM_REAL_TIER_VERSION_FILE.read_text(), flags=re.M)
    assert len(found) == 1, f"{VLLM_REAL_TIER_VERSION_FILE}: no single PROVEN_INSTALLED = \"...\" line"
    return found[0]


def test_this_venv_imports_vllm_0_33_0_and_the_overlay_claims_it():
    import vllm

    assert vllm.__version__ == stacklib.STACK_VLLM_VERSION
    assert is_verified(vllm.__version__)


def test_verified_versions_are_exactly_the_ones_the_tiers_run():
    proven = {stacklib.STACK_VLLM_VERSION, vllm_real_tier_version()}
    assert set(VERIFIED_VLLM_VERSIONS) == proven, (
        f"VERIFIED_VLLM_VERSIONS={sorted(VERIFIED_VLLM_VERSIONS)}; the tiers run {sorted(proven)}")


def test_the_image_pins_the_vllm_this_tier_runs():
    """Bumping the Dockerfile's vLLM without moving this tier to it fails."""
    text = (stacklib.REPO / "Dockerfile").read_text()
    tags = set(re.findall(r"^ARG VLLM_IMAGE_TAG=v?([0-9][0-9A-Za-z.+-]*)\s*$", text, flags=re.M))
    assert tags == {stacklib.STACK_VLLM_VERSION}, (
        f"Dockerfile pins vLLM {sorted(tags)}; the stack tier runs {stacklib.STACK_VLLM_VERSION}")


def test_installed_vllm_0_33_source_has_every_patch_target():
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent

    def read(path: str) -> str | None:
        p = root / path
        return p.read_text() if p.is_file() else None

    checked, findings = check_source(read)
    assert not findings, "patch targets missing in vLLM 0.33.0:\n" + "\n".join(f"  - {f}" for f in findings)
    assert len(checked) >= 20


def test_this_venv_runs_the_images_triton():
    """The stack tier runs our kernels (and vLLM's, under Triton's interpreter) with the Triton
    the image's torch requires: the ``kernels`` extra's pin (scripts/setup-stack.sh installs it),
    whose series is the one vLLM 0.33's torch 2.14.0 asks for (triton~=3.8.0,
    docs/reference/triton-gb10.md)."""
    import importlib.metadata

    import triton
    from sparkpair_overlay.kernels._common import triton_problem, triton_requirement

    assert triton_requirement() == f"triton=={triton.__version__}" and triton_problem() == ""
    assert "torch==2.14.0" in (importlib.metadata.requires("vllm") or [])
    assert triton.__version__.startswith("3.8."), triton.__version__

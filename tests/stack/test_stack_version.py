"""The stack tier's side of the version proof, per release: this venv runs one release the overlay
claims, that release's record (``sparkpair_overlay.versions.RELEASES``) says what this venv really
is, and the overlay claims nothing no tier runs.

The release's behaviour itself is proven by the other tests of this tier (plugin load, router and
o_proj paths, switches, the served-combination matrix); here the installed source is checked target
by target (:func:`sparkpair_overlay.targets.check_source`, which names the target when one moves),
and each difference between releases the record states is checked against the installed code: the
DeepGEMM conditions (``nvcc``), how the attention reaches the o_proj, the recipe vLLM gives each
capability, the packages substituted for the wheel's pins.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import stacklib
from sparkpair_overlay.targets import check_source, deepgemm_conditions, o_proj_owner
from sparkpair_overlay.versions import PATCH, RELEASES, VERIFIED_VLLM_VERSIONS, is_verified, release

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

#: The vLLM-real tier's version (``tests/vllm_real/test_version_proof.py`` PROVEN_INSTALLED).
VLLM_REAL_TIER_VERSION_FILE = stacklib.REPO / "tests" / "vllm_real" / "test_version_proof.py"


def vllm_real_tier_version() -> str:
    found = re.findall(r'^PROVEN_INSTALLED = "([^"]+)"$', VLLM_REAL_TIER_VERSION_FILE.read_text(), flags=re.M)
    assert len(found) == 1, f"{VLLM_REAL_TIER_VERSION_FILE}: no single PROVEN_INSTALLED = \"...\" line"
    return found[0]


def _installed_reader():
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations))).parent

    def read(path: str) -> str | None:
        p = root / path
        return p.read_text() if p.is_file() else None

    return read


def test_this_venv_runs_a_stack_release_and_the_overlay_claims_it():
    import vllm

    assert vllm.__version__ in stacklib.STACK_VLLM_VERSIONS
    assert is_verified(vllm.__version__)
    rec = release(vllm.__version__)
    assert rec is not None and rec.tier == "stack" and rec.level == PATCH, rec


def test_verified_versions_are_exactly_the_ones_the_tiers_run():
    proven = {*stacklib.STACK_VLLM_VERSIONS, vllm_real_tier_version()}
    assert set(VERIFIED_VLLM_VERSIONS) == proven, (
        f"VERIFIED_VLLM_VERSIONS={sorted(VERIFIED_VLLM_VERSIONS)}; the tiers run {sorted(proven)}")
    assert {r.version for r in RELEASES if r.tier == "stack"} == set(stacklib.STACK_VLLM_VERSIONS)


def test_the_image_pins_a_vllm_this_tier_runs():
    """Moving the Dockerfile's default base to a release this tier does not run fails."""
    text = (stacklib.REPO / "Dockerfile").read_text()
    tags = set(re.findall(r"^ARG VLLM_IMAGE_TAG=v?([0-9][0-9A-Za-z.+-]*)\s*$", text, flags=re.M))
    assert len(tags) == 1 and tags <= set(stacklib.STACK_VLLM_VERSIONS), (
        f"Dockerfile pins vLLM {sorted(tags)}; the stack tier runs {stacklib.STACK_VLLM_VERSIONS}")


def test_the_substitutes_installed_are_the_ones_the_record_names():
    """Every pin of the wheel this venv does not hold is named, by the record and by setup-stack.sh."""
    rec = release(str(stacklib.installed_vllm()))
    assert rec is not None
    assert stacklib.installed_substitutes() == list(rec.substitutes)


def test_installed_source_has_every_patch_target():
    import vllm

    checked, findings = check_source(_installed_reader())
    assert not findings, f"patch targets missing in vLLM {vllm.__version__}:\n" + "\n".join(
        f"  - {f}" for f in findings)
    assert len(checked) >= 22


def test_the_o_proj_owner_is_the_one_the_record_names():
    """0.33: the attention calls ``deep_gemm_fp8_o_proj``; 0.34: ``wo_a.grouped_forward`` (which calls it).
    The served-combination matrix builds that part (tests/stack/test_stack_serve_matrix.py)."""
    rec = release(str(stacklib.installed_vllm()))
    assert rec is not None and o_proj_owner(_installed_reader()) == rec.o_proj_owner


def test_deepgemm_conditions_are_the_ones_the_record_names():
    """What ``is_deep_gemm_supported`` asks, read from the source: the two switches the matrix models,
    plus ``nvcc`` >= the record's release (0.34) or nothing else (0.33)."""
    rec = release(str(stacklib.installed_vllm()))
    assert rec is not None
    names, nvcc_min = deepgemm_conditions(_installed_reader())
    want = {"support_deep_gemm", "VLLM_USE_DEEP_GEMM", "has_deep_gemm"} | (
        {"nvcc"} if rec.deepgemm_min_nvcc else set())
    assert names == want and nvcc_min == rec.deepgemm_min_nvcc, (names, nvcc_min, rec)


@pytest.mark.parametrize("cap", [(9, 0), (10, 0), (12, 0), (12, 1)])
def test_vllms_recipe_is_the_one_the_plan_takes_for_upstream(cap, monkeypatch):
    """The plan's ``upstream_recipe`` (what vLLM does unpatched) is this release's
    ``compute_fp8_einsum_recipe``: family 120 still gets the SM100 recipe (no upstream fix)."""
    from sparkpair_overlay.plan import upstream_recipe
    from vllm.models.deepseek_v4.nvidia.ops import o_proj
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability

    monkeypatch.setattr(type(current_platform), "get_device_capability",
                        classmethod(lambda c, device_id=0: DeviceCapability(*cap)))
    recipe, tma = o_proj.compute_fp8_einsum_recipe()
    assert (tuple(recipe), bool(tma)) == upstream_recipe(cap)
    rec = release(str(stacklib.installed_vllm()))
    assert rec is not None and not rec.upstream_o_proj_fixed


def test_this_venv_runs_the_images_triton():
    """The stack tier runs our kernels (and vLLM's, under Triton's interpreter) with the Triton
    the image's torch requires: the ``kernels`` extra's pin (scripts/setup-stack.sh installs it),
    whose series is the one vLLM's torch 2.14.0 asks for (triton~=3.8.0, both releases;
    docs/reference/triton-gb10.md)."""
    import importlib.metadata

    import triton
    from sparkpair_overlay.kernels._common import triton_problem, triton_requirement

    assert triton_requirement() == f"triton=={triton.__version__}" and triton_problem() == ""
    assert "torch==2.14.0" in (importlib.metadata.requires("vllm") or [])
    assert triton.__version__.startswith("3.8."), triton.__version__


def _dockerfile_release_gate() -> str:
    """The Python the Dockerfile runs to refuse a base whose vLLM is not verified to patch (its
    ``RUN python3 -c "import sys, vllm; ..."`` line), with the build arg at its default (0)."""
    text = (stacklib.REPO / "Dockerfile").read_text()
    m = re.search(r'^RUN python3 -c "(import sys, vllm;.*?is_verified.*?)" \\$', text, flags=re.M)
    assert m, "the Dockerfile has no release gate (RUN python3 -c \"import sys, vllm; ... is_verified ...\")"
    return m[1].replace("${SPARKPAIR_ALLOW_UNVERIFIED_VLLM}", "0")


def test_the_dockerfiles_release_gate_passes_on_this_release():
    """The image built on this release's base passes the Dockerfile's gate (the docker tier builds
    only the image's default base; the lane builds the others): it prints the release's proof line."""
    import subprocess
    import sys

    from sparkpair_overlay.versions import proof_line

    proc = subprocess.run([sys.executable, "-c", _dockerfile_release_gate()], capture_output=True, text=True,
                          env=stacklib.clean_env(), timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == f"sparkpair: {proof_line(str(stacklib.installed_vllm()))}", proc.stdout


def test_the_dockerfiles_release_gate_stops_a_release_without_a_record():
    """The same gate on this wheel reporting a release with no record (0.99.0) stops the build, naming it."""
    import subprocess
    import sys

    code = "import vllm; vllm.__version__ = '0.99.0'; " + _dockerfile_release_gate()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=stacklib.clean_env(), timeout=300)
    assert proc.returncode == 1, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert "the base image vLLM 0.99.0 is not verified to patch" in proc.stderr, proc.stderr[-2000:]

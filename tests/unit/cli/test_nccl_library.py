# ruff: noqa: E501
"""Preflight names the NCCL library vLLM will load and its version, read through ctypes
(``ncclGetVersion``) from crafted libraries compiled here (no GPU and no real libnccl on CI),
fails on a known-bad version and on a library that is not NCCL, and ``preflight --compare``
flags nodes whose versions differ. vLLM 0.33's own lookup and version decoding are checked
against the same crafted libraries in tests/stack/test_nccl_library.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_cli.preflight import checks as pf
from sparkpair_cli.preflight import nccl
from sparkpair_serving.profile import load_profile

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler to craft libnccl")


def craft(path: Path, code: int | None, extra: tuple[str, ...] = ()) -> Path:
    """A shared library whose ``ncclGetVersion`` answers ``code`` (no such symbol when None),
    plus stub functions named ``extra``."""
    src = [f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}"] if code is not None else []
    src += [f"int {name}(void) {{ return 0; }}" for name in extra]
    path.parent.mkdir(parents=True, exist_ok=True)
    c = path.parent / (path.name + ".c")
    c.write_text("\n".join(src or ["int not_nccl(void) { return 0; }"]) + "\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(path), str(c)], check=True)
    return path


def local(environ: dict[str, str], machine: str = "aarch64") -> pf.Result:
    env = load_node_env_file(HOSTS / "spark-head-good" / "node.env")
    c = pf.Ctx(env, load_profile("deepseek-v4-flash"), pf.Host(Path("/")))
    nccl.check_nccl_library(c, environ, machine=machine)
    (r,) = c.report.results
    return r, c.report.facts  # type: ignore[return-value]


def test_the_version_is_read_through_ncclgetversion(tmp_path: Path) -> None:
    so = craft(tmp_path / "libnccl.so.2", 22703)
    assert nccl.library_version(str(so)) == "2.27.3"
    assert nccl.decode_version(22809) == "2.28.9" and nccl.decode_version(21903) == "2.19.3"


def test_vllm_nccl_so_path_is_the_library_reported(tmp_path: Path) -> None:
    so = craft(tmp_path / "custom" / "libnccl.so.2", 23007)
    r, facts = local({"VLLM_NCCL_SO_PATH": str(so)})
    assert r.status == "pass", r.message
    assert f"{so} (VLLM_NCCL_SO_PATH), NCCL 2.30.7" in r.message
    assert facts["nccl_version"] == "2.30.7" and facts["nccl_library"] == str(so)


def test_the_nvidia_nccl_wheel_is_found_where_torch_links_it(tmp_path: Path) -> None:
    craft(tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2", 22703)
    code = "import json; from sparkpair_cli.preflight import nccl; print(json.dumps(nccl.vllm_nccl_library({}).__dict__))"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path / 'site'}:{os.environ.get('PYTHONPATH', '')}")
    out = json.loads(
        subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        ).stdout
    )
    assert out["path"] == str(tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2")
    assert out["version"] == "2.27.3" and "nvidia-nccl wheel" in out["how"]


@pytest.mark.parametrize(
    ("code", "machine", "bad"),
    [
        (22809, "aarch64", "leak proxy-op slots on ARM"),  # the pip wheel Sparks wedged with
        (22902, "aarch64", "leak proxy-op slots on ARM"),
        (22903, "aarch64", None),  # the fix
        (22809, "x86_64", None),  # the slot leak is ARM's
        (23004, "aarch64", "NVLS path hangs"),
        (23004, "x86_64", "NVLS path hangs"),
        (23003, "aarch64", None),
        (23007, "aarch64", None),  # what torch 2.14.0 (vLLM 0.33's pin) links
    ],
)
def test_a_known_bad_version_fails_with_its_reason_and_fix(
    tmp_path: Path, code: int, machine: str, bad: str | None
) -> None:
    r, _ = local({"VLLM_NCCL_SO_PATH": str(craft(tmp_path / "libnccl.so.2", code))}, machine=machine)
    if bad is None:
        assert r.status == "pass", r.message
    else:
        assert r.status == "fail" and bad in r.message and "fix:" in r.message, r.message
        assert f"NCCL {nccl.decode_version(code)}" in r.message


def test_a_library_that_is_not_nccl_or_is_missing_fails(tmp_path: Path) -> None:
    r, _ = local({"VLLM_NCCL_SO_PATH": str(craft(tmp_path / "libfoo.so", None))})
    assert r.status == "fail" and "no ncclGetVersion symbol" in r.message
    r, _ = local({"VLLM_NCCL_SO_PATH": str(tmp_path / "absent.so")})
    assert r.status == "fail" and "absent.so" in r.message and "answers ncclGetVersion" in r.message


def test_compare_flags_different_nccl_versions_naming_the_nodes() -> None:
    def rep(node: str, v: str) -> dict:
        facts = {"gid_index": 3, "gid_type": "RoCE v2", "fabric_mtu": 9000, "nccl_version": v}
        return {"node": node, "results": [], "facts": facts}

    res = [r for r in pf.compare([rep("spark-a", "2.28.9"), rep("spark-b", "2.27.3")]) if r.id == "same-nccl"]
    assert {r.status for r in res} == {"fail"}
    assert (
        "node spark-b: NCCL version vLLM loads=2.27.3; wanted equal on every node (others: {'spark-a': '2.28.9'})"
        in [r.message for r in res]
    )
    same = [
        r for r in pf.compare([rep("spark-a", "2.28.9"), rep("spark-b", "2.28.9")]) if r.id == "same-nccl"
    ]
    assert {r.status for r in same} == {"pass"}


def test_a_nonsense_version_code_fails_naming_it(tmp_path: Path) -> None:
    r, _ = local({"VLLM_NCCL_SO_PATH": str(craft(tmp_path / "libnccl.so.2", -1))})
    assert r.status == "fail" and "ncclGetVersion answered -1" in r.message, r.message

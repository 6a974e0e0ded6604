# ruff: noqa: E501
"""vLLM 0.33's own NCCL lookup and version reading, against crafted libraries, agree with
preflight's: ``VLLM_NCCL_SO_PATH`` wins (``vllm.utils.nccl.find_nccl_library``), the
nvidia-nccl wheel's folder is the one vLLM itself knows (``find_nccl_library_paths``), and
vLLM's ``NCCLLibrary(so).ncclGetVersion()`` reads the version preflight reports. Without
VLLM_NCCL_SO_PATH, vLLM asks the loader for ``libnccl.so.2`` on a CUDA torch and has no NCCL
on this CPU torch, where preflight says none is needed."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")]

PROBE = """
import json, os, sys
import vllm.envs as envs
from vllm.utils import nccl as vnccl
from vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary
from sparkpair_cli.preflight import nccl as ours
out = {"ours": ours.vllm_nccl_library(dict(os.environ)).__dict__, "paths": vnccl.find_nccl_library_paths()}
try:
    so = vnccl.find_nccl_library()
    out["vllm_so"] = so
    out["vllm_version"] = NCCLLibrary(so).ncclGetVersion()
except ValueError as e:
    out["vllm_error"] = str(e)
print("REPORT " + json.dumps(out))
"""


def _symbols() -> list[str]:
    from vllm.distributed.device_communicators.pynccl_wrapper import NCCLLibrary

    return [f.name for f in NCCLLibrary.exported_functions]


def craft(path: Path, code: int) -> Path:
    """A library with every function vLLM's NCCLLibrary binds; ncclGetVersion answers ``code``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    src = [f"int ncclGetVersion(int *v) {{ *v = {code}; return 0; }}"]
    src += [f"int {n}(void) {{ return 0; }}" for n in _symbols() if n != "ncclGetVersion"]
    c = path.parent / (path.name + ".c")
    c.write_text("\n".join(src) + "\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(path), str(c)], check=True)
    return path


def probe(env: dict[str, str]) -> dict:
    out, _ = stacklib.run_report(PROBE, env)
    return out


def test_vllm_nccl_so_path_is_what_vllm_loads_and_both_read_the_same_version(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    so = craft(tmp_path / "sys" / "libnccl.so.2", 22809)
    out = probe(stack_env | {"VLLM_NCCL_SO_PATH": str(so)})
    assert out["vllm_so"] == out["ours"]["path"] == str(so)
    assert out["vllm_version"] == out["ours"]["version"] == "2.28.9"


def test_the_wheel_folder_is_the_one_vllm_knows_and_cpu_torch_needs_no_nccl(
    stack_env: dict[str, str], tmp_path: Path
) -> None:
    lib = craft(tmp_path / "site" / "nvidia" / "nccl" / "lib" / "libnccl.so.2", 22703)
    env = stack_env | {"PYTHONPATH": f"{tmp_path / 'site'}:{stack_env.get('PYTHONPATH', '')}"}
    env.pop("VLLM_NCCL_SO_PATH", None)
    out = probe(env)
    assert out["paths"] == [str(lib.parent)]  # vLLM's own view of the nvidia-nccl wheel
    assert out["ours"]["path"] == str(lib) and out["ours"]["version"] == "2.27.3"
    # On this CPU torch vLLM has no NCCL to load at all; on a CUDA torch it asks for libnccl.so.2.
    assert "NCCL only supports CUDA and ROCm" in out["vllm_error"]

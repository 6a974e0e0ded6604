"""The ``stack`` tier: tests that run inside a stack venv, one per vLLM release the overlay claims
(``.venv-stack``: vLLM 0.33.0, the image's; ``.venv-stack-0.34.0``: vLLM 0.34.0), each with the
release's wheel, the FlashInfer it pins or the nearest the registry has, the DeepGEMM vLLM vendors,
CPU torch 2.13 and the image's Triton 3.8 (scripts/setup-stack.sh; ``--list`` names them).

* Run with ``<venv>/bin/python -m pytest tests/stack`` (``scripts/test.sh`` runs it in every stack
  venv, in CI always). Any other interpreter collects nothing here (the 0.32 ``.venv`` run must not
  import vLLM 0.33 modules); pytest then exits 5, "no tests ran", so a broken stack venv cannot pass.
* Every test here runs on every release; what differs between releases is read from the release's
  record (:data:`sparkpair_overlay.versions.RELEASES`) or from ``stacklib.upstream_name``, never by
  skipping a release.
* Every test here carries the ``stack`` marker (``pytestmark = pytest.mark.stack``); one that
  does not is a collection error.
* The CUDA toolkit vLLM 0.34 looks for (``nvcc`` for DeepGEMM's JIT) is this venv's CUDA 12.9
  ``nvcc`` wheel where the release's requirements install it (``CUDA_HOME``, the image's toolkit);
  otherwise the caller's. A test that wants none points ``CUDA_HOME`` at an empty folder.
* Helpers: ``stacklib`` (a fresh process per case, this checkout first on the path).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import stacklib

IN_STACK_VENV = stacklib.installed_vllm() in stacklib.STACK_VLLM_VERSIONS
if not IN_STACK_VENV:
    collect_ignore_glob = ["test_*.py"]
else:
    # vLLM 0.34's DeepGEMM looks for nvcc through these: the same answer on every machine.
    for _name in ("CUDA_PATH", "DG_JIT_NVCC_COMPILER", "DJ_JIT_NVCC_COMPILER"):
        os.environ.pop(_name, None)
    if stacklib.image_cuda_home() is not None:
        os.environ["CUDA_HOME"] = str(stacklib.image_cuda_home())


def pytest_report_header(config: pytest.Config) -> list[str]:
    if not IN_STACK_VENV:
        return [f"stack tier: not collected (this interpreter's 'vllm' distribution is "
                f"{stacklib.installed_vllm()!r}, wanted one of {list(stacklib.STACK_VLLM_VERSIONS)}; run "
                "scripts/setup-stack.sh --all and <venv>/bin/python -m pytest tests/stack)"]
    from sparkpair_overlay.versions import proof_line

    version = stacklib.installed_vllm()
    subs = stacklib.installed_substitutes()
    return [f"stack tier: vLLM {version} (distribution 'vllm') in this venv",
            f"stack tier: substitutes for the wheel's pins: {', '.join(map(str, subs)) or 'none'}",
            f"stack tier: record: {proof_line(str(version))}",
            f"stack tier: CUDA_HOME={os.environ.get('CUDA_HOME', '(unset)')}"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    unmarked = [it.nodeid for it in items if here in Path(str(it.path)).parents
                and it.get_closest_marker("stack") is None]
    if unmarked:
        raise pytest.UsageError(
            f"tests under tests/stack without the 'stack' marker: {unmarked}; "
            "add `pytestmark = pytest.mark.stack`")


@pytest.fixture(scope="session")
def stack_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for a stack subprocess: this checkout first on ``PYTHONPATH``, no
    ``SPARKPAIR_*`` from the caller, and the sparkpair plugin visible to vLLM's loader."""
    return stacklib.clean_env(stacklib.entry_point_dir(tmp_path_factory.mktemp("sparkpair-ep")))

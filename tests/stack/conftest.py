"""The ``stack`` tier: tests that run inside ``.venv-stack`` (vLLM 0.33.0 wheel, FlashInfer
0.7.2.post1, the DeepGEMM vLLM vendors, CPU torch 2.13, the image's Triton 3.8;
scripts/setup-stack.sh).

* Run with ``.venv-stack/bin/python -m pytest tests/stack`` (``scripts/test.sh`` does, in CI
  always). Any other interpreter collects nothing here (the 0.32 ``.venv`` run must not import
  vLLM 0.33 modules); pytest then exits 5, "no tests ran", so a broken stack venv cannot pass.
* Every test here carries the ``stack`` marker (``pytestmark = pytest.mark.stack``); one that
  does not is a collection error.
* Helpers: ``stacklib`` (a fresh process per case, this checkout first on the path).
"""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
import stacklib


def _stack_vllm() -> str | None:
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


IN_STACK_VENV = _stack_vllm() == stacklib.STACK_VLLM_VERSION
if not IN_STACK_VENV:
    collect_ignore_glob = ["test_*.py"]


def pytest_report_header(config: pytest.Config) -> str:
    if IN_STACK_VENV:
        return f"stack tier: vLLM {stacklib.STACK_VLLM_VERSION} (distribution 'vllm') in this venv"
    return (f"stack tier: not collected (this interpreter's 'vllm' distribution is {_stack_vllm()!r}, "
            f"wanted {stacklib.STACK_VLLM_VERSION!r}; run scripts/setup-stack.sh and "
            ".venv-stack/bin/python -m pytest tests/stack)")


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

"""GPU tier: skip everything here unless CUDA is available.

The shared numerics come from :mod:`sparkpair_overlay.numerics`; ``vllm_harness`` is importable
because pytest puts this folder (no ``__init__.py``) on the path of its test modules.

Tests marked ``cpu_ok`` (harness and plan checks that need no GPU, e.g. in
``test_vllm_router_path.py``) are not skipped for lack of CUDA; they skip themselves where a
step needs CUDA.
"""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cpu_ok: a tests/gpu test that also runs (and passes) without CUDA")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    here = Path(__file__).resolve().parent
    for item in items:
        if Path(str(item.fspath)).resolve().parent == here:
            item.add_marker(pytest.mark.gpu)
            if not has_cuda and item.get_closest_marker("cpu_ok") is None:
                item.add_marker(pytest.mark.skip(reason="needs an NVIDIA GPU (run on the H200)"))

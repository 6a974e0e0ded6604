"""Shared fixtures: the generated tiny model and one real vLLM CPU server per test session."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Tests that interrupt a child with SIGINT (as Ctrl-C would) need the child to act on it. A
# pytest started with SIGINT ignored (a background job of a non-interactive shell) passes that
# disposition on to every child, whose Python then never raises KeyboardInterrupt; a handler, unlike
# SIG_IGN, is reset to the default in a child at exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The checkout's root folder."""
    return REPO


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated tiny Llama checkpoint (see ``sparkpair_cli.tinymodel``)."""
    from sparkpair_cli.tinymodel import generate_tiny_model

    return generate_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def tiny_profile():  # type: ignore[no-untyped-def]
    """The ``tiny-demo`` profile, as the demo uses it."""
    from sparkpair_serving.profile import load_profile

    return load_profile("tiny-demo")


@pytest.fixture(scope="session")
def vllm_server(tiny_model: Path, tiny_profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator:  # type: ignore[no-untyped-def]
    """A real vLLM OpenAI server (CPU build) serving the tiny model with the overlay loaded.

    Started once per test session with the ``tiny-demo`` profile's arguments; tests must
    not stop or break it (start their own server for that).
    """
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer

    logdir = tmp_path_factory.mktemp("vllm-server")
    plan_path = logdir / "kernel-plan.json"
    server = VllmServer.from_profile(
        tiny_profile,
        tiny_model,
        log_path=logdir / "server.log",
        env={"SPARKPAIR_PLAN_PATH": str(plan_path)},
    )
    server.start()
    try:
        server.wait_ready(timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")))
        yield server
    finally:
        server.stop()

"""vLLM's OpenAI server (each release the stack tier runs: 0.33, 0.34) takes its API key from
``VLLM_API_KEY`` in the environment, the way ``sparkpair node run`` hands it over (never on the
command line).

Runs the release's own code: the frontend half of the server's argument parser (``FrontendArgs``,
which owns ``--api-key``; the engine half cannot build on a machine with no device) parsed
with no ``--api-key``, then ``init_entrypoints_middleware`` -- the function its
``build_app`` calls to install the authentication middleware from ``vllm.envs.VLLM_API_KEY``
-- and requests through the app: 401 without the key, through with it, ``/health`` open.
A real 0.33/0.34 server cannot start on a CPU machine (no CPU build), so the app runs in-process;
tests/vllm_real/test_api_key_server.py starts the real 0.32 server through the node's path.
Background: docs/reference/node-env.md, "vLLM's server API key".
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.stack

KEY = "sk-stack-key-7d1e"


def make_app():  # type: ignore[no-untyped-def]
    """A FastAPI app with the release's middleware installed from its default frontend args."""
    from fastapi import FastAPI
    from vllm.entrypoints.common.cli_args import FrontendArgs
    from vllm.entrypoints.serve.middleware.register import init_entrypoints_middleware
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = FrontendArgs.add_cli_args(FlexibleArgumentParser()).parse_args([])
    assert not args.api_key, "the node never passes --api-key"
    app = FastAPI()
    app.get("/v1/sparkpair-probe")(lambda: {"ok": True})
    app.get("/health")(lambda: {"ok": True})
    init_entrypoints_middleware(args, app, ("generate",))
    return app


def test_vllm_guards_v1_with_the_key_from_its_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from starlette.testclient import TestClient

    monkeypatch.setenv("VLLM_API_KEY", KEY)
    c = TestClient(make_app())
    r = c.get("/v1/sparkpair-probe")
    assert r.status_code == 401, r.text
    assert KEY not in r.text
    assert c.get("/v1/sparkpair-probe", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = c.get("/v1/sparkpair-probe", headers={"Authorization": f"Bearer {KEY}"})
    assert ok.status_code == 200 and ok.json() == {"ok": True}
    assert c.get("/health").status_code == 200  # liveness stays open, as vLLM defines it


def test_without_the_variable_vllm_serves_v1_open(monkeypatch: pytest.MonkeyPatch) -> None:
    # The same app with VLLM_API_KEY unset: the 401 above comes from the variable alone.
    from starlette.testclient import TestClient

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    assert TestClient(make_app()).get("/v1/sparkpair-probe").status_code == 200

"""sparkpair's verdict and benchmark for a pair that another tool launched: a vLLM CPU server
started the way eugr/spark-vllm-docker or sparkrun start theirs (vLLM's own entry point, the
launcher's flags: its served name and context, no tool-call parser, and without sparkpair's
overlay), judged with ``sparkpair health``, gated by ``sparkpair gateway`` and measured by
``sparkpair bench``, each given only the server's URL, the ``tiny-elsewhere`` profile (the CPU
stand-in of ``deepseek-v4-flash-elsewhere``) and the served name. About 4 minutes: one server
start, the suite twice, a one-request benchmark."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

SERVED = "other-stack-tiny"
READY_S = float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420"))


@pytest.fixture(scope="module")
def other_stack(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer

    log = tmp_path_factory.mktemp("other-stack") / "server.log"
    # the other launcher's command line; VLLM_PLUGINS='' keeps sparkpair's overlay out, as in
    # an image without it
    server = VllmServer(tiny_model, SERVED, ["--max-model-len", "4096", "--enforce-eager"],
                        env={"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_PLUGINS": ""}, log_path=log)  # fmt: skip
    server.start()
    try:
        server.wait_ready(timeout_s=READY_S)
        yield server
    finally:
        server.stop()


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkpair_cli.main", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def test_health_judges_the_other_stacks_server(other_stack: Any, tmp_path: Path) -> None:
    r = cli("health", "--base-url", other_stack.base_url, "--profile", "tiny-elsewhere",
            "--served-model-name", SERVED, "--report-json", str(tmp_path / "r.json"))  # fmt: skip
    report = json.loads((tmp_path / "r.json").read_text())
    by_id = {c["id"]: c for c in report["checks"]}
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert by_id["models"]["status"] == "pass" and "max_model_len 4096" in by_id["models"]["message"]
    assert by_id["chat"]["status"] == "pass"
    # what needs a launch flag the other stack did not pass is skipped, saying which
    assert (
        by_id["tool_required"]["status"] == "skip"
        and "--tool-call-parser" in by_id["tool_required"]["message"]
    )
    assert by_id["spec_active"]["status"] == "skip"
    # without the served name the profile's ('tiny') is not served: never ready, and said so
    r = cli(
        "health", "--base-url", other_stack.base_url, "--profile", "tiny-elsewhere", "--ready-timeout", "15"
    )
    said = " ".join(r.stdout.split())
    assert r.returncode == 2 and f"listing ['{SERVED}']; waiting for 'tiny'" in said, said


def test_gateway_turns_ready_on_the_other_stacks_server(other_stack: Any, tmp_path: Path) -> None:
    from sparkpair_cli.server import free_port

    port = free_port("127.0.0.1")
    cmd = [sys.executable, "-m", "sparkpair_cli.main", "gateway"]
    gw = subprocess.Popen([*cmd, "--base-url", other_stack.base_url,
                           "--profile", "tiny-elsewhere", "--served-model-name", SERVED, "--port", str(port),
                           "--ready-timeout-s", str(READY_S)],
                          stdout=subprocess.DEVNULL, stderr=(tmp_path / "gw.log").open("w"))  # fmt: skip
    try:
        deadline = time.monotonic() + READY_S + 300
        body: dict[str, Any] = {}
        while time.monotonic() < deadline:
            assert gw.poll() is None, (tmp_path / "gw.log").read_text()[-3000:]
            try:
                r = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)
                body = r.json()
                if r.status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)
        assert body.get("ready") is True, body
    finally:
        gw.terminate()
        gw.wait(timeout=60)


def test_bench_measures_the_other_stacks_server(other_stack: Any, tmp_path: Path) -> None:
    r = cli("bench", "--base-url", other_stack.base_url, "--workload", "quick", "--context", "128",
            "--concurrency", "1", "--requests-per-user", "1", "--no-plots", "--profile", "tiny-elsewhere",
            "--out", str(tmp_path / "b"))  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads((tmp_path / "b" / "result.json").read_text())
    assert json.dumps(result).count(SERVED) >= 1  # the model it measured is the other stack's

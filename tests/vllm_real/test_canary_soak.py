"""The soak: the gateway in front of the real vLLM CPU server under a concurrent load generator
keeps ``/readyz`` at 200 throughout, and reports ``busy`` where its canary was slow on a working
engine (the ``soak`` tier: ``SPARKPAIR_SOAK=1 bash scripts/test.sh`` runs it last and alone;
about :data:`SOAK_S` of load plus a server start, about 4 minutes in all).

The server serves ``tiny-ngram`` (``--max-num-seqs 4``, n-gram speculation) with the tiny model's
whole context and one engine thread (:func:`soak_profile`); the load is the bench client
(``sparkpair bench``: vLLM's own ``bench serve``) at that concurrency with long prompts
(:data:`LONG_PROMPT` tokens, then short ones), :data:`OUTPUT_TOKENS` output tokens each, so the
canary queues behind full batches. The gateway runs with the settings the docker tier's peer
faults (paused, frozen, killed: ``tests/docker/test_peer_death.py``) pass with (canary every 5 s,
10 s deadline), so a canary queued longer than ~8 s is slow. It also proves the engine-signal
names on the real server: ``sparkpair_health.engine_load`` reads vLLM 0.32's ``/metrics`` whole.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
from dsv4_fault_server import Served  # noqa: E402

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow, pytest.mark.soak]

SOAK_S = 180.0
"""Seconds of load (a few minutes, bounded)."""

SERVER_THREADS = 1
"""OpenMP threads of the CPU engine: one of the machine's two cores (on a pair the engine
computes on the GPU and the host's cores serve the gateway). With both, the first run alone read
3 polls "canary stale" with every canary answered."""

MAX_MODEL_LEN = 4096
"""The soak server's context (the tiny model's ``max_position_embeddings``): room for a
:data:`LONG_PROMPT` prompt and :data:`OUTPUT_TOKENS` out, so a request runs for tens of seconds
and a canary queued behind a full batch waits past its slow mark on most ticks. At
``tiny-ngram``'s 2,048 a request took ~11 s and one tick in ~18 was slow: a soak could see none."""

LONG_PROMPT, SHORT_PROMPT, OUTPUT_TOKENS = 2048, 64, 1900
"""The load's prompts and answers, tokens (``LONG_PROMPT + OUTPUT_TOKENS`` plus the chat
template fit :data:`MAX_MODEL_LEN`)."""


STALL_S = 1.0
"""A sleep of the stall watch that overshoots by more than this is a stall of the machine."""

STALL_WATCH = f"""
import sys, time
end = time.monotonic() + float(sys.argv[1]); prev = time.monotonic()
while prev < end:
    time.sleep(0.05)
    now = time.monotonic()
    if now - prev > 0.05 + {STALL_S}:
        print(now, round(now - prev, 2), flush=True)
    prev = now
"""
"""A separate process that prints ``<CLOCK_MONOTONIC> <gap s>`` whenever its 0.05 s sleep ran
over by :data:`STALL_S`: the whole machine stalled (a 2-core VM under the soak's full load did,
for up to 15.6 s), which no timing in this test can survive; a failure names them beside the 503s
(Linux's monotonic clock is one for every process)."""


def soak_profile(tmp_path: Path) -> Path:
    """``tiny-ngram`` with :data:`MAX_MODEL_LEN` and :data:`SERVER_THREADS`, written under
    ``tmp_path`` (the server and the gateway's suite read the same file)."""
    from sparkpair_serving.profile import PROFILES_DIR

    data = yaml.safe_load((PROFILES_DIR / "tiny-ngram.yaml").read_text())
    data["name"] = "tiny-ngram-soak"
    data["server"]["max_model_len"] = MAX_MODEL_LEN
    data["server"].setdefault("env", {})["OMP_NUM_THREADS"] = str(SERVER_THREADS)
    out = tmp_path / "tiny-ngram-soak.yaml"
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


CANARY_INTERVAL_S = 5.0
CANARY_TIMEOUT_S = 10.0


def test_a_real_server_under_load_keeps_readyz_200_and_reports_busy(  # type: ignore[no-untyped-def]
    tiny_model, tmp_path
) -> None:
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.server import VllmServer
    from sparkpair_health.engine_load import parse_engine_load
    from sparkpair_health.gateway import Gateway, GatewaySettings
    from sparkpair_serving.profile import load_profile

    profile_path = soak_profile(tmp_path)
    profile = load_profile(profile_path)
    seqs = profile.server.max_num_seqs()
    assert seqs == 4 and profile.server.max_model_len == MAX_MODEL_LEN
    server = VllmServer.from_profile(profile, tiny_model, log_path=tmp_path / "server.log")
    server.start()
    gw = None
    bench = None
    stalls = None
    try:
        settings = GatewaySettings(
            base_url=server.base_url,
            profile=str(profile_path),
            only=["models", "chat"],
            dsv4_checks=False,
            canary_interval_s=CANARY_INTERVAL_S,
            canary_timeout_s=CANARY_TIMEOUT_S,
            ready_timeout_s=float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "420")),
        )
        gw = Gateway(settings)
        with Served(gw.app) as g:
            gw.start()
            t_end = time.monotonic() + settings.ready_timeout_s
            while httpx.get(g.base_url + "/readyz", timeout=5).status_code != 200:
                assert gw.phase not in ("not_ready", "suite_failed"), gw.failing
                assert time.monotonic() < t_end, gw.failing
                time.sleep(1.0)
            load = parse_engine_load(httpx.get(server.base_url + "/metrics", timeout=10).text)
            assert load is not None, (
                "vLLM's /metrics lacks an engine signal sparkpair_health.engine_load reads"
            )
            assert load.steps > 0, "vllm:iteration_tokens_total_count did not count the suite's steps"
            bench = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sparkpair_cli.cmd_bench",
                    "--base-url",
                    server.base_url,
                    "--out",
                    str(tmp_path / "bench"),
                    "--quick",
                    "--no-plots",
                    "--tokenizer",
                    str(tiny_model),
                    "--concurrency",
                    str(seqs),
                    "--context",
                    f"{LONG_PROMPT},{SHORT_PROMPT}",
                    "--output-tokens",
                    str(OUTPUT_TOKENS),
                    "--requests-per-user",
                    "200",
                ],
                stdout=subprocess.DEVNULL,
                stderr=open(tmp_path / "bench.log", "w"),  # noqa: SIM115 - closed with the process
            )
            stalls = subprocess.Popen(
                [sys.executable, "-c", STALL_WATCH, str(SOAK_S + 30)], stdout=subprocess.PIPE, text=True
            )
            codes: list[tuple[float, int, str]] = []
            peak: dict[str, float] = {"running": 0.0, "waiting": 0.0}
            t0 = time.monotonic()
            while time.monotonic() - t0 < SOAK_S:
                assert bench.poll() is None, (tmp_path / "bench.log").read_text()[-2000:]
                # A generous read timeout: on 2 shared cores the test process itself (the gateway's
                # threads, this poller) can be starved for seconds; an answer that comes is judged.
                r = httpx.get(g.base_url + "/readyz", timeout=15)
                codes.append((time.monotonic() - t0, r.status_code, r.text[:300]))
                now = parse_engine_load(httpx.get(server.base_url + "/metrics", timeout=10).text)
                if now is not None:
                    peak = {k: max(peak[k], getattr(now, k)) for k in peak}
                time.sleep(0.5)
            stalls.terminate()
            seen = [tuple(map(float, ln.split())) for ln in stalls.communicate(timeout=30)[0].splitlines()]
            machine = [(round(at - t0, 1), gap) for at, gap in seen if at >= t0]
            history: list[dict[str, Any]] = list(gw.canary_history)
            bad = [c for c in codes if c[1] != 200]
            busy = [h for h in history if h["kind"] == "busy"]
            print(
                f"soak {SOAK_S:.0f} s: {len(codes)} polls, {len(bad)} not 200; canaries "
                f"{[(h['kind'], h['latency_s']) for h in history]}; peak running {peak['running']:g}, "
                f"waiting {peak['waiting']:g}; machine stalls {machine}"
            )
            if busy:
                print(f"busy: {busy[-1]['cause'][:400]}")
            assert not bad, (
                f"{bad[:3]}; the machine's own stalls (s into the soak, seconds a 0.05 s sleep of a "
                f"separate process overshot, over {STALL_S:g} s): {machine}"
            )
            assert peak["running"] >= seqs and peak["waiting"] >= 1, (
                f"the load never filled the batch: {peak}"
            )
            assert busy, f"no canary was slow on the busy engine: {[h['kind'] for h in history]}"
            assert all(h["kind"] in ("ok", "busy") for h in history), history
    finally:
        if stalls is not None:
            stalls.kill()  # ended by the read above, or left running by a failure before it
        if bench is not None and bench.poll() is None:
            bench.send_signal(signal.SIGINT)
            try:
                bench.wait(60)
            except subprocess.TimeoutExpired:
                bench.kill()
        if gw is not None:
            gw.stop()
        server.stop()

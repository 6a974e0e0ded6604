"""Busy is not wedged: a slow canary on an engine whose own counters move is reported ``busy``
and ``/readyz`` stays 200; a slow canary while the counters stand still, a busy run longer than
``canary_busy_max_s``, and a peer that is down are 503 within their bounds.

The backend is ``tests/faults/health_fault_server.py`` with ``engine_metrics``: its ``/metrics``
exports vLLM's engine counters (running requests, the per-step ``vllm:iteration_tokens_total``
histogram, token counters), moving while a chat request runs on an engine that is not stuck
(``chat_mode`` ``slow``) and standing still while it hangs. The same counters on the real CPU
vLLM under load: ``tests/vllm_real/test_canary_soak.py``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from sparkpair_health.engine_load import EngineLoad, judge_slow, parse_engine_load
from sparkpair_health.gateway import Gateway
from sparkpair_health.gateway.canary import verdict_bound_s

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from dsv4_fault_server import Served  # noqa: E402
from health_fault_server import FaultServer  # noqa: E402
from readyz_poll import wait_readyz  # noqa: E402
from test_gateway_peers import silent_port  # noqa: E402
from test_gateway_verdict import SLACK, gw_settings  # noqa: E402


def load(steps: float, running: float = 1, generated: float = 0) -> EngineLoad:
    return EngineLoad(running, 0, steps, 0, generated, 0)


def test_the_judgement_of_a_slow_answer_reads_the_engines_own_counters() -> None:
    busy, why = judge_slow(load(10), load(12), 8.0)
    assert busy and "vllm:iteration_tokens_total_count +2" in why
    busy, why = judge_slow(load(10), load(10), 8.0)
    assert not busy and "stood still for 8.0 s" in why
    assert judge_slow(None, load(12), 8.0)[0] is False, "no counters: a slow answer stays a timeout"
    assert judge_slow(load(10, running=0), load(12, running=0), 8.0)[0] is False
    # The batch ahead ended just before the last reading, the canary's request not in the engine
    # yet (a starved API server): the engine worked through the wait.
    busy, why = judge_slow(load(10, running=0), load(12, running=0), 8.0, peak_running=4)
    assert busy and "up to 4 during the wait" in why, why
    assert judge_slow(load(10, running=0), load(10, running=0), 8.0, peak_running=4)[0] is False
    assert parse_engine_load("vllm:num_requests_running 1\n") is None, "a series missing: no signal"
    with FaultServer(engine_metrics=True) as srv:
        text = httpx.get(srv.base_url + "/metrics").text
    got = parse_engine_load(text)
    assert got is not None and got.running == 0 and got.steps == 0


def poll_all(url: str, seconds: float) -> list[httpx.Response]:
    out = []
    t_end = time.monotonic() + seconds
    while time.monotonic() < t_end:
        out.append(httpx.get(url + "/readyz", timeout=5))
        time.sleep(0.1)
    return out


@pytest.mark.slow
def test_a_slow_canary_on_a_working_engine_is_busy_and_readyz_stays_200() -> None:
    with FaultServer(engine_metrics=True, hang_s=10.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=4.0))
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                srv.chat_mode = "slow"
                seen = poll_all(g.base_url, 3 * gw.s.stale_after_s)
                bad = [r.text[:300] for r in seen if r.status_code != 200]
                assert not bad, bad
                busy = [r.json() for r in seen if r.json().get("last_canary", {}).get("kind") == "busy"]
                assert busy, "no tick was judged busy"
                assert "the engine is busy, not wedged" in busy[-1]["busy"]
                assert "vllm:iteration_tokens_total_count +" in busy[-1]["last_canary"]["cause"]
                metrics = httpx.get(g.base_url + "/metrics").text
                assert "sparkpair_engine_busy 1.0" in metrics
                assert 'sparkpair_canary_total{result="busy"}' in metrics
                srv.chat_mode = "ok"
                wait_readyz(g.base_url, 200, gw.s.stale_after_s + 8.0)
            finally:
                gw.stop()


@pytest.mark.slow
def test_a_slow_canary_while_the_counters_stand_still_is_503_within_the_bound() -> None:
    with FaultServer(engine_metrics=True, hang_s=30.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=4.0))
        bound = gw.s.stale_after_s
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                srv.chat_mode = "hang"
                took, r = wait_readyz(g.base_url, 503, bound + SLACK + 3.0, "hang")
                assert took <= bound + SLACK, took
                wait_readyz(g.base_url, 503, 2 * bound)  # the tick's own verdict, past staleness
                cause = gw.last_canary["cause"] if gw.last_canary else ""
                assert gw.last_canary and gw.last_canary["kind"] == "timeout", gw.last_canary
                assert "counters stood still" in cause, cause
            finally:
                srv.chat_mode = "ok"
                gw.stop()


@pytest.mark.slow
def test_busy_for_longer_than_canary_busy_max_s_is_a_failure() -> None:
    with FaultServer(engine_metrics=True, hang_s=30.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=4.0, canary_busy_max_s=3.0))
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                srv.chat_mode = "slow"
                limit = gw.s.canary_busy_max_s + verdict_bound_s(gw.s) + SLACK
                _, r = wait_readyz(g.base_url, 503, limit, "busy forever")
                wait_readyz(g.base_url, 503, 2 * gw.s.stale_after_s)
                deadline = time.monotonic() + 2 * gw.s.stale_after_s
                while "canary_busy_max_s" not in (gw.last_canary or {}).get("cause", ""):
                    assert time.monotonic() < deadline, gw.last_canary
                    time.sleep(0.1)
            finally:
                srv.chat_mode = "ok"
                gw.stop()


@pytest.mark.slow
def test_a_peer_that_is_down_is_never_busy() -> None:
    port, held = silent_port()
    try:
        with FaultServer(engine_metrics=True, hang_s=30.0) as srv:
            gw = Gateway(
                gw_settings(
                    srv.base_url, canary_timeout_s=4.0, peers="spark-b=127.0.0.1", peer_probe_port=port
                )
            )
            bound = verdict_bound_s(gw.s)
            with Served(gw.app) as g:
                gw.start()
                try:
                    wait_readyz(g.base_url, 200, 60)
                    srv.chat_mode = "slow"  # counters move, but the peer does not answer
                    wait_readyz(g.base_url, 503, bound + 3.0, "peer down while busy")
                    # staleness may come first; a tick names the peer (FastAPI's compact JSON)
                    named = '"failing_check":"peer"'
                    _, r = wait_readyz(g.base_url, 503, 30.0, "the peer named", containing=named)
                    body = r.json()
                    assert body["failing_check"] == "peer", body
                    assert body["peer_down"]["state"] == "unreachable", body
                finally:
                    srv.chat_mode = "ok"
                    gw.stop()
    finally:
        for s in held:
            s.close()


@pytest.mark.slow
def test_a_late_baseline_on_a_busy_engine_is_sent_again_and_a_still_one_fails() -> None:
    """The baseline tick (right after the suite) follows the same rule as every tick: late on an
    engine whose counters move, it is sent again (up to ``canary_busy_max_s``); late while they
    stand still, the reference fails naming it."""
    import threading

    with FaultServer(engine_metrics=True, hang_s=30.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=3.0, canary_busy_max_s=60.0))
        srv.chat_mode = "slow"
        got: list[str] = []
        t = threading.Thread(target=lambda: got.append(gw.record_reference()))
        t0 = time.monotonic()
        t.start()
        time.sleep(2 * gw.s.canary_timeout_s)  # two late ticks at least
        srv.chat_mode = "ok"
        t.join(timeout=60)
        assert got == [""], got
        assert time.monotonic() - t0 > gw.s.canary_timeout_s and gw.reference is not None
        srv.chat_mode = "hang"
        why = gw.record_reference()
        assert why.startswith("the reference canary failed") and "counters stood still" in why, why
        srv.chat_mode = "ok"


@pytest.mark.slow
def test_a_failed_baseline_is_sent_again_and_the_pair_turns_ready_once_it_passes() -> None:
    """One failed baseline (injected: the real server cannot be made to fail exactly that tick)
    keeps /readyz 503 naming it, and the next canary interval sends the baseline again."""
    import threading

    with FaultServer() as srv:
        gw = Gateway(gw_settings(srv.base_url))
        real = gw.record_reference
        calls: list[str] = []
        seen_injected = threading.Event()

        def first_fails() -> str:
            calls.append("baseline")
            if len(calls) == 1:
                return "the reference canary failed: injected"
            # The resend waits (bounded) until the test has read the 503 naming the failure: on a
            # loaded machine the window between the two baselines can be shorter than one poll.
            seen_injected.wait(timeout=60)
            return real()

        gw.record_reference = first_fails  # type: ignore[method-assign]
        with Served(gw.app) as g:
            gw.start()
            try:
                seen: set[str] = set()
                t_end = time.monotonic() + 120
                while True:
                    r = httpx.get(g.base_url + "/readyz", timeout=5)
                    if r.status_code == 200:
                        break
                    cause = r.json().get("cause", "")
                    seen.add(cause)
                    if cause == "the reference canary failed: injected":
                        seen_injected.set()
                    assert time.monotonic() < t_end, (calls, seen)
                    time.sleep(0.05)
                assert len(calls) >= 2 and not gw.baseline_failed, calls
                assert "the reference canary failed: injected" in seen, seen
            finally:
                seen_injected.set()
                gw.stop()


@pytest.mark.slow
def test_a_counter_read_that_times_out_at_the_ticks_start_falls_back_to_the_last_reading() -> None:
    """Under load the API server may not answer /metrics within the tick's read budget: the last
    reading stands in as ``before`` (the counters only grow), so a late answer on an engine whose
    counters moved since is still busy; with no reading ever, it stays a timeout."""
    with FaultServer(engine_metrics=True, hang_s=30.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=3.0))
        reads = iter([None, load(12)])
        gw.engine_load = lambda timeout_s: next(reads)  # type: ignore[method-assign]
        gw.last_engine_load = load(10)
        srv.chat_mode = "slow"
        res = gw.canary_once()
        assert res.kind == "busy" and "+2" in res.cause, res.cause
        assert gw.last_engine_load == load(12)
        reads = iter([None, load(14)])
        gw.last_engine_load = None
        res = gw.canary_once()
        assert res.kind == "timeout" and "exports no engine counters" in res.cause, res.cause
        srv.chat_mode = "ok"


@pytest.mark.slow
def test_counter_reads_that_answer_late_still_land_within_the_tick() -> None:
    """Under load the API server answered /metrics seconds late, past the few seconds a read
    after the late answer has left (the soak's stale verdicts: "no engine counters"). The tick
    reads the counters beside its requests, so a read that answers late still lands: a late
    answer on an engine whose counters move is busy, one whose counters stand still a timeout
    naming them, and with no read landing at all the cause says how many were tried."""
    with FaultServer(engine_metrics=True, hang_s=30.0, metrics_delay_s=2.5) as srv:
        # requests get 10 s, reads after the answer 2 s; the reads' own slack is seconds wide (loaded CI)
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=12.0))
        srv.chat_mode = "slow"
        res = gw.canary_once()
        assert res.kind == "busy" and "vllm:iteration_tokens_total_count +" in res.cause, res.cause
        assert res.latency_s <= gw.s.canary_timeout_s + 0.5, res.latency_s
        srv.chat_mode = "hang"
        res = gw.canary_once()
        assert res.kind == "timeout" and "counters stood still" in res.cause, res.cause
        srv.metrics_delay_s = 30.0  # no read lands within the tick
        gw.last_engine_load = None
        res = gw.canary_once()
        assert res.kind == "timeout" and "exports no engine counters" in res.cause, res.cause
        assert "/metrics gave 0 of " in res.cause, res.cause
        assert res.latency_s <= gw.s.canary_timeout_s + 0.5, res.latency_s
        srv.chat_mode = "ok"


@pytest.mark.slow
def test_a_tick_whose_first_answer_came_counts_it_as_a_request_that_ran() -> None:
    """The soak on a starved host: the non-streamed canary answered right but late, the stream
    had no time left, and no counter reading caught a request running (the batch ahead ended
    between readings). The answer itself ran in the engine: with the counters moving that is
    busy, not "no request running"; with no answer it stays a timeout."""
    import itertools

    steps = itertools.count(10)
    with FaultServer(engine_metrics=True, chat_delay_s=6.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=12.0))  # requests get 10 s
        gw.engine_load = lambda timeout_s: load(next(steps), running=0)  # type: ignore[method-assign]
        res = gw.canary_once(baseline=True)  # the late answer is the reference, then judged right
        assert len(res.answers) == 1 and res.answers[0].ok, res
        assert res.kind == "busy" and "0 request(s) running (up to 1 during the wait)" in res.cause, res.cause
        srv.chat_delay_s = 30.0  # no answer at all: nothing shows a request ran
        res = gw.canary_once(baseline=True)
        assert res.kind == "timeout" and "no request running" in res.cause, res.cause
        srv.chat_delay_s = 0.0


def test_a_stream_that_keeps_coming_cannot_hold_the_tick_past_its_deadline() -> None:
    """A streamed answer whose events each come within the read timeout but whose whole runs past
    the tick's deadline is cut at the deadline (the soak: a tick ended 10.7 s into a 10 s deadline,
    the stream's last event read after it, and one poll read the verdict stale)."""
    with FaultServer(engine_metrics=True, drip_s=3.0) as srv:
        gw = Gateway(gw_settings(srv.base_url, canary_timeout_s=6.0))  # requests get 4 s
        srv.stream_mode = "drip"
        res = gw.canary_once(baseline=True)
        assert res.kind in ("busy", "timeout") and "streamed canary" in res.cause, res.cause
        assert res.latency_s < gw.s.canary_timeout_s - 1.0, (res.latency_s, res.cause)
        srv.stream_mode = "ok"

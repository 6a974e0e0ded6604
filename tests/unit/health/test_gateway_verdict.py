"""The gateway can only say ready while it is still judging.

A real gateway (uvicorn on 127.0.0.1) is walked through every malformed answer the fault
server (tests/faults/health_fault_server.py) can give the canary: malformed 200 bodies,
a partial body, a slow drip, a wrong content type, another answer, a hang, and a backend
that vanishes; then a backend whose streamed answers alone break, and a cache that replays
answers. The bar: ``/readyz`` never stays 200 longer than one canary interval plus the
canary's deadline (the issue's bound adds 5 s of polling slack, ``verdict_bound_s``; the
walk holds to 0.6 s), its phase never says ready while it answers 503, and the worker
thread never ends. Hypothesis drives arbitrary JSON bodies through the canary's parsing
(:func:`sparkpair_health.decode_answer.judge_decode` and :meth:`Gateway.judge_canary`).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sparkpair_health.decode_answer import DecodeAnswer, judge_decode
from sparkpair_health.gateway import (
    HEAD_START_PERIOD_S,
    Gateway,
    GatewaySettings,
    default_ready_timeout_s,
)
from sparkpair_health.gateway.canary import POLL_SLACK_S, Freshness, verdict_bound_s
from sparkpair_health.gateway.settings import TICK_SLACK_S

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from dsv4_fault_server import Served  # noqa: E402
from health_fault_server import CHAT_MODES, FaultServer  # noqa: E402
from readyz_poll import wait_readyz  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
INTERVAL, DEADLINE = 0.5, 2.5
SLACK = 0.6

RECOVER_S = 30.0
"""How long /readyz may take to come back to 200 once a fault is gone: a liveness bound, not the
verdict's (on a loaded machine a recovery tick with its 2.5 s deadline can itself run out, as one
did in a CI-like run; the next one passes). The bars are on the way to 503."""
"""Polling and scheduling slack of the walk, seconds (the loop polls /readyz every 50 ms)."""


def gw_settings(base_url: str, **kw: Any) -> GatewaySettings:
    base: dict[str, Any] = dict(
        base_url=base_url,
        profile="tiny-demo",
        only=["models", "chat"],
        dsv4_checks=False,
        canary_interval_s=INTERVAL,
        canary_timeout_s=DEADLINE,
        ready_timeout_s=20,
        request_timeout_s=30,  # the suite's requests: a liveness bound on a loaded machine
    )
    base.update(kw)
    return GatewaySettings(**base)


# --------------------------------------------------------------------------- hypothesis

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=20,
)
ANY = JSON | st.just(float("inf"))
SHAPED = st.fixed_dictionaries(
    {},
    optional={
        "choices": ANY | st.lists(st.fixed_dictionaries({}, optional={"message": ANY, "finish_reason": ANY})),
        "usage": ANY | st.fixed_dictionaries({}, optional={"completion_tokens": ANY}),
        "model": ANY,
    },
)
"""OpenAI-shaped bodies with every field possibly of the wrong type, plus arbitrary JSON."""


@settings(max_examples=400, deadline=None)
@given(body=JSON | SHAPED, status=st.sampled_from([200, 200, 200, 401, 500]))
def test_no_json_body_makes_the_canary_parser_raise(body: Any, status: int) -> None:
    ans = judge_decode(status, json.dumps(body))
    assert isinstance(ans, DecodeAnswer)
    assert ans.ok == (ans.problem == "")
    if ans.ok:
        assert status == 200 and isinstance(ans.completion_tokens, int) and ans.completion_tokens >= 1


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=200).map(lambda b: b.decode("utf-8", "replace")))
def test_no_body_text_makes_the_canary_parser_raise(raw: str) -> None:
    assert isinstance(judge_decode(200, raw), DecodeAnswer)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=SHAPED)
def test_the_canary_judgement_never_raises_and_never_accepts_another_answer(body: Any) -> None:
    gw = Gateway(gw_settings("http://127.0.0.1:9"))
    gw.reference = DecodeAnswer(ok=True, text="hello pair", finish_reason="length", completion_tokens=4)
    ans = judge_decode(200, json.dumps(body))
    cause = gw.judge_canary(ans)
    same = (ans.ok, ans.text, ans.finish_reason) == (True, "hello pair", "length")
    assert (cause == "") == same, (body, cause)


# --------------------------------------------------------------------------- the walk


def honest(r: httpx.Response) -> httpx.Response:
    """``r`` (a /readyz answer) after checking that its phase agrees with its status code."""
    body = r.json()
    assert (r.status_code == 200) == (body["phase"] == "ready") == body["ready"], body
    assert "response.." not in body.get("cause", "") and ".. " not in body.get("cause", ""), body
    return r


@pytest.mark.slow
@pytest.mark.parametrize("engine_metrics", [False, True], ids=["no-engine-counters", "engine-counters"])
def test_malformed_answers_drips_and_a_vanishing_backend_never_leave_readyz_200_beyond_the_bound(
    engine_metrics: bool,
) -> None:
    # with the engine's counters exported too (busy vs wedged reads them), every lie and fault
    # is still a 503 within the same bound: a hang or a drip leaves the counters standing
    bound = INTERVAL + DEADLINE
    with FaultServer(hang_s=30.0, drip_s=1.0, engine_metrics=engine_metrics) as srv:
        gw = Gateway(gw_settings(srv.base_url))
        assert gw.s.stale_after_s == bound + TICK_SLACK_S
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                assert gw.reference is not None and gw.reference.text, "no reference answer recorded"
                for mode in [m for m in CHAT_MODES if m != "ok"]:
                    srv.chat_mode = mode
                    took, r = wait_readyz(g.base_url, 503, bound + SLACK + 1.0, mode)
                    assert took <= bound + SLACK, f"{mode}: 200 to a poll sent at {took:.2f} s > {bound} s"
                    body = honest(r).json()
                    assert body["failing_check"] == "canary", (mode, body)
                    assert gw.thread_alive(), f"{mode} ended the canary thread"
                    assert httpx.get(g.base_url + "/livez").status_code == 200
                    srv.chat_mode = "ok"
                    wait_readyz(g.base_url, 200, RECOVER_S, f"back from {mode}")
                srv.close()
                took, r = wait_readyz(g.base_url, 503, bound + SLACK + 1.0)
                assert took <= bound + SLACK and "server went away" in honest(r).json()["cause"]
                metrics = httpx.get(g.base_url + "/metrics").text
                assert "sparkpair_ready 0.0" in metrics
                assert gw.thread_alive() and httpx.get(g.base_url + "/livez").status_code == 200
            finally:
                gw.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "fault, fragment, kind",
    [
        ("stream_empty", "streamed canary: the stream ended without content", "answer"),
        ("replay", "an answer replayed from a cache", "replayed"),
    ],
)
def test_a_backend_breaking_only_streamed_answers_or_replaying_from_a_cache_is_503_within_the_bound(
    fault: str, fragment: str, kind: str
) -> None:
    with FaultServer() as srv:
        gw = Gateway(gw_settings(srv.base_url))
        assert verdict_bound_s(gw.s) == INTERVAL + DEADLINE + POLL_SLACK_S
        with Served(gw.app) as g:
            gw.start()
            try:
                honest(wait_readyz(g.base_url, 200, 60)[1])
                assert gw.freshness.names_requests, "the fault server names answers after request ids"
                if fault == "stream_empty":
                    srv.stream_mode = "empty"  # every stream: `data: [DONE]` only; plain answers fine
                else:
                    srv.replay = True  # a cache in front: the last answers, again and again
                took, r = wait_readyz(g.base_url, 503, INTERVAL + DEADLINE + SLACK + 1.0, fault)
                assert took <= INTERVAL + DEADLINE + SLACK, f"{fault}: still 200 at {took:.2f} s"
                body = honest(r).json()
                assert body["failing_check"] == "canary" and fragment in body["cause"], body
                assert body["last_canary"]["kind"] == kind, body
                srv.stream_mode, srv.replay = "ok", False
                honest(wait_readyz(g.base_url, 200, RECOVER_S, "back")[1])
            finally:
                gw.stop()


def test_freshness_refuses_a_repeated_id_one_not_naming_the_request_and_an_older_created() -> None:
    f = Freshness()
    a = DecodeAnswer(ok=True, text="x", id="chatcmpl-sparkpair-canary-1", created=1000, completion_tokens=1)
    assert f.problem(a, "sparkpair-canary-1") == ""
    f.record(a)
    # a server that does not name answers after requests: ids must be new, created must not go back
    f.learn([(a.model_copy(update={"id": "chatcmpl-abc"}), "sparkpair-canary-1")])
    assert f.names_requests is False
    assert "one an earlier answer had" in f.problem(a, "sparkpair-canary-2")
    old = a.model_copy(update={"id": "chatcmpl-other", "created": 990})
    assert "replayed from a cache" in f.problem(old, "sparkpair-canary-3")
    skew = a.model_copy(update={"id": "chatcmpl-other", "created": 999})
    assert f.problem(skew, "sparkpair-canary-4") == "", "a second back is the clock's rounding"
    # vLLM names each answer after the request's nonce: an id that does not is not fresh, and
    # one that does is, even when the server's clock stepped back
    f.learn([(a, "sparkpair-canary-1")])
    assert f.names_requests is True
    other = a.model_copy(update={"id": "chatcmpl-abc", "created": 1001})
    assert "does not name this request" in f.problem(other, "sparkpair-canary-2")
    stepped = a.model_copy(update={"id": "chatcmpl-sparkpair-canary-5", "created": 900})
    assert f.problem(stepped, "sparkpair-canary-5") == ""
    assert "no id" in f.problem(a.model_copy(update={"id": None}), "x")
    assert "no created" in f.problem(a.model_copy(update={"id": "new", "created": None}), "new")


@pytest.mark.slow
def test_readyz_never_says_ready_while_it_answers_503() -> None:
    now = [0.0]
    with FaultServer() as srv:
        gw = Gateway(gw_settings(srv.base_url), clock=lambda: now[0])
        with Served(gw.app) as g:
            gw.start()
            try:
                seen: set[tuple[int, str]] = set()
                t_end = time.monotonic() + 60
                while gw.phase != "ready" and time.monotonic() < t_end:
                    r = honest(httpx.get(g.base_url + "/readyz", timeout=5))
                    seen.add((r.status_code, r.json()["phase"]))
                    time.sleep(0.01)
                r = honest(httpx.get(g.base_url + "/readyz", timeout=5))
                assert r.status_code == 200, (r.json(), seen)
                gw._canary_tick = lambda: None  # type: ignore[method-assign]  # ticks that judge nothing
                time.sleep(gw.s.canary_timeout_s + 0.5)  # a tick already under way has ended
                now[0] += gw.s.stale_after_s + 1  # the last success is older than the bound
                r = honest(httpx.get(g.base_url + "/readyz", timeout=5))
                assert r.status_code == 503 and r.json()["phase"] == "canary_stale", r.json()
                assert r.json()["cause"].startswith("canary stale")
            finally:
                gw.stop()


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode, fragment",
    [
        ("body_list", "body is JSON list, wanted an object"),
        ("body_usage_str", "without a choices[0] object"),
        ("drip", f"no whole answer within canary_timeout_s={DEADLINE:g} s"),
        ("other_text", "against the reference '"),
        ("wrong_content_type", "not JSON"),
    ],
)
def test_each_bad_canary_answer_is_named(mode: str, fragment: str) -> None:
    with FaultServer(hang_s=30.0, drip_s=1.0) as srv:
        gw = Gateway(gw_settings(srv.base_url))
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                srv.chat_mode = mode
                took, r = wait_readyz(g.base_url, 503, INTERVAL + DEADLINE + SLACK + 1.0)
                if mode == "drip" and fragment not in r.json()["cause"]:
                    # The drip's deadline ends when the last success turns stale (interval +
                    # deadline): on a loaded machine "canary stale" may be the first 503 seen.
                    assert r.json()["cause"].startswith("canary stale"), r.json()
                    time.sleep(SLACK)
                    r = httpx.get(g.base_url + "/readyz", timeout=5)
                assert r.status_code == 503 and fragment in r.json()["cause"], r.json()
                if mode == "drip":
                    assert took <= INTERVAL + DEADLINE + SLACK
            finally:
                gw.stop()


def test_a_trained_models_canary_wants_the_expected_answer_and_a_natural_finish(tmp_path: Path) -> None:
    prof = yaml.safe_load((REPO / "configs/profiles/tiny-demo.yaml").read_text())
    prof["checks"]["semantic"] = {
        "enabled": True,
        "expected_answers": [{"prompt": "Capital of France?", "contains": "Paris", "finish_reason": "stop"}],
    }
    p = tmp_path / "trained.yaml"
    p.write_text(yaml.safe_dump(prof))
    gw = Gateway(gw_settings("http://127.0.0.1:9", profile=str(p)))
    assert gw.canary_request() == ("Capital of France?", 32, "Paris", "stop")
    good = DecodeAnswer(ok=True, text="Paris.", finish_reason="stop", completion_tokens=2)
    assert gw.judge_canary(good) == ""
    junk = DecodeAnswer(ok=True, text="the the the", finish_reason="length", completion_tokens=32)
    cause = gw.judge_canary(junk)
    assert (
        "lacks the profile's expected 'Paris'" in cause and "finish_reason 'length', wanted 'stop'" in cause
    )


@pytest.mark.slow
def test_an_exception_in_the_canary_is_a_verdict_and_the_thread_goes_on() -> None:
    class Broken(Gateway):
        calls = 0

        def judge_canary(self, ans: DecodeAnswer) -> str:
            Broken.calls += 1
            if Broken.calls > 1:
                raise AttributeError("'list' object has no attribute 'get'")
            return super().judge_canary(ans)

        def record_reference(self) -> str:
            return ""

    with FaultServer() as srv:
        gw = Broken(gw_settings(srv.base_url))
        with Served(gw.app) as g:
            gw.start()
            try:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline and Broken.calls < 3:
                    time.sleep(0.1)
                r = httpx.get(g.base_url + "/readyz")
                assert r.status_code == 503
                assert "AttributeError" in r.json()["cause"], r.json()
                assert gw.thread_alive() and httpx.get(g.base_url + "/livez").status_code == 200
            finally:
                gw.stop()


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_livez_and_readyz_fail_once_the_worker_thread_is_gone() -> None:
    def dies(on_progress: Any) -> Any:
        raise KeyboardInterrupt  # a BaseException: nothing in the thread may swallow it

    gw = Gateway(gw_settings("http://127.0.0.1:9"), suite_runner=dies)
    with Served(gw.app) as g:
        gw.start()
        assert gw._thread is not None
        gw._thread.join(5)
        live = httpx.get(g.base_url + "/livez")
        assert live.status_code == 503 and "worker thread has ended" in live.json()["cause"]
        r = httpx.get(g.base_url + "/readyz")
        assert r.status_code == 503


def test_a_canary_that_stopped_running_turns_readyz_503_as_stale() -> None:
    with FaultServer() as srv:
        gw = Gateway(gw_settings(srv.base_url))
        with Served(gw.app) as g:
            gw.start()
            try:
                wait_readyz(g.base_url, 200, 60)
                gw._stop.set()  # the loop ends: no more canaries, while the thread is not asked to die
                took, r = wait_readyz(g.base_url, 503, INTERVAL + DEADLINE + SLACK + 1.0)
                assert took <= INTERVAL + DEADLINE + SLACK
                assert r.json()["cause"].startswith("canary stale") or "thread has ended" in r.json()["cause"]
            finally:
                gw.stop()


# --------------------------------------------------------------------------- start


def test_the_ready_timeout_follows_the_join_timeout_and_the_heads_start_period() -> None:
    compose = yaml.safe_load((REPO / "compose.yaml").read_text())
    sp = compose["services"]["head"]["healthcheck"]["start_period"]
    assert sp.endswith("m") and float(sp[:-1]) * 60 == HEAD_START_PERIOD_S, sp
    assert default_ready_timeout_s({}) == 1800 + HEAD_START_PERIOD_S
    assert default_ready_timeout_s({"SPARKPAIR_JOIN_TIMEOUT_S": "600"}) == 600 + HEAD_START_PERIOD_S
    s = GatewaySettings.from_env({"SPARKPAIR_JOIN_TIMEOUT_S": "600"})
    assert s.ready_timeout_s == 3300
    assert GatewaySettings.from_env({"SPARKPAIR_READY_TIMEOUT_S": "60"}).ready_timeout_s == 60


def test_a_key_starting_with_a_brace_is_a_string_never_json(tmp_path: Path) -> None:
    key = '{"not": json'
    s = GatewaySettings.from_env({"SPARKPAIR_API_KEY": key})
    assert s.api_key is not None and s.api_key.get_secret_value() == key
    assert s.key_source == "SPARKPAIR_API_KEY (env)"
    kf = tmp_path / "k"
    kf.write_text("[abc\n")
    s = GatewaySettings.from_env({"SPARKPAIR_API_KEY_FILE": str(kf)})
    assert s.resolved_api_key() is not None and s.resolved_api_key().get_secret_value() == "[abc"  # type: ignore[union-attr]
    assert s.key_source == f"SPARKPAIR_API_KEY_FILE={kf}"

"""The speculation checks (``checks.speculation``) fail on the fault each exists to catch and pass on a
correct speculating server; the suite's full check list runs them first and last."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from sparkpair_health.checks import check_list
from sparkpair_health.checks.speculation import SPEC_COUNTERS, parse_spec_counters
from sparkpair_health.suite import SuiteSettings, run_suite
from sparkpair_serving.profile import Profile, SpeculationSpec, load_profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from health_fault_server import LIVENESS, FaultServer  # noqa: E402

SPEC_IDS = ["spec_active", "spec_batch_greedy", "spec_acceptance"]


def spec_profile(floor: float = 0.5) -> Profile:
    p = load_profile("tiny-demo").model_copy(deep=True)
    p.server.speculation = SpeculationSpec(method="ngram", num_speculative_tokens=3)
    p.checks.speculation.acceptance_floor = floor
    p.checks.speculation.concurrency = 3
    return p


def run(url: str, profile: Profile):  # type: ignore[no-untyped-def]
    s = SuiteSettings(
        base_url=url,
        profile=profile,
        skip_ready=True,
        timeouts=LIVENESS,
    )
    return run_suite(s, checks=check_list(profile))


@pytest.mark.slow
def test_a_speculating_server_passes_and_the_report_names_the_measured_acceptance_rate() -> None:
    with FaultServer(spec_k=3, acceptance=0.7) as srv:
        report = run(srv.base_url, spec_profile())
    ids = [c.id for c in report.checks]
    assert ids[0] == "spec_active" and ids[-3:-1] == ["spec_batch_greedy", "spec_acceptance"], ids
    for cid in SPEC_IDS:
        assert report.check(cid).status == "pass", report.check(cid).message
    acc = report.check("spec_acceptance")
    assert (
        re.search(r"acceptance rate 0\.[67]\d\d >= floor 0\.5", acc.message)
        and "over the suite's requests" in acc.message
    ), acc.message


@pytest.mark.slow
def test_acceptance_below_the_floor_fails_naming_the_rate_and_the_floor() -> None:
    with FaultServer(spec_k=3, acceptance=0.2) as srv:
        report = run(srv.base_url, spec_profile(floor=0.5))
    res = report.check("spec_acceptance")
    assert res.status == "fail", res.message
    assert re.search(r"acceptance rate 0\.2\d\d over the suite's requests", res.message), res.message
    assert "below the floor 0.500 (the profile's checks.speculation.acceptance_floor)" in res.message


@pytest.mark.slow
def test_the_floor_is_derived_from_the_suites_own_mix_of_chat_and_tool_call_tokens() -> None:
    prof = spec_profile(floor=0.9)  # the fixed floor would fail; the derived one governs
    prof.checks.speculation.chat_acceptance = 0.73
    prof.checks.speculation.tool_acceptance = 0.15
    prof.checks.speculation.floor_margin = 0.6
    with FaultServer(spec_k=3, acceptance=0.45) as srv:
        report = run(srv.base_url, prof)
    res = report.check("spec_acceptance")
    assert res.status == "pass", res.message
    m = re.search(
        r"floor_margin 0.6 x (0\.\d+) expected on the suite's mix: (\d+) chat tokens at 0.73, (\d+) "
        r"tool-call tokens at 0.15",
        res.evidence["floor_from"],
    )
    assert m, res.evidence
    chat, tool = int(m.group(2)), int(m.group(3))
    assert chat > 0 and tool > 0, "the suite sends both kinds"
    assert float(m.group(1)) == pytest.approx((0.73 * chat + 0.15 * tool) / (chat + tool), abs=1e-3)
    with FaultServer(spec_k=3, acceptance=0.2) as srv:
        low = run(srv.base_url, prof).check("spec_acceptance")
    assert low.status == "fail" and "below the floor" in low.message and "suite's mix" in low.message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("kw", "fault", "check_id", "fragment"),
    [
        ({}, None, "spec_active", "/metrics has no vllm:spec_decode_num_draft_tokens_total"),
        (
            {"spec_k": 3},
            "spec_not_drafting",
            "spec_active",
            "raised vllm:spec_decode_num_draft_tokens_total by 0",
        ),
        ({"spec_k": 3}, "spec_not_drafting", "spec_acceptance", "no draft tokens over the suite's requests"),
        ({"spec_k": 3}, "batch_differs", "spec_batch_greedy", "with 3 greedy requests sent together"),
        (
            {"spec_k": 3, "acceptance": 50.0},
            None,
            "spec_acceptance",
            "wanted accepted <= drafted (the counters disagree)",
        ),
    ],
    ids=["no-counters", "not-drafting", "acceptance-no-drafts", "batch-differs", "accepted-over-drafted"],
)
def test_each_speculation_check_fails_on_its_fault(
    kw: dict, fault: str | None, check_id: str, fragment: str
) -> None:
    with FaultServer({fault} if fault else None, **kw) as srv:
        report = run(srv.base_url, spec_profile())
    res = report.check(check_id)
    assert res.status == "fail", (res.status, res.message)
    assert fragment in res.message, res.message
    if check_id == "spec_batch_greedy":
        assert "verify steps of 3 x (3 + 1) = 12 tokens" in res.message


def test_speculation_checks_skip_when_the_profile_sets_no_speculation() -> None:
    with FaultServer() as srv:
        report = run(srv.base_url, load_profile("tiny-demo"))
    assert all(report.check(c).status == "skip" for c in SPEC_IDS)
    assert "sets no server.speculation" in report.check("spec_active").message


def test_counters_parse_summed_over_label_sets_and_absent_means_none() -> None:
    text = (
        "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
        'vllm:spec_decode_num_draft_tokens_total{engine="0"} 10\n'
        'vllm:spec_decode_num_draft_tokens_total{engine="1"} 5\n'
        "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
        'vllm:spec_decode_num_accepted_tokens_total{engine="0"} 6\n'
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0"} 3\n'
    )
    c = parse_spec_counters(text)
    assert c is not None and c.draft_tokens == 15 and c.acceptance_rate == pytest.approx(0.4)
    assert c.mean_accepted_length == pytest.approx(3.0)
    assert (
        parse_spec_counters("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n") is None
    )
    assert set(SPEC_COUNTERS.values()) == {
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    }


@pytest.mark.slow
def test_the_gateway_exports_the_suites_acceptance_rate_as_a_metric() -> None:
    from prometheus_client import generate_latest
    from sparkpair_health.gateway import GatewayMetrics

    with FaultServer(spec_k=3, acceptance=0.7) as srv:
        report = run(srv.base_url, spec_profile())
    m = GatewayMetrics()
    m.record_report([c.model_dump() for c in report.checks], report.passed, 1.0)
    text = generate_latest(m.registry).decode()
    rate = report.check("spec_acceptance").evidence["acceptance_rate"]
    assert f"sparkpair_spec_acceptance_rate {rate}" in text, text
    m.record_report([{"id": "spec_acceptance", "status": "skip", "evidence": {}}], True, 1.0)
    assert "sparkpair_spec_acceptance_rate NaN" in generate_latest(m.registry).decode()


@pytest.mark.parametrize(
    ("text", "start", "fragment"),
    [
        (
            "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 12\n"
            "vllm:spec_decode_num_accepted_tokens_total NaN\n",
            None,
            "is nan (missing or not a number)",
        ),
        (
            "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 12\n",
            None,
            "accepted_tokens_total is nan (missing",
        ),
        (
            "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total +Inf\n"
            "vllm:spec_decode_num_accepted_tokens_total 3\n",
            None,
            "is inf",
        ),
        (
            "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total -12\n"
            "vllm:spec_decode_num_accepted_tokens_total 3\n",
            None,
            "wanted a count >= 0",
        ),
        (
            "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 12\n"
            "vllm:spec_decode_num_accepted_tokens_total 3\n",
            (3.0, 40.0, 2.0),
            "went down from 40 to 12",
        ),
    ],
    ids=["nan", "missing", "inf", "negative", "went-down"],
)
def test_counters_that_cannot_be_believed_are_named(text: str, start: tuple | None, fragment: str) -> None:
    from sparkpair_health.checks.speculation import SpecCounters

    now = parse_spec_counters(text)
    assert now is not None
    why = now.implausible(SpecCounters(*start) if start else None)
    assert why is not None and fragment in why, why
    good = parse_spec_counters(
        "vllm:spec_decode_num_drafts_total 4\nvllm:spec_decode_num_draft_tokens_total 12\n"
        "vllm:spec_decode_num_accepted_tokens_total 3\n"
    )
    assert good is not None and good.implausible() is None

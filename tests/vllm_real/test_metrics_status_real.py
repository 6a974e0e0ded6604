"""Observability against the real servers: the session's tiny vLLM CPU server plus a real gateway.

- Prometheus (Debian's binary, ``scripts/ensure-prometheus.sh``) scrapes vLLM's ``/metrics``
  and the gateway's, and a query through its HTTP API returns the canary-latency series.
- Every expression of the Grafana dashboard (``configs/monitoring/grafana/dashboards/*.json``) parses in
  that Prometheus, and every series it names is one the real servers export (or is listed in
  :data:`NOT_ON_THE_TINY_SERVER` with the reason and a proof that the name is real).
- The status page, loaded in headless Chromium (``scripts/ensure-chromium.sh``): its
  screenshot shows the green READY badge for the ready gateway and the red NOT READY badge
  for a gateway whose server does not serve the model it asks for.

Reuses the session's vLLM server (``vllm_server`` in tests/conftest.py); starts no other.
"""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "faults"))
import obslib  # noqa: E402
from dsv4_fault_server import Served  # noqa: E402
from obslib import badge_pixels, hostport, query, screenshot  # noqa: E402

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((REPO / "configs" / "monitoring" / "grafana" / "dashboards").glob("*.json"))

NOT_ON_THE_TINY_SERVER = {
    "vllm:spec_decode_num_accepted_tokens_total": "no speculative method in the tiny-demo profile",
    "vllm:spec_decode_num_draft_tokens_total": "no speculative method in the tiny-demo profile",
    "sparkpair_container_restart_count": "the stability monitor (Docker) is off in this test",
}
"""Series a dashboard names that the tiny CPU server and this gateway cannot export here."""

METRIC_NAME = re.compile(r"\b(vllm:[a-z_:]+|sparkpair_[a-z_]+)")


def wait(what: str, fn: Any, timeout_s: float, every_s: float = 0.5) -> Any:
    t_end = time.monotonic() + timeout_s
    while True:
        got = fn()
        if got:
            return got
        if time.monotonic() > t_end:
            pytest.fail(f"{what}: not within {timeout_s:g} s")
        time.sleep(every_s)


@pytest.fixture(scope="module")
def ready_gateway(vllm_server: Any) -> Iterator[tuple[Any, str]]:
    """A real gateway (two quick checks, canary every second) that turned ready on the session server."""
    from sparkpair_health.gateway import Gateway, GatewaySettings

    plan = vllm_server.log_path.parent / "kernel-plan.json"
    gw = Gateway(
        GatewaySettings(
            base_url=vllm_server.base_url,
            profile="tiny-demo",
            dsv4_checks=False,
            only=["models", "chat"],
            canary_interval_s=1.0,
            canary_timeout_s=20.0,
            ready_timeout_s=120.0,
            plan_path=plan if plan.is_file() else None,
        )
    )
    with Served(gw.app) as g:
        gw.start()
        try:
            wait("the gateway ready", lambda: httpx.get(g.base_url + "/readyz").status_code == 200, 180)
            yield gw, g.base_url
        finally:
            gw.stop()


@pytest.fixture(scope="module")
def prometheus(ready_gateway: tuple[Any, str], vllm_server: Any, tmp_path_factory: Any) -> Iterator[str]:
    """A real Prometheus scraping the session's vLLM server and the ready gateway every second."""
    with obslib.prometheus(
        hostport(vllm_server.base_url), hostport(ready_gateway[1]), tmp_path_factory.mktemp("prometheus")
    ) as url:
        yield url


def test_prometheus_scrapes_the_real_pair_and_the_canary_latency_series_has_data(prometheus: str) -> None:
    def canaries() -> float:
        res = query(prometheus, "sparkpair_canary_latency_seconds_count")["data"]["result"]
        return float(res[0]["value"][1]) if res else 0.0

    n = wait("canary latency samples in Prometheus", canaries, 60)
    assert n >= 1
    # Each target's health is 'unknown' until its first scrape: wait for both, not just one.
    both_up = [("sparkpair-gateway", "up"), ("vllm", "up")]
    wait("both targets scraped", lambda: obslib.targets(prometheus) == both_up, 30)
    gen = query(prometheus, "vllm:generation_tokens_total")["data"]["result"]
    assert gen and float(gen[0]["value"][1]) > 0, f"vLLM's generated-token counter not scraped: {gen}"


def dashboard_exprs() -> list[tuple[str, str, str]]:
    out = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            for t in panel.get("targets", []):
                out.append((path.name, panel["title"], t["expr"]))
    return out


def problems_of(prom: str, exprs: list[tuple[str, str, str]], exported: set[str]) -> list[str]:
    """Why each dashboard expression is wrong: it does not parse in Prometheus, or it names a
    series the real servers do not export (and :data:`NOT_ON_THE_TINY_SERVER` does not list)."""
    probs = []
    for file, title, expr in exprs:
        r = query(prom, expr)
        if r.get("status") != "success":
            probs.append(f"{file} panel {title!r}: {expr!r} does not parse: {r.get('error')}")
        for name in METRIC_NAME.findall(expr):
            if name not in exported and name not in NOT_ON_THE_TINY_SERVER:
                probs.append(f"{file} panel {title!r}: series {name} is exported by neither server")
    return probs


def exported_names(prom: str) -> set[str]:
    return set(httpx.get(prom + "/api/v1/label/__name__/values").json()["data"])


def test_every_dashboard_expression_parses_and_names_a_series_the_real_servers_export(
    prometheus: str,
) -> None:
    assert DASHBOARDS, "no dashboard under configs/monitoring/grafana/dashboards"
    wait(
        "vLLM's histograms scraped",
        lambda: "vllm:inter_token_latency_seconds_bucket" in exported_names(prometheus),
        30,
    )
    exprs = dashboard_exprs()
    assert len(exprs) >= 10
    assert problems_of(prometheus, exprs, exported_names(prometheus)) == []
    # The series the tiny server cannot show are real names: vLLM's source and the gateway's registry.
    import vllm.v1.spec_decode.metrics as spec_metrics

    text = Path(spec_metrics.__file__).read_text()
    for name in ("vllm:spec_decode_num_accepted_tokens", "vllm:spec_decode_num_draft_tokens"):
        assert f'"{name}"' in text, f"{name} is not in {spec_metrics.__file__}"
    from sparkpair_health.gateway.metrics import GatewayMetrics

    assert GatewayMetrics().container_restarts._name == "sparkpair_container_restart_count"


def test_the_dashboard_check_fails_on_a_typo_and_on_an_unknown_series(prometheus: str) -> None:
    bad = [
        ("x.json", "typo", "sum(rate(vllm:generation_tokens_total[1m])"),
        ("x.json", "unknown", "vllm:generation_tokenz_total"),
    ]
    probs = problems_of(prometheus, bad, exported_names(prometheus))
    assert len(probs) == 2 and "does not parse" in probs[0] and "vllm:generation_tokenz_total" in probs[1], (
        probs
    )


def test_the_status_page_screenshot_shows_the_green_ready_verdict(
    ready_gateway: tuple[Any, str], tmp_path: Path
) -> None:
    from sparkpair_health.gateway.status import COLOURS

    gw, url = ready_gateway
    wait("a canary in the history", lambda: len(gw.canary_history) >= 2, 30)
    html = httpx.get(url + "/status").text
    assert ">READY</div>" in html and "canary-bars" in html
    if gw.s.plan_path is not None:  # the session server's overlay wrote its kernel plan
        assert '<pre id="plan">{' in html, html[-2000:]
    img = screenshot(url + "/status", tmp_path / "status-ready.png")
    assert badge_pixels(img, COLOURS["ready"]) > 5000, (
        f"no green verdict badge in {tmp_path / 'status-ready.png'}"
    )
    assert badge_pixels(img, COLOURS["fail"]) == 0


def test_the_status_page_screenshot_shows_red_not_ready_naming_the_failing_check(
    vllm_server: Any, tmp_path: Path
) -> None:
    from sparkpair_health.gateway import Gateway, GatewaySettings
    from sparkpair_health.gateway.status import COLOURS

    gw = Gateway(
        GatewaySettings(
            base_url=vllm_server.base_url,
            profile="tiny-demo",
            served_model_name="no-such-model",
            dsv4_checks=False,
            only=["models"],
            ready_timeout_s=3.0,
        )
    )
    with Served(gw.app) as g:
        gw.start()
        try:
            wait("the gateway gave up", lambda: gw.gave_up is not None, 60)
            html = httpx.get(g.base_url + "/status").text
            assert ">NOT READY</div>" in html and "failing check: <b>readiness</b>" in html, html[:3000]
            assert "no-such-model" in html
            img = screenshot(g.base_url + "/status", tmp_path / "status-not-ready.png")
        finally:
            gw.stop()
    assert badge_pixels(img, COLOURS["fail"]) > 5000, (
        f"no red verdict badge in {tmp_path / 'status-not-ready.png'}"
    )
    assert badge_pixels(img, COLOURS["ready"]) == 0

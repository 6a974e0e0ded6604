"""The compose ``metrics`` profile's files: Prometheus's config passes ``promtool check config``,
and the Grafana dashboard has the panels the pair needs, wired to the provisioned data source.

The expressions themselves are parsed by a real Prometheus that scrapes the real vLLM server
and gateway (tests/vllm_real/test_metrics_status_real.py). Grafana's own dashboard schema is
not used: npm's ``@grafana/schema`` ships TypeScript types, not a JSON schema (see
docs/observability.md).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]
DASHBOARD = REPO / "configs" / "monitoring" / "grafana" / "dashboards" / "sparkpair-pair.json"
DATASOURCE = REPO / "configs" / "monitoring" / "grafana" / "provisioning" / "datasources" / "prometheus.yml"
PROMETHEUS = REPO / "configs" / "monitoring" / "prometheus" / "prometheus.yml"

WANTED = {
    "verdict": "sparkpair_ready",
    "canary latency": "sparkpair_canary_latency_seconds_bucket",
    "TTFT": "vllm:time_to_first_token_seconds_bucket",
    "ITL": "vllm:inter_token_latency_seconds_bucket",
    "tok/s": "vllm:generation_tokens_total",
    "KV usage": "vllm:kv_cache_usage_perc",
    "preemptions": "vllm:num_preemptions_total",
    "speculative acceptance": "vllm:spec_decode_num_accepted_tokens_total",
    "restarts per node": "sparkpair_container_restart_count",
    "wedge recoveries": "sparkpair_recovery_restarts_total",
}
"""What the pair's dashboard must show (issue: metrics you can look at) and the series for each."""


def problems(dash: dict, datasource_uid: str) -> list[str]:
    """What is wrong with a dashboard's structure (empty list: nothing)."""
    out = []
    panels = dash.get("panels", [])
    ids = [p.get("id") for p in panels]
    if len(set(ids)) != len(ids):
        out.append(f"panel ids repeat: {ids}")
    exprs = " ".join(t.get("expr", "") for p in panels for t in p.get("targets", []))
    for what, series in WANTED.items():
        if series not in exprs:
            out.append(f"no panel shows {what} ({series})")
    for p in panels:
        if not p.get("targets"):
            out.append(f"panel {p.get('title')!r} has no query")
        uids = {(p.get("datasource") or {}).get("uid")} | {
            (t.get("datasource") or {}).get("uid") for t in p.get("targets", [])
        }
        if uids != {datasource_uid}:
            out.append(f"panel {p.get('title')!r} uses data sources {uids}, wanted {datasource_uid!r}")
        g = p.get("gridPos", {})
        if not all(isinstance(g.get(k), int) for k in "xywh") or g["x"] + g["w"] > 24:
            out.append(f"panel {p.get('title')!r} gridPos {g} outside Grafana's 24-column grid")
    return out


def test_the_dashboard_shows_every_series_the_pair_needs_from_the_provisioned_prometheus() -> None:
    uid = yaml.safe_load(DATASOURCE.read_text())["datasources"][0]["uid"]
    dash = json.loads(DASHBOARD.read_text())
    assert problems(dash, uid) == []
    assert dash["uid"] and dash["title"]


def test_the_dashboard_check_fails_on_a_missing_panel_and_a_foreign_data_source() -> None:
    uid = yaml.safe_load(DATASOURCE.read_text())["datasources"][0]["uid"]
    dash = json.loads(DASHBOARD.read_text())
    dash["panels"] = [p for p in dash["panels"] if "kv_cache" not in json.dumps(p)]
    dash["panels"][0]["datasource"] = {"type": "prometheus", "uid": "other"}
    probs = problems(dash, uid)
    assert any("KV usage" in p for p in probs) and any("'other'" in p for p in probs), probs


def test_promtool_accepts_the_shipped_prometheus_config_and_refuses_a_broken_one(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool is not installed: run scripts/ensure-prometheus.sh"
    ok = subprocess.run([promtool, "check", "config", str(PROMETHEUS)], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "prometheus.yml"
    bad.write_text(PROMETHEUS.read_text().replace("scrape_interval: 15s", "scrape_interval: fifteen"))
    r = subprocess.run([promtool, "check", "config", str(bad)], capture_output=True, text=True)
    assert r.returncode != 0 and "fifteen" in r.stdout + r.stderr, r.stdout + r.stderr

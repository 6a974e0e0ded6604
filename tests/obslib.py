"""Observability helpers shared by the vllm_real and docker tiers: a real Prometheus (Debian's
binary, scripts/ensure-prometheus.sh) running the shipped config against given targets, its
query API, and headless Chromium (scripts/ensure-chromium.sh) screenshots of the status page and the
DOM it renders of a page (the owner's report).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[1]
SHIPPED_CONFIG = REPO / "configs" / "monitoring" / "prometheus" / "prometheus.yml"
SHIPPED_TARGETS = {"vllm": "127.0.0.1:8000", "gateway": "127.0.0.1:8080"}
"""The targets configs/monitoring/prometheus/prometheus.yml names (the node env's default ports)."""


def hostport(url: str) -> str:
    """``http://h:p/`` -> ``h:p``."""
    return url.split("://", 1)[1].rstrip("/")


@contextmanager
def prometheus(vllm: str, gateway: str, workdir: Path, interval: str = "1s") -> Iterator[str]:
    """A real Prometheus running the shipped config, its two targets replaced by ``vllm`` and
    ``gateway`` (``host:port``) and its scrape interval by ``interval``; yields its base URL.

    Raises:
        AssertionError: the binary is missing, exits, or is not ready within 60 s (with its log).
    """
    from sparkpair_cli.server import free_port

    exe = shutil.which("prometheus")
    assert exe, "prometheus is not installed: run scripts/ensure-prometheus.sh"
    cfg = SHIPPED_CONFIG.read_text()
    for name, target in (("vllm", vllm), ("gateway", gateway)):
        assert SHIPPED_TARGETS[name] in cfg, f"{SHIPPED_CONFIG} no longer names {SHIPPED_TARGETS[name]}"
        cfg = cfg.replace(SHIPPED_TARGETS[name], target)
    assert "scrape_interval: 15s" in cfg, f"{SHIPPED_CONFIG}: no 'scrape_interval: 15s' to shorten"
    cfg = cfg.replace("scrape_interval: 15s", f"scrape_interval: {interval}")
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "prometheus.yml").write_text(cfg)
    port = free_port()
    logf = workdir / "prometheus.log"
    with logf.open("w") as log:
        proc = subprocess.Popen(
            [
                exe,
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        url = f"http://127.0.0.1:{port}"
        try:
            t_end = time.monotonic() + 60
            while True:
                assert proc.poll() is None, logf.read_text()[-2000:]
                try:
                    if httpx.get(url + "/-/ready", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < t_end, f"prometheus not ready in 60 s:\n{logf.read_text()[-2000:]}"
                time.sleep(0.5)
            yield url
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def query(prom: str, expr: str) -> dict[str, Any]:
    """Prometheus's instant-query answer (``/api/v1/query``) for ``expr``, as JSON."""
    return dict(httpx.get(prom + "/api/v1/query", params={"query": expr}, timeout=10).json())


def value(prom: str, expr: str) -> float | None:
    """The first sample's value of ``expr`` now, or None when the query returns no series."""
    res = query(prom, expr).get("data", {}).get("result", [])
    return float(res[0]["value"][1]) if res else None


def targets(prom: str) -> list[tuple[str, str]]:
    """(job, health) of every active target, sorted."""
    active = httpx.get(prom + "/api/v1/targets", timeout=10).json()["data"]["activeTargets"]
    return sorted((t["labels"]["job"], t["health"]) for t in active)


def screenshot(url: str, png: Path) -> Any:
    """Headless Chromium's 1000×700 screenshot of ``url`` at ``png``, opened as an RGB PIL image."""
    from PIL import Image

    exe = shutil.which("chromium")
    assert exe, "chromium is not installed: run scripts/ensure-chromium.sh"
    r = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,700",
            f"--screenshot={png}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 0 and png.is_file(), r.stderr[-2000:]
    return Image.open(png).convert("RGB")


def rendered_dom(url: str) -> str:
    """The DOM headless Chromium holds after loading ``url`` and running its scripts (``--dump-dom``)."""
    exe = shutil.which("chromium")
    assert exe, "chromium is not installed: run scripts/ensure-chromium.sh"
    r = subprocess.run(
        [exe, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    return r.stdout


def report_sections(dom: str) -> dict[str, str]:
    """Section id -> state (filled/partial/empty) of an owner's report as the browser rendered it."""
    return dict(re.findall(r'<section id="sec-([a-z]+)" data-state="(filled|partial|empty)"', dom))


def badge_pixels(img: Any, hex_colour: str) -> int:
    """Pixels of exactly ``hex_colour`` in the page's top-left corner (where ``#verdict`` sits)."""
    want = bytes.fromhex(hex_colour[1:])
    raw = img.crop((0, 0, 400, 120)).tobytes()  # RGB, 3 bytes a pixel
    return sum(1 for i in range(0, len(raw), 3) if raw[i : i + 3] == want)

"""Sample the server's Prometheus ``/metrics`` while a cell runs.

vLLM (0.25-0.33) exports, among others (``vllm/v1/metrics/loggers.py``):

- gauges ``vllm:kv_cache_usage_perc`` (fraction 0..1, despite the name),
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``;
- counters ``vllm:num_preemptions_total``, ``vllm:prompt_tokens_total``,
  ``vllm:generation_tokens_total``, and with speculative decoding
  ``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
  ``vllm:spec_decode_num_accepted_tokens_total``.

Series with several label sets (engines, models) are summed. An endpoint without
``/metrics`` (not vLLM) gives ``available: false``; that is recorded, not an error.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

GAUGES = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "requests_running": "vllm:num_requests_running",
    "requests_waiting": "vllm:num_requests_waiting",
}
COUNTERS = {
    "preemptions": "vllm:num_preemptions_total",
    "prompt_tokens": "vllm:prompt_tokens_total",
    "generation_tokens": "vllm:generation_tokens_total",
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
    "spec_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "spec_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total",
}


def parse_metrics(text: str) -> dict[str, float]:
    """Extract the :data:`GAUGES` and :data:`COUNTERS` from Prometheus text (summed over labels).

    Keys are the short names; a metric the server does not export is absent.
    """
    wanted = {v: k for k, v in {**GAUGES, **COUNTERS}.items()}
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = wanted.get(sample.name)
            if key is not None:
                out[key] = out.get(key, 0.0) + float(sample.value)
    return out


def summarize_samples(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Summary of a cell's samples: gauge maxima and counter increases.

    Returns ``kv_cache_usage_max`` (fraction), ``requests_running_max``,
    ``requests_waiting_max``, ``preemptions`` (count), ``server_prompt_tokens`` and
    ``server_generation_tokens`` (tokens the server counted, a cross-check of the client's
    count), ``spec_acceptance_rate`` (accepted / drafted tokens) and
    ``spec_acceptance_length`` (1 + accepted / drafts, vLLM's definition), each ``None`` when
    the server did not export it.
    """
    got = [s for s in samples if s.get("values")]
    out: dict[str, Any] = {"available": bool(got), "samples": len(got)}

    def series(key: str) -> list[float]:
        return [s["values"][key] for s in got if key in s["values"]]

    for key in GAUGES:
        vals = series(key)
        out[f"{key}_max"] = max(vals) if vals else None

    def delta(key: str) -> float | None:
        vals = series(key)
        return vals[-1] - vals[0] if len(vals) >= 2 else None

    out["preemptions"] = delta("preemptions")
    out["server_prompt_tokens"] = delta("prompt_tokens")
    out["server_generation_tokens"] = delta("generation_tokens")
    drafts, draft_tokens, accepted = (
        delta("spec_drafts"),
        delta("spec_draft_tokens"),
        delta("spec_accepted_tokens"),
    )
    out["spec_acceptance_rate"] = accepted / draft_tokens if accepted is not None and draft_tokens else None
    out["spec_acceptance_length"] = 1.0 + accepted / drafts if accepted is not None and drafts else None
    return out


class MetricsSampler:
    """Poll ``{base_url}/metrics`` every ``interval_s`` seconds in a daemon thread.

    Each sample is ``{"t_s": seconds since the run's t0, "values": {...}}`` or, when the
    scrape failed, ``{"t_s": ..., "error": "..."}``. A sample is also taken at start and at
    stop, so counter deltas cover the whole cell. Scrapes time out after 5 s; the loop ends
    at :meth:`stop`.
    """

    def __init__(self, base_url: str, interval_s: float, t0: float) -> None:
        self.url = base_url.rstrip("/") + "/metrics"
        self.interval_s = interval_s
        self.t0 = t0
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._client = httpx.Client(timeout=5.0)

    def sample(self) -> dict[str, Any]:
        """Take one sample now and append it."""
        t = time.perf_counter() - self.t0
        try:
            r = self._client.get(self.url)
            r.raise_for_status()
            s: dict[str, Any] = {"t_s": t, "values": parse_metrics(r.text)}
        except (httpx.HTTPError, ValueError) as e:
            s = {"t_s": t, "error": f"{type(e).__name__}: {e}"[:300]}
        self.samples.append(s)
        return s

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def start(self) -> MetricsSampler:
        """Take the first sample and start the thread."""
        self.sample()
        self._thread = threading.Thread(target=self._loop, name="bench-metrics", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[dict[str, Any]]:
        """Stop the thread, take the last sample, and return all samples."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        self.sample()
        self._client.close()
        return self.samples

"""``sparkpair bench``: a serving benchmark against any OpenAI-compatible endpoint.

Modules, in data-flow order:

- :mod:`.workload` — the workload schema (``configs/bench/*.yaml``) and its grid of cells;
- :mod:`.runner` — drives vLLM's own ``vllm bench serve`` per cell, records every
  request, samples the server's ``/metrics`` alongside, saves partial results on Ctrl-C;
- :mod:`.aggregate` — per-cell summary (TTFT, TPOT, ITL, tok/s, prefill tok/s) from the
  raw per-request records;
- :mod:`.provenance` — what was measured, on what (vLLM version, image, overlay plan,
  profile, hosts, driver);
- :mod:`.reference` — the field's published DeepSeek-V4-Flash on 2x GB10 figures;
- :mod:`.report` (rich table), :mod:`.plots` (PNG), :mod:`.compare` (two result files).

Only :mod:`.runner` imports vLLM, and only when a benchmark runs.
"""

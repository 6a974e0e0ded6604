"""The field's DeepSeek-V4-Flash throughput figures on 2x DGX Spark (GB10), TP=2.

Where they come from: ``docs/reference/spark-deployments.md#throughput-figures``; each figure's
own source (repository file or vLLM issue) is kept in :attr:`Figure.source`. The plots draw these next to a run's numbers; they are
other people's measurements on other stacks (speculative decoding, KV dtype, prompts),
so they are anchors, not targets.

Metrics:
- ``per_user_decode_tok_s``: decode tok/s one stream sees (the field's "C1 tok/s");
- ``aggregate_output_tok_s``: output tok/s summed over all streams at ``concurrency``;
- ``prefill_tok_s``: prompt tokens per second of time to first token;
- ``ttft_s``: time to first token for a prompt of ``context_tokens``;
- ``spec_acceptance_rate``: accepted / drafted tokens of speculative decoding (0..1), restated
  in ``docs/reference/speculation.md``.

A figure is a range ``[low, high]`` (equal for a single number). ``context_tokens`` is
``None`` where the source does not say, ``(lo, hi)`` for a stated span.
"""

# ruff: noqa: E501
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

FIELD_NOTES = "docs/reference/spark-deployments.md#throughput-figures"


@dataclass(frozen=True)
class Figure:
    """One published figure (see the module docstring for the metrics)."""

    metric: str
    low: float
    high: float
    concurrency: int | None
    context_tokens: tuple[int, int] | None
    stack: str
    source: str
    note: str = ""

    @property
    def label(self) -> str:
        """Short legend text: stack and figure."""
        val = f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"
        return f"{self.stack}: {val}{(' ' + self.note) if self.note else ''}"


_MIAAI = "MiaAI results/RESULTS-2026-08-14.md"
_ANEMLL = "Anemll README"
# fmt: off
FIGURES: tuple[Figure, ...] = (  # noqa: E501 - one figure per line reads like the notes' table
    # --- single-user decode (C1) ---
    Figure("per_user_decode_tok_s", 62, 83, 1, (256, 131072), "Anemll+MiaAI MTP5", _MIAAI, "C1, flat 256-128K"),
    Figure("per_user_decode_tok_s", 95.9, 95.9, 1, None, "MiaAI CUDA graphs", "MiaAI docs/DEEPSEEK_V4_FLASH_0731.md", "C1"),
    Figure("per_user_decode_tok_s", 48.5, 48.5, 1, None, "Anemll FP8/B12X MTP5", _ANEMLL, "C1, 512 out"),
    Figure("per_user_decode_tok_s", 27.4, 27.4, 1, None, "Anemll no draft", _ANEMLL, "C1"),
    Figure("per_user_decode_tok_s", 33.85, 33.85, 1, None, "Reederey87 MTP2 thinking", "Reederey87 README", "C1"),
    Figure("per_user_decode_tok_s", 52, 52, 1, (8192, 8192), "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "@8K"),
    Figure("per_user_decode_tok_s", 18, 37, 1, (131072, 131072), "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "@128K"),
    Figure("per_user_decode_tok_s", 42, 42, 1, (524288, 524288), "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "@512K"),
    Figure("per_user_decode_tok_s", 74.0, 74.0, 1, (131072, 131072), "colonel-otto MTP4", "colonel-otto benchmarks/summary.csv", "@131K"),
    Figure("per_user_decode_tok_s", 37, 42, 1, None, "jasl preview MTP2", "vllm#41834", "C1"),
    Figure("per_user_decode_tok_s", 8, 8, 6, (32768, 131072), "Anemll+MiaAI MTP5", _MIAAI, "~per stream C4-6, >=32K"),
    # --- aggregate decode ---
    Figure("aggregate_output_tok_s", 162, 191, 6, (256, 256), "Anemll+MiaAI MTP5", _MIAAI, "C6, 256-tok prompts"),
    Figure("aggregate_output_tok_s", 340.5, 340.5, 6, None, "MiaAI CUDA graphs", "MiaAI docs/DEEPSEEK_V4_FLASH_0731.md", "C6"),
    Figure("aggregate_output_tok_s", 103.5, 103.5, 4, None, "Anemll FP8/B12X MTP5", _ANEMLL, "C4 (aggregate assumed)"),
    Figure("aggregate_output_tok_s", 244, 244, 8, None, "Anemll agentic prompt", _ANEMLL, "C8"),
    Figure("aggregate_output_tok_s", 87.78, 87.78, 8, None, "Reederey87 MTP2 thinking", "Reederey87 README", "C8"),
    Figure("aggregate_output_tok_s", 92.6, 92.6, 12, None, "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "C12 incl. prefill"),
    Figure("aggregate_output_tok_s", 191.2, 191.2, 16, None, "colonel-otto MTP4", "colonel-otto benchmarks/summary.csv", "C16"),
    Figure("aggregate_output_tok_s", 172, 172, 32, None, "maci0 b12x", "vllm#47988", "c32"),
    # --- prefill ---
    Figure("prefill_tok_s", 1400, 2600, 1, None, "Anemll+MiaAI MTP5", _MIAAI),
    Figure("prefill_tok_s", 2000, 2300, 1, (1024, 65536), "Anemll FP8/B12X", _ANEMLL, "1K-65K"),
    Figure("prefill_tok_s", 2200, 2700, 1, (1024, 65536), "Anemll W4A4", _ANEMLL, "1K-65K"),
    Figure("prefill_tok_s", 875, 875, 1, (900000, 900000), "Anemll+MiaAI MTP5", _MIAAI, "900K prompt"),
    Figure("prefill_tok_s", 2240, 2240, 1, (524288, 524288), "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "512K in 234 s"),
    Figure("prefill_tok_s", 1600, 1800, 1, None, "jasl preview", "vllm#41834"),
    # --- speculative acceptance (accepted / drafted tokens; docs/reference/speculation.md) ---
    Figure("spec_acceptance_rate", 0.80, 0.80, 1, None, "Reederey87 MTP2 thinking", "Reederey87 README", "k=2"),
    Figure("spec_acceptance_rate", 0.73, 0.73, 1, None, "ecohash 0.27.1 fp8 KV", "ecohash (docs/reference/speculation.md)", "DSpark k=5, chat"),
    Figure("spec_acceptance_rate", 0.15, 0.22, 1, None, "ecohash DSML tool grammar", "ecohash (docs/reference/speculation.md)", "DSpark k=5, tool calls"),
    # --- time to first token ---
    Figure("ttft_s", 79, 79, 1, (131072, 131072), "Anemll+MiaAI MTP5", _MIAAI, "128K"),
    Figure("ttft_s", 234, 234, 1, (524288, 524288), "ecohash 0.27.1 fp8 KV", "ecohash docs/02", "512K"),
)
# fmt: on


def figures(metric: str) -> list[Figure]:
    """The figures of one metric."""
    return [f for f in FIGURES if f.metric == metric]


def as_json() -> dict[str, Any]:
    """All figures, with the notes file they come from, for the result JSON."""
    return {"source": FIELD_NOTES, "figures": [asdict(f) for f in FIGURES]}

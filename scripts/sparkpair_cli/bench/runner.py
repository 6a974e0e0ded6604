"""Run a workload: vLLM's own ``vllm bench serve`` per cell, every request recorded.

For each cell the runner builds the argv of ``vllm bench serve`` (``--backend openai-chat
--dataset-name random --random-input-len C --random-output-len O --max-concurrency U
--num-prompts N --seed S --save-result --save-detailed ...``), parses it with vLLM's own
parser and calls vLLM's ``main`` in this process, once for the warm-up requests and once
for the measured ones. The argv is stored with the results, so anyone can re-run a cell
with ``vllm bench serve`` alone.

What vLLM's tool does not give, the runner adds:

- every request as it finishes (a thin wrapper around vLLM's ``openai-chat`` request
  function, installed only for the duration of a call): the raw records the summaries are
  computed from, the progress bar, and partial results when the run is interrupted;
- ``/metrics`` sampled alongside (:mod:`.server_metrics`);
- provenance, plots, and a result file that is rewritten after every cell and on Ctrl-C.

vLLM's own per-cell result JSON (``--save-detailed``) is kept next to ours
(``vllm/<cell>.json``), and its headline numbers are copied into each cell as
``vllm_bench`` for cross-checking.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from sparkpair_cli.bench import aggregate, server_metrics
from sparkpair_cli.bench.workload import Cell, Workload

RESULT_SCHEMA = "sparkpair.bench/1"
"""``schema`` of the result JSON; bumped when a field changes meaning."""

BACKEND = "openai-chat"
ENDPOINT = "/v1/chat/completions"

VLLM_SUMMARY_KEYS = (
    "duration",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "mean_e2el_ms",
    "median_e2el_ms",
    "p99_e2el_ms",
    "spec_decode_acceptance_rate",
)


class BenchInterrupted(Exception):
    """The run was interrupted (Ctrl-C); partial results were saved to ``path``."""

    def __init__(self, path: Path) -> None:
        super().__init__(f"interrupted; partial results saved to {path}")
        self.path = path


def write_json_atomic(path: Path, data: Any) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and a rename (never half-written)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, default=_json_default))
    os.replace(tmp, path)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):  # numpy scalars in vLLM's result
        return o.item()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def vllm_argv(
    cell: Cell,
    phase: str,
    *,
    workload: Workload,
    base_url: str,
    model_root: str,
    served_model_name: str,
    tokenizer: str,
    tokenizer_mode: str,
    result_dir: Path,
) -> list[str]:
    """argv (after ``vllm bench serve``) that runs ``phase`` (``"warmup"``/``"measured"``) of ``cell``."""
    n = cell.num_requests if phase == "measured" else cell.warmup_requests
    conc = cell.concurrency if phase == "measured" else min(cell.concurrency, cell.warmup_requests)
    extra: dict[str, Any] = {}
    kwargs = workload.thinking_modes[cell.thinking].chat_template_kwargs
    if kwargs:
        extra["chat_template_kwargs"] = kwargs
    argv = [
        "--backend", BACKEND,
        "--endpoint", ENDPOINT,
        "--base-url", base_url,
        "--model", model_root,
        "--served-model-name", served_model_name,
        "--tokenizer", tokenizer,
        "--tokenizer-mode", tokenizer_mode,
        "--dataset-name", "random",
        "--random-input-len", str(cell.context_tokens),
        "--random-output-len", str(cell.output_tokens),
        "--random-range-ratio", "0",
        "--num-prompts", str(n),
        "--max-concurrency", str(conc),
        "--seed", str(cell.seed(phase)),
        "--num-warmups", "0",
        "--ignore-eos",
        "--disable-tqdm",
        "--percentile-metrics", "ttft,tpot,itl,e2el",
        "--metric-percentiles", "50,90,99",
        "--request-id-prefix", f"sparkpair-{cell.id}-{phase}-",
        "--save-result",
        "--save-detailed",
        "--result-dir", str(result_dir),
        "--result-filename", f"{cell.id}.{phase}.json",
    ]  # fmt: skip
    if workload.sampling.temperature is not None:
        argv += ["--temperature", str(workload.sampling.temperature)]
    if workload.sampling.top_p is not None:
        argv += ["--top-p", str(workload.sampling.top_p)]
    if extra:
        argv += ["--extra-body", json.dumps(extra, sort_keys=True)]
    return argv


@contextlib.contextmanager
def _request_hook(
    on_done: Callable[[Any, Any, bool], None], transform: Callable[[Any], Any] = lambda x: x
) -> Iterator[None]:
    """Wrap vLLM's ``openai-chat`` request function: ``on_done(input, output, cancelled)`` per request.

    ``transform`` maps each ``RequestFuncInput`` before it is sent (see :func:`tag_prompt`).

    vLLM 0.32's ``benchmark()`` looks the function up in ``ASYNC_REQUEST_FUNCS`` at call time
    (``vllm/benchmarks/serve.py``); the original is restored on exit.

    Raises:
        RuntimeError: this vLLM has no ``openai-chat`` entry to wrap.
    """
    from vllm.benchmarks.lib import endpoint_request_func as erf

    funcs = erf.ASYNC_REQUEST_FUNCS
    if BACKEND not in funcs:
        raise RuntimeError(
            f"vLLM's benchmark has no {BACKEND!r} backend (known: {sorted(funcs)}); "
            "sparkpair bench needs vLLM >= 0.10's vllm.benchmarks.lib.endpoint_request_func"
        )
    orig = funcs[BACKEND]

    async def recorded(request_func_input: Any, session: Any, pbar: Any = None, **kw: Any) -> Any:
        import asyncio

        request_func_input = transform(request_func_input)
        try:
            out = await orig(request_func_input=request_func_input, session=session, pbar=pbar, **kw)
        except asyncio.CancelledError:
            on_done(request_func_input, None, True)
            raise
        on_done(request_func_input, out, False)
        return out

    funcs[BACKEND] = recorded
    try:
        yield
    finally:
        funcs[BACKEND] = orig


def prompt_tag(cell: Cell, phase: str, request_id: str | None) -> str:
    """The unique tag put in front of one request's prompt: ``#`` and 8 hex digits.

    vLLM's ``random`` dataset draws each prompt as a run of consecutive token ids from a
    random offset (``vllm/benchmarks/datasets/datasets.py``, ``generate_token_sequence``), so
    two requests get the same prompt, or one the prefix of another across cells, with
    probability about N^2 / (2 x vocabulary): ~24 % for the dsv4-pair grid's ~250 prompts on
    DeepSeek-V4's 129,280 tokens, and near certainty on the tiny test model. A shared prefix
    hits the server's prefix cache and fakes a fast TTFT. The tag, derived from the cell seed
    and the request index, makes every prompt's first KV block unique and stays reproducible.
    """
    import hashlib

    key = f"{cell.seed(phase)}:{cell.id}:{phase}:{request_id}"
    return "#" + hashlib.sha256(key.encode()).hexdigest()[:8]


def _prompt_digest(prompt: Any) -> str:
    import hashlib

    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class BenchRun:
    """One run of a workload against one endpoint, writing ``out_dir/result.json``.

    Args:
        workload: the validated workload.
        endpoint: :func:`.provenance.endpoint_info` of the endpoint.
        provenance: :func:`.provenance.collect` output, stored as is.
        out_dir: where ``result.json``, ``vllm/`` and ``vllm-bench.log`` go (created).
        tokenizer: tokenizer path or hub id for vLLM's random prompts (default: the model root).
        tokenizer_mode: vLLM ``--tokenizer-mode`` (``deepseek_v4`` for DeepSeek-V4).
        console: where progress is drawn.
    """

    def __init__(
        self,
        workload: Workload,
        endpoint: dict[str, Any],
        provenance: dict[str, Any],
        out_dir: Path,
        *,
        tokenizer: str | None = None,
        tokenizer_mode: str = "auto",
        console: Console | None = None,
    ) -> None:
        self.workload = workload
        self.endpoint = endpoint
        self.out_dir = out_dir
        self.out_dir.mkdir(parents=True, exist_ok=True)
        (self.out_dir / "vllm").mkdir(exist_ok=True)
        self.result_path = out_dir / "result.json"
        self.log_path = out_dir / "vllm-bench.log"
        self.tokenizer = tokenizer or endpoint.get("model_root") or endpoint["served_model_name"]
        self.tokenizer_mode = tokenizer_mode
        self.console = console or Console(stderr=True)
        self.t0 = time.perf_counter()
        self.records: list[dict[str, Any]] = []
        self.cells: list[dict[str, Any]] = []
        for cell in workload.cells():
            self.cells.append(
                {
                    "id": cell.id,
                    "context_tokens": cell.context_tokens,
                    "output_tokens": cell.output_tokens,
                    "concurrency": cell.concurrency,
                    "thinking": cell.thinking,
                    "chat_template_kwargs": workload.thinking_modes[cell.thinking].chat_template_kwargs,
                    "num_requests": cell.num_requests,
                    "warmup_requests": cell.warmup_requests,
                    "seeds": {"measured": cell.seed("measured"), "warmup": cell.seed("warmup")},
                    "status": "pending",
                    "error": None,
                }
            )
        self.result: dict[str, Any] = {
            "schema": RESULT_SCHEMA,
            "status": "running",
            "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "finished_utc": None,
            "workload": workload.model_dump(mode="json"),
            "provenance": provenance,
            "cells": self.cells,
            "requests": self.records,
        }

    # -- persistence ---------------------------------------------------------------------

    def save(self) -> Path:
        """Rewrite ``result.json`` with everything recorded so far."""
        write_json_atomic(self.result_path, self.result)
        return self.result_path

    # -- one vLLM call -------------------------------------------------------------------

    def _record(self, cell: Cell, phase: str, inp: Any, out: Any, cancelled: bool) -> None:
        rid = getattr(inp, "request_id", None)
        rec: dict[str, Any] = {
            "cell_id": cell.id,
            "phase": phase,
            "request_id": rid,
            "index": int(rid.rsplit("-", 1)[-1]) if rid and rid.rsplit("-", 1)[-1].isdigit() else None,
            "prompt_sha256": _prompt_digest(inp.prompt),
            "requested_prompt_tokens": inp.prompt_len,
            "requested_output_tokens": inp.output_len,
            "cancelled": cancelled,
        }
        if cancelled or out is None:
            rec.update(success=False, error="cancelled: run interrupted while in flight", prompt_tokens=0,
                       output_tokens=0, output_tokens_source=None, start_s=None, ttft_s=None,
                       latency_s=None, itl_s=[])  # fmt: skip
        else:
            n_out = int(out.output_tokens or 0)
            source = "usage"
            if out.success and n_out == 0:
                n_out, source = len(out.itl) + 1, "chunks"
            rec.update(
                success=bool(out.success),
                error=(out.error or None) if not out.success else None,
                prompt_tokens=int(out.prompt_len),
                output_tokens=n_out if out.success else 0,
                output_tokens_source=source if out.success else None,
                start_s=out.start_time - self.t0,
                ttft_s=float(out.ttft) if out.success else None,
                latency_s=float(out.latency),
                itl_s=[float(x) for x in out.itl],
            )
            if rec["error"]:
                rec["error"] = rec["error"][-1000:]
        self.records.append(rec)

    def _call_vllm(self, cell: Cell, phase: str, on_done: Callable[[], None]) -> dict[str, Any]:
        from vllm.benchmarks.serve import add_cli_args, main
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        argv = vllm_argv(
            cell,
            phase,
            workload=self.workload,
            base_url=self.endpoint["base_url"],
            model_root=self.endpoint.get("model_root") or self.endpoint["served_model_name"],
            served_model_name=self.endpoint["served_model_name"],
            tokenizer=self.tokenizer,
            tokenizer_mode=self.tokenizer_mode,
            result_dir=self.out_dir / "vllm",
        )
        parser = FlexibleArgumentParser(prog="vllm bench serve")
        add_cli_args(parser)
        args = parser.parse_args(argv)

        def done(inp: Any, out: Any, cancelled: bool) -> None:
            self._record(cell, phase, inp, out, cancelled)
            on_done()

        def tag(inp: Any) -> Any:
            if not isinstance(inp.prompt, str):
                return inp
            return dataclasses.replace(inp, prompt=f"{prompt_tag(cell, phase, inp.request_id)} {inp.prompt}")

        with (
            self.log_path.open("a") as log,
            contextlib.redirect_stdout(log),
            _request_hook(done, tag),
        ):
            print(f"\n=== {cell.id} {phase}: vllm bench serve {' '.join(argv)}", flush=True)
            result = main(args)
        return {
            "argv": ["vllm", "bench", "serve", *argv],
            "summary": {k: result.get(k) for k in VLLM_SUMMARY_KEYS},
        }

    # -- the run -------------------------------------------------------------------------

    def _run_cell(self, idx: int, cell: Cell, progress: Progress, task: Any) -> None:
        entry = self.cells[idx]
        entry["status"] = "running"
        entry["started_s"] = time.perf_counter() - self.t0
        if cell.warmup_requests:
            progress.update(task, description=f"{cell.id} warm-up", total=cell.warmup_requests, completed=0)
            self._call_vllm(cell, "warmup", lambda: progress.advance(task))
        progress.update(task, description=f"{cell.id}", total=cell.num_requests, completed=0)
        sampler = server_metrics.MetricsSampler(
            self.endpoint["base_url"], self.workload.metrics_interval_s, self.t0
        )
        sampler.start()
        try:
            entry["vllm_bench"] = self._call_vllm(cell, "measured", lambda: progress.advance(task))
        finally:
            samples = sampler.stop()
            entry["server_metrics"] = {
                "summary": server_metrics.summarize_samples(samples),
                "samples": samples,
            }
            entry["finished_s"] = time.perf_counter() - self.t0
            entry["summary"] = aggregate.summarize_cell(r for r in self.records if r["cell_id"] == cell.id)
        entry["status"] = "complete"

    def run(self) -> dict[str, Any]:
        """Run every cell; return the result mapping (also saved to ``result.json``).

        A cell whose vLLM call raises is marked ``failed`` with the error and the run goes on.

        Raises:
            BenchInterrupted: on Ctrl-C (KeyboardInterrupt), after saving the partial results
                with ``status: interrupted`` and the in-flight cell marked ``interrupted``.
        """
        cells = self.workload.cells()
        self.save()
        progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("requests"),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        )
        try:
            with progress:
                overall = progress.add_task("cells", total=len(cells))
                task = progress.add_task("starting", total=1)
                for idx, cell in enumerate(cells):
                    try:
                        self._run_cell(idx, cell, progress, task)
                    except (KeyboardInterrupt, BenchInterrupted):
                        raise
                    except Exception as e:  # noqa: BLE001 - recorded per cell, the run goes on
                        self.cells[idx]["status"] = "failed"
                        self.cells[idx]["error"] = f"{type(e).__name__}: {e}"
                        self.cells[idx]["traceback"] = traceback.format_exc()[-4000:]
                        self.console.print(f"[red]cell {cell.id} failed:[/red] {type(e).__name__}: {e}")
                    progress.advance(overall)
                    self.save()
        except KeyboardInterrupt:
            for entry in self.cells:
                if entry["status"] == "running":
                    entry["status"] = "interrupted"
                    entry["summary"] = aggregate.summarize_cell(
                        r for r in self.records if r["cell_id"] == entry["id"]
                    )
            self.result["status"] = "interrupted"
            self.result["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.save()
            raise BenchInterrupted(self.result_path) from None
        failed = [c for c in self.cells if c["status"] == "failed"]
        self.result["status"] = "failed" if failed and len(failed) == len(self.cells) else "complete"
        self.result["finished_utc"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
        self.save()
        return self.result

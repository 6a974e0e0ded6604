"""``sparkpair probe``'s engine: on-device self-test of every kernel path before ``vllm serve``.

:func:`run_probe` runs, on the node's GPU,

* the overlay's own patched kernels and their upstream alternatives (router GEMM, o_proj
  ``fp8_einsum``: :mod:`sparkpair_overlay.probe.kernels`), and
* every serve path vLLM 0.33 sends through DeepGEMM on family 120, each with the other backends
  vLLM offers for it (:mod:`sparkpair_overlay.probe.serve_paths`),

checks each against fp32/fp64 references, times the correct ones, chooses per serve path
(:func:`sparkpair_overlay.probe.choice.choose`) and writes the ``sparkpair-probe/1`` JSON the
kernel plan reads (``SPARKPAIR_PROBE_RESULTS``; layout in docs/kernels.md "Probe"). The node's
launch passes the serve-path choice to vLLM through its real switches, or stops with the
verdict when a path has no correct candidate.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..plan import capability_family
from ..probe_results import PROBE_SCHEMA
from .choice import (
    ProbeProgress,
    ServeChoice,
    ServePath,
    ServePathError,
    ServeRow,
    choose,
    parse_overrides,
    rows_for_unavailable,
)

__all__ = ["ProbeProgress", "ProbeUnavailable", "measure_serve_paths", "run_probe", "write_probe_json"]

Timer = Callable[[Callable[[], Any]], float]
Progress = Callable[[ProbeProgress], None]


class ProbeUnavailable(RuntimeError):
    """The probe cannot run here (no CUDA device)."""


def _err(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def measure_serve_paths(
    paths: Sequence[ServePath],
    timer: Timer,
    on_progress: Progress | None = None,
    sync: Callable[[], None] = lambda: None,
) -> list[ServeRow]:
    """Discover, run, check and time every candidate of every path at every shape.

    Args:
        paths: the registry (:func:`serve_paths.serve_paths`, or injected candidates in tests).
        timer: ``timer(call) -> µs per call`` (CUDA-graph replay on the device). A timer that
            raises marks the row not ok: the serve captures these kernels in CUDA graphs.
        on_progress: called before each candidate.
        sync: waits for the device after the correctness call (``torch.cuda.synchronize``).

    Returns:
        One :class:`ServeRow` per (candidate, shape). A candidate whose ``discover`` says no
        gets a failed row per shape (``unavailable: ...``); ``run`` or the call raising, a
        NaN/inf output or an error above the path's tolerance give ``ok=False`` with the reason.
    """
    rows: list[ServeRow] = []
    total = sum(len(p.candidates) for p in paths)
    done = 0
    for path in paths:
        for cand in path.candidates:
            if on_progress is not None:
                on_progress(ProbeProgress(f"{path.name}: {cand.name}", done, total))
            done += 1
            try:
                why = cand.discover()
            except Exception as exc:  # noqa: BLE001 - discovery must report, never stop the probe
                why = f"discovery raised {_err(exc)}"
            if why is not None:
                rows += rows_for_unavailable(path, cand, why)
                continue
            for shape in path.shapes:
                row = ServeRow(path.name, cand.name, shape.label, shape.tokens, False)
                try:
                    trial = cand.run(shape)
                    trial.call()
                    sync()
                    err = float(trial.check())
                except Exception as exc:  # noqa: BLE001 - a failing candidate is a probe result
                    rows.append(ServeRow(**{**row.to_json(), "error": _err(exc)}))
                    continue
                if not err <= path.tol:  # NaN compares False: not ok
                    rows.append(
                        ServeRow(
                            **{
                                **row.to_json(),
                                "err": err,
                                "error": f"wrong numbers: error {err:.3g} > tolerance {path.tol:g}",
                            }
                        )
                    )
                    continue
                us: float | None = None
                if shape.tokens > 0:  # 0 tokens: a load-time transform, not timed
                    try:
                        us = float(timer(trial.call))
                    except Exception as exc:  # noqa: BLE001
                        rows.append(
                            ServeRow(
                                **{
                                    **row.to_json(),
                                    "err": err,
                                    "error": f"correct but not CUDA-graph timeable: {_err(exc)}",
                                }
                            )
                        )
                        continue
                rows.append(ServeRow(path.name, cand.name, shape.label, shape.tokens, True, us, err))
    if on_progress is not None:
        on_progress(ProbeProgress("serve paths", total, total))
    return rows


def write_probe_json(out_path: Path, data: Mapping[str, Any]) -> None:
    """Write ``data`` to ``out_path`` atomically (temp file + ``os.replace``)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp = out_path.with_suffix(out_path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, out_path)


def run_probe(
    out_path: Path,
    tp: int = 2,
    on_progress: Progress | None = None,
    *,
    kernels: bool = True,
    registry: Sequence[ServePath] | None = None,
    timer: Timer | None = None,
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Probe the device, choose the serve paths, write the probe JSON to ``out_path``; return it.

    Args:
        out_path: where the JSON goes (``SPARKPAIR_PROBE_RESULTS`` of the node's vLLM).
        tp: tensor-parallel size of the served profile (per-rank shapes).
        on_progress: progress callback (the command shows it).
        kernels: also probe the overlay's router and o_proj kernels (needs CUDA).
        registry: serve paths to probe (default :func:`serve_paths.serve_paths` ``(tp)``).
        timer: µs per call (default CUDA-graph replay, :func:`kernels.graph_us`).
        environ: where ``SPARKPAIR_SERVE_PATHS`` is read (default ``os.environ``).

    Returns:
        The JSON object written: ``schema``, device facts, ``deepgemm`` (which DeepGEMM vLLM
        uses), ``router``, ``o_proj``, ``serve_paths`` (rows) and ``serve_choice``
        (:class:`ServeChoice`: per path the candidate, switch, reason and evidence, the env
        and args for vLLM, and the stop verdict or null). The default registry is probed only
        on capability family 120 (``serve_paths_skipped`` says why not elsewhere).

    Raises:
        ProbeUnavailable: the real probe was asked for (``kernels`` or no injected
            ``timer``) and there is no CUDA device; nothing is written.
        ServePathError: ``SPARKPAIR_SERVE_PATHS`` is malformed.
    """
    from .. import envs
    from ..deepgemm import locate_deepgemm
    from .serve_paths import serve_paths

    paths = tuple(registry) if registry is not None else serve_paths(tp)
    try:
        forced = envs.read("SPARKPAIR_SERVE_PATHS", environ)
    except envs.EnvError as exc:
        raise ServePathError(str(exc)) from None
    overrides = parse_overrides(forced, paths)
    t0 = time.monotonic()
    facts: dict[str, Any] = {"capability": None, "device": "cpu"}
    sync: Callable[[], None] = lambda: None  # noqa: E731
    if kernels or timer is None:
        import torch

        if not torch.cuda.is_available():
            raise ProbeUnavailable("sparkpair probe needs a CUDA device; torch.cuda.is_available() is False")
        import triton

        major, minor = torch.cuda.get_device_capability()
        facts = {
            "capability": [major, minor],
            "device": torch.cuda.get_device_name(),
            "torch": torch.__version__,
            "triton": triton.__version__,
        }
        sync = torch.cuda.synchronize
    router: list[dict[str, Any]] = []
    o_proj: list[dict[str, Any]] = []
    if kernels:
        from . import kernels as kp

        if on_progress:
            on_progress(ProbeProgress("router GEMM", 0, 2))
        router = kp.probe_router()
        if on_progress:
            on_progress(ProbeProgress("o_proj fp8_einsum", 1, 2))
        o_proj = kp.probe_o_proj(tp)
    if timer is None:
        from .kernels import graph_us

        timer = graph_us
    skipped_why = None
    cap = facts["capability"]
    if registry is None and (cap is None or capability_family((cap[0], cap[1])) != 120):
        # The serve paths are family 120's; elsewhere vLLM's DeepGEMM use is upstream's business
        # and the overlay is a no-op (DESIGN.md), so nothing here may stop the node.
        skipped_why = f"serve paths not probed: cap {cap} is not family 120"
        paths = ()
    rows = measure_serve_paths(paths, timer, on_progress, sync)
    choice: ServeChoice = choose(paths, rows, overrides)
    data = {
        "schema": PROBE_SCHEMA,
        **facts,
        "tp_size": tp,
        "seconds": round(time.monotonic() - t0, 1),
        "deepgemm": locate_deepgemm(environ).to_json(),
        "router": router,
        "o_proj": o_proj,
        "serve_paths": [r.to_json() for r in rows],
        "serve_choice": choice.to_json(),
        "serve_paths_skipped": skipped_why,
    }
    write_probe_json(out_path, data)
    return data

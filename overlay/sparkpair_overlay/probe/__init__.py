"""``sparkpair probe``'s engine: on-device self-test of every kernel path before ``vllm serve``.

:func:`run_probe` runs, on the node's GPU,

* the overlay's own patched kernels and their upstream alternatives (router GEMM, o_proj
  ``fp8_einsum`` on every ``wo_a`` layout the served switches can make:
  :mod:`sparkpair_overlay.probe.kernels`), at the served profile's token counts,
* when our kernel serves the o_proj, every config of it at every served token count on the served
  layout (:mod:`sparkpair_overlay.probe.kernel_paths`), from which the config per token-count range is
  chosen (:mod:`sparkpair_overlay.o_proj_configs`),
* every serve path vLLM 0.33 sends through DeepGEMM on family 120, each with the other backends
  vLLM offers for it (:mod:`sparkpair_overlay.probe.serve_paths`), and
* where the model's files are given, the overlay's o_proj on one real layer's ``wo_a``
  (:mod:`sparkpair_overlay.probe.checkpoint`),

checks each against fp32/fp64 references, times the correct ones, chooses per serve path and the
o_proj together (:func:`sparkpair_overlay.probe.joint.choose_with_o_proj`: a linear backend decides
the ``wo_a`` layout the o_proj is handed), keeps the previous file's choices where the new times are
within :data:`~sparkpair_overlay.decision.DECISION_MARGIN` of them (the per-range configs too), and
writes the ``sparkpair-probe/2`` JSON the kernel plan reads (``SPARKPAIR_PROBE_RESULTS``; layout in
docs/kernels.md "Probe"). The node's launch passes the serve-path choice to vLLM through its real
switches, or stops with the verdict when a path has no correct candidate.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..decision import DECISION_MARGIN
from ..jsonio import PlanError
from ..kernel_path_row import KernelPathRow
from ..o_proj_configs import ConfigPlan, choose_config_ranges, layout_key
from ..plan import capability_family
from ..probe_results import (
    PROBE_SCHEMA,
    CheckpointCheck,
    OProjProbe,
    ProbeResults,
    RouterProbe,
)
from ..serve_matrix import Recipe, switches_from_env
from .choice import (
    LINEAR_PATH,
    ProbeProgress,
    ServePath,
    ServePathError,
    ServeRow,
    parse_overrides,
    rows_for_unavailable,
)
from .joint import choose_with_o_proj
from .kernel_paths import ServedTokens, accumulation_summary, served_tokens
from .kernels import O_PROJ_DIMS, O_PROJ_TS

__all__ = [
    "Previous", "ProbeProgress", "ProbeUnavailable", "ServedTokens", "measure_serve_paths",
    "previous_choices", "run_probe", "served_tokens", "write_probe_json",
]

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


OProjRunner = Callable[[int, Sequence[str], str], list[dict[str, Any]]]
CheckpointRunner = Callable[[Sequence[str]], list[CheckpointCheck]]
#: ``(tp, wo_a layout, recipe, token counts) -> kernel_paths rows`` (default
#: :func:`kernel_paths.probe_kernel_paths` on the device).
KernelPathRunner = Callable[[int, str, Recipe, Sequence[int]], list[dict[str, Any]]]


@dataclass(frozen=True)
class Previous:
    """What the probe file at the output path chose last time (made on this device and vLLM).

    Attributes:
        serve: ``{serve path: candidate}`` (forced ones left out).
        o_proj: ``(backend, recipe)`` of the o_proj decision, or ``None``.
        configs: the per-range ``fp8_einsum`` configs it chose, or ``None``.
        note: where they came from, or why none.
    """

    serve: dict[str, str]
    o_proj: tuple[str, Recipe] | None
    configs: ConfigPlan | None
    note: str


def previous_choices(out_path: Path, capability: Any, vllm_version: str | None) -> Previous:
    """What the probe file at ``out_path`` chose last time, if it was made here. A file from another schema,
    device or vLLM is not used."""
    if not out_path.exists():
        return Previous({}, None, None, "no previous probe file")
    try:
        old = ProbeResults.load(out_path, "previous probe file")
    except PlanError as exc:
        return Previous({}, None, None, f"previous probe file not used ({exc})")
    if list(old.capability) != list(capability or []) or old.vllm_version != vllm_version:
        return Previous({}, None, None, "previous probe file is from another device or vLLM: not used")
    serve = {c.path: c.candidate for c in (old.serve_choice.choices if old.serve_choice else ())
             if c.candidate is not None and not c.forced}
    dec = old.o_proj_decision
    return Previous(serve, None if dec is None else (dec.backend, dec.recipe), old.kernel_path_decision,
                    f"previous choices from {out_path}")


def run_probe(
    out_path: Path,
    tp: int = 2,
    on_progress: Progress | None = None,
    *,
    kernels: bool = True,
    registry: Sequence[ServePath] | None = None,
    timer: Timer | None = None,
    environ: Mapping[str, str] | None = None,
    checkpoint_dir: Path | None = None,
    tp_rank: int = 0,
    o_proj_runner: OProjRunner | None = None,
    checkpoint_runner: CheckpointRunner | None = None,
    tokens: ServedTokens | None = None,
    kernel_path_runner: KernelPathRunner | None = None,
) -> dict[str, Any]:
    """Probe the device, choose the serve paths and the o_proj, write the probe JSON; return it.

    Args:
        out_path: where the JSON goes (``SPARKPAIR_PROBE_RESULTS`` of the node's vLLM); the file already
            there (if made on this device and vLLM) supplies the previous choices that near-ties keep.
        tp: tensor-parallel size of the served profile (per-rank shapes).
        on_progress: progress callback (the command shows it).
        kernels: also probe the overlay's router and o_proj kernels (needs CUDA).
        registry: serve paths to probe (default :func:`serve_paths.serve_paths` ``(tp)``).
        timer: µs per call (default CUDA-graph replay, :func:`kernels.graph_us`).
        environ: where ``SPARKPAIR_SERVE_PATHS`` and ``VLLM_USE_DEEP_GEMM*`` are read (default ``os.environ``:
            the probe runs with the environment the served model gets).
        checkpoint_dir: the served model's folder (safetensors + index + config.json): the o_proj is also
            checked on one real layer's ``wo_a`` (this rank's shard, ``tp_rank``).
        o_proj_runner: ``(tp, layouts, deepgemm source) -> rows`` (default :func:`kernels.probe_o_proj`
            when ``kernels``); checkpoint_runner: ``(layouts) -> checks`` (default
            :func:`checkpoint.check_checkpoint` when ``checkpoint_dir``). The CPU tiers inject both.
        tokens: the served profile's token counts (:func:`kernel_paths.served_tokens`): the o_proj rows are
            taken at every capture size and the prefill chunk, the kernel paths also between them;
            ``None``: :data:`kernels.O_PROJ_TS` for both (said in ``token_counts``).
        kernel_path_runner: ``(tp, layout, recipe, ts) -> rows`` (default
            :func:`kernel_paths.probe_kernel_paths` when ``kernels``); run when the o_proj decision is
            Triton's, on its layout and recipe.

    Returns:
        The JSON object written (schema ``sparkpair-probe/2``): device facts, ``vllm``, ``switches`` (the
        environment's, with the chosen ``--linear-backend``), ``deepgemm`` (which DeepGEMM vLLM uses) and
        ``deepgemm_identity``, ``router``, ``o_proj`` (rows with their layouts), ``checkpoint``,
        ``token_counts``, ``kernel_paths`` (rows), ``kernel_path_decision`` (the config per token range),
        ``mx_accumulation``, ``o_proj_decision``, ``margin``, ``serve_paths`` (rows) and ``serve_choice``.
        The default registry is probed only on capability family 120 (``serve_paths_skipped`` says why
        not elsewhere).

    Raises:
        ProbeUnavailable: the real probe was asked for (``kernels`` or no injected
            ``timer``) and there is no CUDA device; nothing is written.
        ServePathError: ``SPARKPAIR_SERVE_PATHS`` or a ``VLLM_USE_DEEP_GEMM*`` value is malformed.
    """
    from .. import envs
    from ..deepgemm import deepgemm_found, locate_deepgemm
    from .serve_paths import serve_paths

    env = os.environ if environ is None else environ
    paths = tuple(registry) if registry is not None else serve_paths(tp)
    try:
        forced = envs.read("SPARKPAIR_SERVE_PATHS", env)
    except envs.EnvError as exc:
        raise ServePathError(str(exc)) from None
    overrides = parse_overrides(forced, paths)
    dg_source, dg_identity = deepgemm_found()
    try:
        base = switches_from_env(env, deepgemm=dg_source)
    except ValueError as exc:
        raise ServePathError(str(exc)) from None
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
    try:
        fake = envs.read("SPARKPAIR_FAKE_CAPABILITY", env)
    except envs.EnvError as exc:
        raise ServePathError(str(exc)) from None
    if fake != "":  # the plan's capability rule (sparkpair_overlay.device): a faked one is what it compares
        facts.update(capability=None if fake is None else list(fake),
                     capability_source="SPARKPAIR_FAKE_CAPABILITY")
    try:
        import vllm

        vllm_version: str | None = str(vllm.__version__)
    except Exception:  # noqa: BLE001 - the probe also runs where vLLM is absent (the GPU tier)
        vllm_version = None
    prev = previous_choices(out_path, facts["capability"], vllm_version)
    o_proj_ts = tokens.o_proj_ts() if tokens is not None else O_PROJ_TS
    path_ts = tokens.kernel_path_ts() if tokens is not None else O_PROJ_TS
    router: list[dict[str, Any]] = []
    if kernels:
        from . import kernels as kp

        if on_progress:
            on_progress(ProbeProgress("router GEMM", 0, 2))
        router = kp.probe_router()
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
    from .kernels import LINEAR_CANDIDATES, o_proj_layouts

    layouts = o_proj_layouts(base, LINEAR_CANDIDATES)
    o_proj: list[dict[str, Any]] = []
    if o_proj_runner is None and kernels:
        from . import kernels as kp

        def o_proj_runner(tp_: int, layouts_: Sequence[str], dg: str) -> list[dict[str, Any]]:
            return kp.probe_o_proj(tp_, layouts_, deepgemm=dg, ts=o_proj_ts)

    if o_proj_runner is not None:
        if on_progress:
            on_progress(ProbeProgress("o_proj fp8_einsum", 1, 2))
        o_proj = o_proj_runner(tp, layouts, dg_source)
    checks: list[CheckpointCheck] = []
    if checkpoint_runner is None and checkpoint_dir is not None:
        from .checkpoint import check_checkpoint

        def checkpoint_runner(layouts_: Sequence[str]) -> list[CheckpointCheck]:
            return check_checkpoint(checkpoint_dir, tp, tp_rank, layouts_)

    ckpt_note = None
    if checkpoint_runner is not None:
        from .checkpoint import CheckpointError

        try:
            checks = checkpoint_runner(layouts)
        except CheckpointError as exc:  # no wo_a in that folder: nothing to check, said in the file
            ckpt_note = str(exc)
    probe = ProbeResults(
        capability=(int(cap[0]), int(cap[1])) if cap else (0, 0),
        router=tuple(RouterProbe.from_json(_fields(r)) for r in router if "layout" in r),
        o_proj=tuple(OProjProbe.from_json(_fields(o)) for o in o_proj),
        switches=base, deepgemm_identity=dg_identity, checkpoint=tuple(checks), vllm_version=vllm_version,
    )
    choice, o_dec = choose_with_o_proj(paths, rows, probe, overrides, previous=prev.serve,
                                       previous_o_proj=prev.o_proj, base=base)
    linear = next((c.candidate for c in choice.choices if c.path == LINEAR_PATH and c.candidate), None)
    served = replace(base, linear_backend=linear or base.linear_backend)
    decision = None
    if o_dec is not None and o_dec.recipe is not None and o_dec.weight_layout is not None \
            and o_dec.source == "probe":
        decision = {"backend": o_dec.backend, "recipe": list(o_dec.recipe),
                    "weight_layout": o_dec.weight_layout, "reason": o_dec.reason}
    path_rows: list[dict[str, Any]] = []
    path_decision: ConfigPlan | None = None
    if kernel_path_runner is None and kernels:

        def kernel_path_runner(tp_: int, weight: str, recipe: Recipe,
                               ts: Sequence[int]) -> list[dict[str, Any]]:
            from .kernel_paths import probe_kernel_paths

            def step(name: str, t: int) -> None:
                if on_progress:
                    on_progress(ProbeProgress(f"o_proj kernel paths: {name} T={t}", 1, 2))

            return probe_kernel_paths(tp_, weight, recipe, ts, on_config=step)

    if kernel_path_runner is not None and o_dec is not None and o_dec.backend == "triton" \
            and o_dec.weight_layout is not None and o_dec.recipe is not None:
        path_rows = kernel_path_runner(tp, o_dec.weight_layout, o_dec.recipe, path_ts)
        layout = layout_key(o_dec.weight_layout, o_dec.recipe)
        old = prev.configs if prev.configs is not None and prev.configs.layout == layout else None
        path_decision = choose_config_ranges([KernelPathRow.from_json(_fields(r)) for r in path_rows], layout,
                                             old.ranges if old is not None else None)
    data = {
        "schema": PROBE_SCHEMA,
        **facts,
        "vllm": vllm_version,
        "tp_size": tp,
        "seconds": round(time.monotonic() - t0, 1),
        "deepgemm": locate_deepgemm(env).to_json(),
        "deepgemm_identity": dg_identity,
        "switches": served.to_json(),
        "router": router,
        "o_proj": o_proj,
        "checkpoint": [c.to_json() for c in checks],
        "checkpoint_skipped": ckpt_note,
        "token_counts": (tokens.to_json() if tokens is not None
                         else {"o_proj": list(O_PROJ_TS), "kernel_paths": list(O_PROJ_TS),
                               "source": "built-in (no profile given)"}),
        "kernel_paths": path_rows,
        "kernel_path_decision": None if path_decision is None else path_decision.to_json(),
        "mx_accumulation": accumulation_summary(path_rows, O_PROJ_DIMS[1]) if path_rows else None,
        "o_proj_decision": decision,
        "margin": DECISION_MARGIN,
        "previous": prev.note,
        "serve_paths": [r.to_json() for r in rows],
        "serve_choice": choice.to_json(),
        "serve_paths_skipped": skipped_why,
    }
    write_probe_json(out_path, data)
    return data


def _fields(row: Mapping[str, Any]) -> Any:
    from ..jsonio import Fields

    return Fields(dict(row), "probe row")

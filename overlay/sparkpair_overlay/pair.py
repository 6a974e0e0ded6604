"""One decision for the pair: every rank of a model serves with the same plan and vLLM switches.

Each node runs its own probe and starts its own vLLM (head and worker of the multi-node ``mp``
executor), so the two tensor-parallel ranks of one model could end up on different backends or
different switches. Three things keep them together:

* choices that near-tie do not follow the clock (:data:`sparkpair_overlay.decision.DECISION_MARGIN`:
  within it the candidate first in a fixed preference order wins, or the one the node's previous
  probe chose), so two nodes with the same GPU and image reach the same choice;
* the decision is persisted with the probe file and kept across starts;
* at model construction, before any weight is read, every rank exchanges its
  :func:`serve_identity` over vLLM's world group (:func:`check_once`); when they differ, each rank
  refuses to build the model with :class:`PairMismatch`, naming every difference per rank and the way
  out. With one rank (no distributed group, or world size 1) there is nothing to compare.

The exchange is one ``torch.distributed.all_gather_object`` on vLLM's CPU (gloo) world group
(``vllm.distributed.parallel_state.get_world_group().cpu_group``); every rank builds the same
layers in the same order, so each reaches its first check.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .envs import REGISTRY

if TYPE_CHECKING:
    from .plan import KernelPlan
    from .serve_matrix import Switches

#: Settings that change what a rank serves (paths and test-only values are not compared).
_COMPARED_SETTINGS = tuple(
    n
    for n in REGISTRY
    if n not in ("SPARKPAIR_PLAN_PATH", "SPARKPAIR_PROBE_RESULTS", "SPARKPAIR_FAKE_CAPABILITY")
)

_LOCK = threading.Lock()
_CHECKED: dict[str, Any] = {}


class PairMismatch(RuntimeError):
    """The ranks of one model would serve with different plans or switches (raised at construction)."""


def serve_identity(plan: KernelPlan, switches: Switches | None) -> dict[str, str]:
    """What must be equal on every rank: vLLM version, decisions (the o_proj kernel's config per token
    range included), switches, ``SPARKPAIR_*`` settings."""
    settings = dict(plan.settings)
    ident = {
        "vllm": plan.vllm_version,
        "capability": "cpu" if plan.capability is None else f"{plan.capability[0]}.{plan.capability[1]}",
        "o_proj": f"{plan.o_proj.label} on {plan.o_proj.weight_layout}",
        "router": f"bf16:{plan.router_bf16.label},fp32:{plan.router_fp32.label}",
        "o_proj_configs": "(none)" if plan.o_proj_configs is None else plan.o_proj_configs.label(),
    }
    if switches is not None:
        ident.update(
            linear_backend=switches.linear_backend,
            VLLM_USE_DEEP_GEMM=str(int(switches.use_deep_gemm)),
            VLLM_USE_DEEP_GEMM_E8M0=str(int(switches.use_deep_gemm_e8m0)),
            deepgemm=switches.deepgemm,
            deepgemm_supported="no" if switches.deepgemm_unsupported else "yes",
        )
    for name in _COMPARED_SETTINGS:
        ident[name] = settings.get(name, "(unset)")
    return ident


def differences(identities: Sequence[Mapping[str, str]]) -> list[str]:
    """One line per key whose value differs between ranks: ``o_proj: rank 0 ..., rank 1 ...``."""
    keys = sorted({k for ident in identities for k in ident})
    out = []
    for k in keys:
        values = [ident.get(k, "(absent)") for ident in identities]
        if len(set(values)) > 1:
            out.append(f"{k}: " + ", ".join(f"rank {i} {v}" for i, v in enumerate(values)))
    return out


def mismatch_message(diffs: Sequence[str], rank: int) -> str:
    """The refusal text for :class:`PairMismatch`."""
    return (
        f"sparkpair overlay: refusing to build the model on rank {rank}: the ranks would serve it "
        "differently "
        f"({'; '.join(diffs)}); wanted one plan and the same vLLM switches on every node: give both nodes "
        "the "
        "same settings (compose env), or force the choice on both (SPARKPAIR_O_PROJ, "
        "SPARKPAIR_O_PROJ_RECIPE, "
        "SPARKPAIR_ROUTER, SPARKPAIR_SERVE_PATHS), or copy the head's probe file to the worker and name it "
        "in "
        "SPARKPAIR_PROBE_RESULTS there"
    )


def _gather(identity: dict[str, str]) -> tuple[list[dict[str, str]], int] | None:
    """Every rank's identity over vLLM's world group, and this rank; ``None`` with one rank."""
    try:
        import torch.distributed as dist
        from vllm.distributed import parallel_state as ps
    except Exception:  # noqa: BLE001 - no torch.distributed / vLLM: a single process
        return None
    if not dist.is_available() or not dist.is_initialized() or getattr(ps, "_WORLD", None) is None:
        return None
    group = ps.get_world_group()
    if group.world_size <= 1:
        return None
    out: list[Any] = [None] * group.world_size
    dist.all_gather_object(out, identity, group=group.cpu_group)
    return [dict(o) for o in out], int(group.rank_in_group)


def check_once(plan: KernelPlan, switches: Switches | None) -> None:
    """Compare this rank's :func:`serve_identity` with every other rank's, once per process.

    Raises:
        PairMismatch: the identities differ (every rank raises it, naming every difference).
    """
    with _LOCK:
        if "result" in _CHECKED:
            if _CHECKED["result"] is not None:
                raise PairMismatch(_CHECKED["result"])
            return
        gathered = _gather(serve_identity(plan, switches))
        message = None
        if gathered is not None:
            idents, rank = gathered
            diffs = differences(idents)
            if diffs:
                message = mismatch_message(diffs, rank)
        _CHECKED["result"] = message
    if message is not None:
        raise PairMismatch(message)


def reset() -> None:
    """Forget the check (tests; a process checks once)."""
    with _LOCK:
        _CHECKED.clear()


__all__ = ["PairMismatch", "check_once", "differences", "mismatch_message", "reset", "serve_identity"]

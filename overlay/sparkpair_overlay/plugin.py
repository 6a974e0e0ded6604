"""Plugin body: read settings, guard the vLLM version, make the plan, patch, log, write.

vLLM calls :func:`sparkpair_overlay.register` once per process (``load_general_plugins``
with its ``plugins_loaded`` guard, vllm/plugins/__init__.py:77-90 in 0.32.0): in the API
server (``EngineArgs.__post_init__``), the engine core (``EngineCore.__init__``) and every
worker (``WorkerWrapperBase.init_worker``) (docs/reference/vllm-code-paths.md#plugin-load-order). A
``fork``ed child inherits both the
patched modules and ``plugins_loaded=True`` and so never calls us; an ``os.register_at_fork``
hook logs the plan line in such a child so that every process still logs it exactly once.

Order inside :func:`register`:

1. parse every ``SPARKPAIR_*`` variable (:mod:`sparkpair_overlay.envs`); a bad value raises
   :class:`~sparkpair_overlay.envs.EnvError` and vLLM stops with it;
2. version guard (:mod:`sparkpair_overlay.versions`): on capability family 120 an unverified
   vLLM stops the process (:class:`~sparkpair_overlay.versions.UnverifiedVllm`, before any weight
   is read) unless ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``; elsewhere it is named in an ERROR and
   nothing is patched;
3. device (:mod:`sparkpair_overlay.device`), probe results, then :func:`plan.build_plan`;
   the kernel modules are imported only if a decision needs them, and an import failure
   turns that decision into ``upstream`` with the error as the reason;
4. patches (:mod:`sparkpair_overlay.patches`) where the plan says so; a patch that fails
   to apply turns its decision into ``upstream`` with the reason; on family 120 the o_proj
   construction check (:func:`sparkpair_overlay.patches.o_proj.construction_check`) is installed
   whatever the backend;
5. the plan line (INFO, one per process) and the plan JSON (``SPARKPAIR_PLAN_PATH``,
   atomic replace; the content carries no pid, so every process writes the same bytes).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import device, envs, versions
from ._log import get_logger
from .plan import (
    KernelPlan,
    OProjDecision,
    PlanError,
    ProbeResults,
    RouterDecision,
    build_plan,
)
from .serve_matrix import Switches, switches_from_env

logger = get_logger("plugin")

ROUTER_KERNEL_MODULE = "sparkpair_overlay.kernels.router_gemm"
O_PROJ_KERNEL_MODULE = "sparkpair_overlay.kernels.fp8_einsum"

_LOCK = threading.Lock()
_PLAN: KernelPlan | None = None
_FORK_HOOK_INSTALLED = False
_KERNELS: dict[str, Any] = {}


def current_plan() -> KernelPlan | None:
    """The plan this process made (``None`` before :func:`register` ran)."""
    return _PLAN


def _load_kernel(module: str, attr: str) -> tuple[Any, str | None]:
    """Import ``module.attr`` lazily; return ``(obj, None)`` or ``(None, reason)``."""
    key = f"{module}.{attr}"
    if key in _KERNELS:
        return _KERNELS[key], None
    try:
        import importlib

        obj = getattr(importlib.import_module(module), attr)
    except Exception as exc:  # noqa: BLE001 - any failure means: fall back to upstream, with the reason
        return None, f"{key}: {type(exc).__name__}: {exc}"
    _KERNELS[key] = obj
    return obj, None


def load_probe_results(path: str) -> tuple[ProbeResults | None, list[str]]:
    """The probe results at ``path`` (``SPARKPAIR_PROBE_RESULTS``) and notes on why not.

    Never raises: the plugin must not stop vLLM over a probe file, so a missing or unusable
    file gives ``(None, [note])`` (logged as an ERROR when unusable) and the plan uses its
    built-in defaults; ``sparkpair plan`` shows the notes and refuses such a file.
    """
    if not path:
        return None, []
    if not Path(path).exists():
        return None, [f"SPARKPAIR_PROBE_RESULTS={path} does not exist; plan uses built-in defaults"]
    try:
        return ProbeResults.load(path), []
    except PlanError as exc:
        logger.error("sparkpair overlay: %s", exc)
        return None, [f"probe results unusable ({exc}); plan uses built-in defaults"]


def plan_switches(env: Mapping[str, str], probe: ProbeResults | None, vllm_version: str) -> Switches:
    """The vLLM switches the plan assumes: ``VLLM_USE_DEEP_GEMM*`` from ``env`` (vLLM's parse), the
    DeepGEMM vLLM will import (:func:`sparkpair_overlay.deepgemm.deepgemm_found`), the release's own
    conditions on it (vLLM 0.34: an ``nvcc`` >= 12.9 found with ``env``,
    :func:`sparkpair_overlay.deepgemm.deepgemm_unsupported`), and the probe's ``--linear-backend``
    (the node passes it to vLLM) or ``auto``. The construction check compares them with what the model
    really gets.

    Raises:
        envs.EnvError: a ``VLLM_USE_DEEP_GEMM*`` value is not an integer.
    """
    from .deepgemm import deepgemm_found, deepgemm_unsupported

    linear = probe.switches.linear_backend if probe is not None and probe.switches is not None else "auto"
    try:
        return switches_from_env(env, linear_backend=linear, deepgemm=deepgemm_found()[0],
                                 deepgemm_unsupported=deepgemm_unsupported(vllm_version, env))
    except ValueError as exc:
        raise envs.EnvError(str(exc)) from None


def linear_backend_of(args: Sequence[str]) -> str:
    """The ``--linear-backend`` a ``vllm serve`` argument list sets (the last one wins, as argparse
    does; ``--linear-backend X`` or ``--linear-backend=X``), else ``auto``."""
    from .serve_args import serve_arg

    return serve_arg(args, "--linear-backend") or "auto"


def launch_problem(env: Mapping[str, str], args: Sequence[str], probe: ProbeResults,
                   vllm_version: str | None) -> str | None:
    """Why a node must not start DeepSeek-V4 on vLLM with ``env`` and ``args``, or ``None``: the checks
    the plugin makes inside vLLM (the version guard at load, the construction check when the attention
    is built), made by ``sparkpair node`` before vLLM starts, from the probe's facts.

    Args:
        env: the environment vLLM will get; args: its ``vllm serve`` arguments.
        probe: the node's probe results (capability, switches, rows, decision).
        vllm_version: ``vllm.__version__`` the probe saw (``None``: unknown).

    Raises:
        envs.EnvError: a ``SPARKPAIR_*`` or ``VLLM_USE_DEEP_GEMM*`` value is malformed.
    """
    from .plan import capability_family, construction_problem, upstream_recipe

    settings = envs.read_all(env)
    cap = probe.capability
    allow = bool(settings["SPARKPAIR_ALLOW_UNVERIFIED_VLLM"])
    version = vllm_version or "unknown"
    stop = versions.guard_problem(version, cap, allow)
    if stop is not None:
        return stop
    if capability_family(cap) != 120:
        return None
    assumed = plan_switches(env, probe, version)
    plan = build_plan(
        vllm_version=version, version_verified=versions.is_verified(version), allow_unverified=allow,
        platform="cuda", capability=cap, router_mode=settings["SPARKPAIR_ROUTER"],
        router_max_m=settings["SPARKPAIR_ROUTER_MAX_M"], o_proj_mode=settings["SPARKPAIR_O_PROJ"],
        o_proj_recipe=settings["SPARKPAIR_O_PROJ_RECIPE"], probe=probe, switches=assumed,
    )
    if not plan.guards_o_proj:
        return None
    actual = dataclasses.replace(assumed, linear_backend=linear_backend_of(args))
    recipe = plan.o_proj.recipe or upstream_recipe(cap)[0]
    _, problem = construction_problem(plan, recipe, actual, probe.deepgemm_identity)
    return None if problem is None else f"DeepSeek-V4 would be refused when vLLM builds it: {problem}"


def make_plan(environ: dict[str, str] | None = None) -> KernelPlan:
    """Gather the inputs and build the plan (imports kernel modules only if needed).

    Raises:
        envs.EnvError: a ``SPARKPAIR_*`` variable is malformed.
    """
    import vllm

    settings = envs.read_all(environ)
    version = str(vllm.__version__)
    verified = versions.is_verified(version)
    allow = bool(settings["SPARKPAIR_ALLOW_UNVERIFIED_VLLM"])
    platform, cap, source = device.detect(environ)
    probe, notes = load_probe_results(settings["SPARKPAIR_PROBE_RESULTS"])
    # Which release the patches were proven on, and how far (versions.RELEASES): in the plan line and JSON.
    notes = [*notes, versions.proof_line(version)]
    env = os.environ if environ is None else environ
    raw = {k: env.get(k) for k in envs.REGISTRY}
    switches = plan_switches(env, probe, version)
    kw: dict[str, Any] = dict(
        vllm_version=version, version_verified=verified, allow_unverified=allow, platform=platform,
        capability=cap, capability_source=source, router_mode=settings["SPARKPAIR_ROUTER"],
        router_max_m=settings["SPARKPAIR_ROUTER_MAX_M"], o_proj_mode=settings["SPARKPAIR_O_PROJ"],
        o_proj_recipe=settings["SPARKPAIR_O_PROJ_RECIPE"], probe=probe,
        settings={k: v for k, v in raw.items() if v is not None}, notes=notes, switches=switches,
    )
    plan = build_plan(**kw)
    # Import our kernels only if a decision takes them; a failure becomes the reason.
    if plan.router_bf16.path != "upstream" or plan.router_fp32.path != "upstream":
        _, kw["router_kernel_error"] = _load_kernel(ROUTER_KERNEL_MODULE, "router_gemm")
    if plan.o_proj.backend == "triton":
        _, kw["o_proj_kernel_error"] = _load_kernel(O_PROJ_KERNEL_MODULE, "fp8_einsum")
    if kw.get("router_kernel_error") or kw.get("o_proj_kernel_error"):
        plan = build_plan(**kw)
    return plan


def _apply_patches(plan: KernelPlan) -> KernelPlan:
    """Apply what the plan says; degrade a decision to upstream if its patch fails."""
    from .patches import o_proj as o_proj_patch
    from .patches import router as router_patch

    notes = list(plan.notes)
    if plan.patches_router:
        kernel, err = _load_kernel(ROUTER_KERNEL_MODULE, "router_gemm")
        try:
            if err:
                raise RuntimeError(err)
            router_patch.apply(plan, kernel)
        except Exception as exc:  # noqa: BLE001 - never leave vLLM half-patched without saying so
            why = f"router patch failed: {type(exc).__name__}: {exc}"
            logger.error("sparkpair overlay: %s; router left to vLLM", why)
            up = RouterDecision("upstream", None, why)
            plan = dataclasses.replace(plan, router_bf16=up, router_fp32=up, router_mode="upstream")
    if plan.patches_o_proj or plan.guards_o_proj:
        kernel = None
        if plan.o_proj.backend == "triton":
            kernel, _ = _load_kernel(O_PROJ_KERNEL_MODULE, "fp8_einsum")
        try:
            notes += o_proj_patch.apply(plan.o_proj, plan.capability, kernel, plan.o_proj.patch_recipe,
                                        plan=plan, rebind_einsum=plan.patches_o_proj)
            if kernel is not None and plan.o_proj_configs is not None:
                use_plan, err = _load_kernel(O_PROJ_KERNEL_MODULE, "use_plan")
                if err:
                    raise RuntimeError(err)
                cfg = plan.o_proj_configs
                use_plan(cfg.ranges, cfg.fp32_scales)  # the kernel's table for the served layout
        except Exception as exc:  # noqa: BLE001
            o_proj_patch.restore()
            why = f"o_proj patch failed: {type(exc).__name__}: {exc}"
            logger.error("sparkpair overlay: %s; o_proj left to vLLM", why)
            o_up = OProjDecision("upstream", None, False, why, source="upstream")
            plan = dataclasses.replace(plan, o_proj=o_up, o_proj_configs=None)
    plan = dataclasses.replace(plan, notes=tuple(notes))
    if plan.patches_router:
        router_patch.use_plan(plan)  # layers built from now on ask the final plan
    return plan


def write_plan(plan: KernelPlan, path: str) -> None:
    """Write ``plan.dumps()`` to ``path`` atomically (temp file in the same folder + ``os.replace``).

    Errors are logged, not raised: a plan file that cannot be written must not stop vLLM.
    """
    if not path:
        return
    target = Path(path)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "w") as f:
            f.write(plan.dumps())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        logger.error("sparkpair overlay: cannot write the plan to SPARKPAIR_PLAN_PATH=%s: %s", path, exc)
        try:
            tmp.unlink()
        except OSError:
            pass


def _emit_plan_line(line: str) -> None:
    """Log the plan line at INFO through vLLM's logger, so it carries vLLM's process prefix.

    In the API server vLLM loads plugins while parsing arguments (``AsyncEngineArgs.add_cli_args``,
    engine/arg_utils.py:3202 in 0.32.0), before it configures its ``vllm`` logger
    (arg_utils.py:2215), so an INFO record would be dropped. Then (and only if vLLM is to
    configure logging, ``VLLM_CONFIGURE_LOGGING`` != 0) the line is written to stderr in
    vLLM's own format instead, so it is never silently lost.
    """
    import logging
    import sys
    import time

    if logging.getLogger("vllm").handlers or os.environ.get("VLLM_CONFIGURE_LOGGING", "1") == "0":
        logger.info("%s", line)
        return
    import multiprocessing

    stamp = time.strftime("%m-%d %H:%M:%S")
    name = multiprocessing.current_process().name
    sys.stderr.write(f"({name} pid={os.getpid()}) INFO {stamp} [plugin.py] {line}\n")
    sys.stderr.flush()


def _log_plan_in_forked_child() -> None:
    if _PLAN is not None:
        _emit_plan_line(_PLAN.line())


def register() -> None:
    """Make the plan, patch, log the plan line and write the plan JSON (idempotent).

    Raises:
        envs.EnvError: a ``SPARKPAIR_*`` variable is malformed (vLLM stops with this error).
        plan.PlanError: likewise for a mode the plan does not know.
        versions.UnverifiedVllm: an unverified vLLM on capability family 120 without
            ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1`` (vLLM stops with it, before any weight is read).
    """
    global _PLAN, _FORK_HOOK_INSTALLED
    with _LOCK:
        if _PLAN is not None:
            return
        plan = make_plan()
        if not plan.version_verified:
            cap = plan.capability if plan.platform == "cuda" else None
            stop = versions.guard_problem(plan.vllm_version, cap, plan.patching_allowed)
            if stop is not None:
                logger.error("%s", stop)
                raise versions.UnverifiedVllm(stop)
            logger.error("%s", versions.unverified_message(plan.vllm_version, plan.patching_allowed))
        if plan.patching_allowed:
            plan = _apply_patches(plan)
        _PLAN = plan
        _emit_plan_line(plan.line())
        write_plan(plan, envs.read("SPARKPAIR_PLAN_PATH"))
        if not _FORK_HOOK_INSTALLED and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_log_plan_in_forked_child)
            _FORK_HOOK_INSTALLED = True


__all__ = [
    "register", "current_plan", "launch_problem", "linear_backend_of", "load_probe_results", "make_plan",
    "plan_switches", "write_plan", "PlanError",
]

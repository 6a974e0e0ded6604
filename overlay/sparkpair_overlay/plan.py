"""The kernel plan: pure decisions from device facts, probe results and overrides.

Everything here is a pure function of its arguments (no vLLM, no torch, no environment
reads), so the whole decision table is unit-tested on a CPU. The plugin
(:mod:`sparkpair_overlay.plugin`) gathers the inputs (capability from vLLM's ``current_platform``
or ``SPARKPAIR_FAKE_CAPABILITY``, env overrides, the probe JSON, whether our kernel modules import)
and calls :func:`build_plan`. The per-layer decisions (router path, o_proj backend and recipe) are
made in :mod:`sparkpair_overlay.plan_decisions`, whose public names this module re-exports; here
they are assembled into the one :class:`KernelPlan`, its JSON file, and the construction check
(:func:`construction_problem`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .decision import DECISION_MARGIN, pick_stable
from .jsonio import Fields, PlanError, read_json_file
from .o_proj_configs import ConfigPlan
from .plan_decisions import (
    DEFAULT_ROUTER_MAX_M,
    ROUTER_PATHS,
    OProjDecision,
    RouterDecision,
    capability_family,
    decide_o_proj,
    decide_o_proj_configs_for,
    decide_router,
    format_capability,
    probe_switch_mismatch,
    recipe_scales_tma_aligned,
    upstream_recipe,
)
from .probe_results import Capability, OProjProbe, ProbeResults, Recipe, RouterProbe
from .serve_matrix import O_PROJ_BACKENDS, RECIPE_SM90, RECIPE_SM100, Switches, Verdict, serve_verdict

__all__ = [
    "DECISION_MARGIN", "DEFAULT_ROUTER_MAX_M", "PLAN_SCHEMA", "RECIPE_SM90", "RECIPE_SM100", "ROUTER_PATHS",
    "Capability", "ConfigPlan", "KernelPlan", "OProjDecision", "OProjProbe", "PlanError", "ProbeResults",
    "Recipe", "RouterDecision", "RouterProbe", "Switches", "build_plan", "capability_family",
    "construction_problem", "decide_o_proj", "decide_o_proj_configs_for", "decide_router",
    "format_capability", "pick_stable", "probe_switch_mismatch", "recipe_scales_tma_aligned",
    "upstream_recipe",
]

#: Schema tag of the plan JSON written to ``SPARKPAIR_PLAN_PATH``.
PLAN_SCHEMA = "sparkpair-kernel-plan/1"


# --------------------------------------------------------------------------- the plan


@dataclass(frozen=True)
class KernelPlan:
    """The one immutable plan of a process.

    Attributes:
        vllm_version: ``vllm.__version__``.
        version_verified: the version is in ``VERIFIED_VLLM_VERSIONS``.
        patching_allowed: verified, or overridden by ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``.
        platform: ``cuda`` | ``rocm`` | ``cpu`` | ...
        capability: ``(major, minor)`` or ``None``.
        capability_source: ``platform`` or ``SPARKPAIR_FAKE_CAPABILITY``.
        router_bf16, router_fp32: decisions for bf16 / fp32 gate weights.
        o_proj: the fp8_einsum decision.
        settings: the ``SPARKPAIR_*`` values the plan was made from (as strings).
        notes: further facts (probe file problems, degraded patches).
        router_mode, router_max_m, kernel errors, probe: inputs kept so a layer can ask
            :meth:`router_decision` for its own weight dtype and shape.
        switches: the vLLM switches the o_proj decision assumed (environment, DeepGEMM found, and
            the probe's ``--linear-backend``); ``None`` off family 120.
        o_proj_configs: when our kernel serves the o_proj, the ``fp8_einsum`` config per token-count
            range for the served layout (:func:`decide_o_proj_configs_for`); ``None`` otherwise.
    """

    vllm_version: str
    version_verified: bool
    patching_allowed: bool
    platform: str
    capability: Capability | None
    capability_source: str
    router_bf16: RouterDecision
    router_fp32: RouterDecision
    o_proj: OProjDecision
    settings: tuple[tuple[str, str], ...] = ()
    notes: tuple[str, ...] = ()
    router_mode: str = "auto"
    router_max_m: int | None = None
    router_kernel_error: str | None = None
    probe: ProbeResults | None = field(default=None, compare=False)
    switches: Switches | None = None
    o_proj_configs: ConfigPlan | None = None

    @property
    def guards_o_proj(self) -> bool:
        """True when the construction check must be installed: family 120 with patching allowed,
        whatever the o_proj backend (``upstream`` included: a switch can break vLLM's own path too)."""
        return self.patching_allowed and self.platform == "cuda" and capability_family(self.capability) == 120

    @property
    def patches_router(self) -> bool:
        """True when the ``GateLinear`` subclass must be registered."""
        return self.patching_allowed and (
            self.router_bf16.path != "upstream" or self.router_fp32.path != "upstream")

    @property
    def patches_o_proj(self) -> bool:
        """True when ``fp8_einsum`` must be rebound to the dispatcher."""
        return self.patching_allowed and self.o_proj.backend != "upstream"

    def router_decision(self, weight_dtype: str, shape: tuple[int, int] | None) -> RouterDecision:
        """The decision for one ``GateLinear`` (weight dtype name, ``(N, K)``), same inputs as the plan."""
        if not self.patching_allowed:
            return RouterDecision("upstream", None, "patching disabled")
        return decide_router(
            self.capability, weight_dtype, mode=self.router_mode, max_m_override=self.router_max_m,
            probe=self.probe, kernel_error=self.router_kernel_error, shape=shape, platform=self.platform,
        )

    def line(self) -> str:
        """The one log line: ``sparkpair overlay plan: router=... o_proj=... (vllm X, cap Y, reasons...)``."""
        router = f"bf16:{self.router_bf16.label},fp32:{self.router_fp32.label}"
        reasons = [f"router bf16: {self.router_bf16.reason}", f"router fp32: {self.router_fp32.reason}",
                   f"o_proj: {self.o_proj.reason}"]
        if self.o_proj_configs is not None:
            c = self.o_proj_configs
            reasons.append(f"o_proj configs ({c.source}): {c.label()}")
        reasons += self.notes
        cap = format_capability(self.capability)
        if self.capability_source != "platform":
            cap += f" via {self.capability_source}"
        ver = f"vllm {self.vllm_version}" + ("" if self.version_verified else " UNVERIFIED")
        return (f"sparkpair overlay plan: router={router} o_proj={self.o_proj.label} "
                f"({ver}, cap {cap}, {'; '.join(reasons)})")

    def to_json(self) -> dict[str, Any]:
        """The JSON object written to ``SPARKPAIR_PLAN_PATH`` (no pid: identical in every process)."""
        return {
            "schema": PLAN_SCHEMA,
            "vllm_version": self.vllm_version,
            "version_verified": self.version_verified,
            "patching_allowed": self.patching_allowed,
            "platform": self.platform,
            "capability": list(self.capability) if self.capability else None,
            "capability_source": self.capability_source,
            "router": {"bfloat16": asdict(self.router_bf16), "float32": asdict(self.router_fp32)},
            "o_proj": {**asdict(self.o_proj),
                       "recipe": list(self.o_proj.recipe) if self.o_proj.recipe else None,
                       "label": self.o_proj.label},
            "switches": None if self.switches is None else self.switches.to_json(),
            "o_proj_configs": None if self.o_proj_configs is None else self.o_proj_configs.to_json(),
            "settings": dict(self.settings),
            "serve_paths": (self.probe.serve_choice.to_json()
                            if self.probe is not None and self.probe.serve_choice is not None else None),
            "notes": list(self.notes),
            "line": self.line(),
            # the inputs :meth:`router_decision` needs, so a plan read back decides as this one
            "router_mode": self.router_mode,
            "router_max_m": self.router_max_m,
            "router_kernel_error": self.router_kernel_error,
            "probe": None if self.probe is None else self.probe.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "plan JSON") -> KernelPlan:
        """Parse the object :meth:`to_json` writes (``line`` and ``serve_paths`` are derived).

        Raises:
            PlanError: not an object, another schema tag, or a field of the wrong type or
                value; the message names ``source``, the key, the value seen and the value wanted.
        """
        f = Fields(data, source)
        if f.data.get("schema") != PLAN_SCHEMA:
            wanted = f"{PLAN_SCHEMA!r} (a kernel plan JSON written by the overlay to SPARKPAIR_PLAN_PATH)"
            raise f.fail("schema", f.data.get("schema"), wanted)
        cap = f.ints("capability", 2)
        router = f.obj("router")
        router_bf16 = _router_decision(router.obj("bfloat16"))
        router_fp32 = _router_decision(router.obj("float32"))
        o = f.obj("o_proj")
        backend = o.value("backend", str)
        if backend not in O_PROJ_BACKENDS:
            raise o.fail("backend", backend, f"one of {', '.join(O_PROJ_BACKENDS)}")
        recipe = o.ints("recipe", 3)
        o_proj = OProjDecision(backend, None if recipe is None else (recipe[0], recipe[1], recipe[2]),
                               o.value("patch_recipe", bool), o.value("reason", str),
                               o.optional("weight_layout", str), o.optional("source", str) or "default")
        raw_sw = f.data.get("switches")
        switches = None if raw_sw is None else _switches(Fields(raw_sw, source, "switches"))
        raw_probe = f.data.get("probe")
        raw_cfg = f.data.get("o_proj_configs")
        return cls(
            vllm_version=f.value("vllm_version", str),
            version_verified=f.value("version_verified", bool),
            patching_allowed=f.value("patching_allowed", bool),
            platform=f.value("platform", str),
            capability=None if cap is None else (cap[0], cap[1]),
            capability_source=f.value("capability_source", str),
            router_bf16=router_bf16,
            router_fp32=router_fp32,
            o_proj=o_proj,
            settings=tuple(sorted(f.str_map("settings").items())),
            notes=f.strings("notes"),
            router_mode=f.optional("router_mode", str) or "auto",
            router_max_m=f.optional("router_max_m", int),
            router_kernel_error=f.optional("router_kernel_error", str),
            probe=None if raw_probe is None else ProbeResults.from_json(raw_probe, f"{source} (probe)"),
            switches=switches,
            o_proj_configs=(None if raw_cfg is None
                            else ConfigPlan.from_json(Fields(raw_cfg, source, "o_proj_configs"))),
        )

    @classmethod
    def load(cls, path: Path | str, what: str = "plan JSON") -> KernelPlan:
        """Read and parse the plan file at ``path`` (``SPARKPAIR_PLAN_PATH``'s file).

        Raises:
            PlanError: unreadable, not JSON, or a malformed field; the message names the file.
        """
        source = f"{what} {path}"
        return cls.from_json(read_json_file(path, source), source)

    def dumps(self) -> str:
        """:meth:`to_json` as sorted, indented JSON text (byte-identical for equal plans)."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _switches(f: Fields) -> Switches:
    return Switches(f.value("linear_backend", str), f.value("VLLM_USE_DEEP_GEMM", bool),
                    f.value("VLLM_USE_DEEP_GEMM_E8M0", bool), f.value("deepgemm", str),
                    f.optional("ckpt_scale", str) or "e8m0")


def _router_decision(f: Fields) -> RouterDecision:
    path = f.value("path", str)
    if path not in ROUTER_PATHS:
        raise f.fail("path", path, f"one of {', '.join(ROUTER_PATHS)}")
    return RouterDecision(path, f.optional("max_m", int), f.value("reason", str))


def construction_problem(plan: KernelPlan, recipe: Recipe, switches: Switches,
                         deepgemm_identity: str | None) -> tuple[Verdict, str | None]:
    """The matrix's verdict on this process's combination, and why the model must not be built (or ``None``).

    Refused: the matrix refuses the combination; a top-level ``deep_gemm`` whose layouts the probe
    did not record with this same package; or a probe-based o_proj decision made for another
    ``wo_a`` layout than the one these switches make (the choice was proven on other operands).
    """
    backend = plan.o_proj.backend
    v = serve_verdict(switches, backend, recipe)
    if not v.served:
        return v, v.why
    if v.needs_evidence:
        probe = plan.probe
        rows = [o for o in (probe.o_proj if probe else ())
                if o.backend == backend and tuple(o.recipe) == tuple(recipe)]
        same = probe is not None and probe.deepgemm_identity == deepgemm_identity
        if not (same and rows and all(o.ok for o in rows)):
            return v, (
                f"a top-level deep_gemm ({deepgemm_identity}) replaces vLLM's vendored DeepGEMM: the wo_a "
                "layout its "
                "weight transform makes and what its fp8_einsum accepts are known only from a probe run "
                "with it, "
                f"and SPARKPAIR_PROBE_RESULTS has no correct {backend} rows taken with it; wanted sparkpair "
                "probe run "
                "with this deep_gemm installed, or the package removed (pip uninstall deep_gemm)")
    d = plan.o_proj
    if d.source == "probe" and d.weight_layout is not None and d.weight_layout != v.weight:
        assumed = plan.switches.linear_backend if plan.switches is not None else "?"
        return v, (
            f"SPARKPAIR_PROBE_RESULTS chose o_proj={d.label} on wo_a layout {d.weight_layout} (probe's "
            f"--linear-backend {assumed}), but this process builds {v.weight} ({switches.describe()}): the "
            "choice "
            "was not proven on these operands; wanted the probe's switches (sparkpair node passes them), or "
            "sparkpair probe run again with these")
    return v, None


def build_plan(
    *,
    vllm_version: str,
    version_verified: bool,
    allow_unverified: bool,
    platform: str,
    capability: Capability | None,
    capability_source: str = "platform",
    router_mode: str = "auto",
    router_max_m: int | None = None,
    o_proj_mode: str = "auto",
    o_proj_recipe: Recipe | None = None,
    probe: ProbeResults | None = None,
    router_kernel_error: str | None = None,
    o_proj_kernel_error: str | None = None,
    settings: Mapping[str, str] | None = None,
    notes: Sequence[str] = (),
    switches: Switches | None = None,
) -> KernelPlan:
    """Make the process's :class:`KernelPlan` from gathered inputs (pure).

    An unverified vLLM version without ``allow_unverified`` gives a plan whose every decision
    is ``upstream`` with the version named in the reason.

    Raises:
        PlanError: a mode string is not a known value.
    """
    allowed = version_verified or allow_unverified
    if not allowed:
        why = f"vLLM {vllm_version} is not verified; nothing patched"
        up_r = RouterDecision("upstream", None, why)
        return KernelPlan(
            vllm_version, version_verified, False, platform, capability, capability_source,
            up_r, up_r, OProjDecision("upstream", None, False, why),
            tuple(sorted((settings or {}).items())), tuple(notes), router_mode, router_max_m,
            router_kernel_error, probe,
        )
    kw: dict[str, Any] = dict(mode=router_mode, max_m_override=router_max_m, probe=probe,
                              kernel_error=router_kernel_error, platform=platform)
    o_proj = decide_o_proj(capability, mode=o_proj_mode, recipe_override=o_proj_recipe, probe=probe,
                           kernel_error=o_proj_kernel_error, platform=platform, switches=switches)
    return KernelPlan(
        vllm_version, version_verified, True, platform, capability, capability_source,
        decide_router(capability, "bfloat16", **kw),
        decide_router(capability, "float32", **kw),
        o_proj,
        tuple(sorted((settings or {}).items())), tuple(notes), router_mode, router_max_m,
        router_kernel_error, probe,
        switches if platform == "cuda" and capability_family(capability) == 120 else None,
        decide_o_proj_configs_for(o_proj, capability, probe, switches),
    )

"""The probe results: what ``sparkpair probe`` measured and decided, as the kernel plan reads it.

``sparkpair probe`` (:func:`sparkpair_overlay.probe.run_probe`) writes the ``sparkpair-probe/2``
JSON to the file the node then names in ``SPARKPAIR_PROBE_RESULTS``; the plan reads it with
:meth:`ProbeResults.load`, the node (``sparkpair node run``, before vLLM starts) with
:meth:`ProbeFile.load`, which parses the same way. Torch-free and vLLM-free (the CLI reads it too).

Schema policy: one versioned schema (:data:`PROBE_SCHEMA`). Later work adds rows to the lists it
already has (``kernel_paths`` is there for per-kernel-path timings) or new optional keys; a reader
ignores keys it does not know and refuses a file whose tag is not this version, so a file that
lacks what a reader needs is never read as if it had it. Version 1 rows carried no operand layout
(:data:`OLD_SCHEMAS`): such a file is refused with the way out (run the probe again).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jsonio import Fields, PlanError, read_json_file
from .kernel_path_row import KernelPathRow
from .o_proj_configs import ConfigPlan
from .serve_matrix import ACT_LAYOUTS, ROUTER_LAYOUTS, WEIGHT_LAYOUTS, Switches, act_layout

if TYPE_CHECKING:
    from .probe.choice import ServeChoice

Capability = tuple[int, int]

MAX_CAPABILITY_PART = 99
"""The largest major or minor a probe file may name: CUDA compute capabilities are small
numbers (9.0 for Hopper, 12.1 for GB10: https://developer.nvidia.com/cuda-gpus); a larger or a
negative one is a damaged file, not a device."""
Recipe = tuple[int, int, int]

#: Schema tag of the probe results JSON read from ``SPARKPAIR_PROBE_RESULTS``.
PROBE_SCHEMA = "sparkpair-probe/2"
#: Earlier tags and why they are refused.
OLD_SCHEMAS = {
    "sparkpair-probe/1": (
        "its rows record no operand layout, so the plan cannot tell whether they were taken on the operands "
        "the model serves"
    ),
}


@dataclass(frozen=True)
class RouterProbe:
    """One router measurement from ``sparkpair probe``.

    Attributes:
        path: ``triton-bf16-lowM`` | ``triton-fp32-accurate`` | ``cublas`` | ``fp32-linear``.
        weight_dtype: ``bfloat16`` or ``float32``.
        m: tokens (rows of x).
        ok: output matched the fp64 reference within tolerance.
        us: median time, microseconds (``None`` if it did not run).
        shape: ``(N, K)`` = (experts, hidden), or ``None`` if not recorded.
        layout: the operand layout the row was taken on
            (:data:`sparkpair_overlay.serve_matrix.ROUTER_LAYOUTS`); the plan counts only rows on the
            layout the weight dtype is served with.
    """

    path: str
    weight_dtype: str
    m: int
    ok: bool
    us: float | None = None
    shape: tuple[int, int] | None = None
    layout: str = ""

    def __post_init__(self) -> None:
        if not self.layout:
            object.__setattr__(self, "layout", ROUTER_LAYOUTS.get(self.weight_dtype, "other"))

    def to_json(self) -> dict[str, Any]:
        """The row as the probe JSON holds it."""
        return {
            "path": self.path,
            "weight_dtype": self.weight_dtype,
            "m": self.m,
            "ok": self.ok,
            "us": self.us,
            "shape": list(self.shape) if self.shape else None,
            "layout": self.layout,
        }

    @classmethod
    def from_json(cls, f: Fields) -> RouterProbe:
        """Parse one ``router`` row (raises :class:`PlanError` naming the field)."""
        shape = f.ints("shape", 2)
        return cls(
            f.value("path", str),
            f.value("weight_dtype", str),
            f.value("m", int),
            f.value("ok", bool),
            f.optional("us", float),
            None if shape is None else (shape[0], shape[1]),
            f.value("layout", str),
        )


@dataclass(frozen=True)
class OProjProbe:
    """One o_proj measurement on the operands the served model hands that backend.

    Attributes:
        backend: ``triton`` | ``deepgemm``.
        recipe: the einsum recipe.
        t: tokens.
        ok: ran, finite, and within tolerance of the fp64 reference.
        us: median µs per call (CUDA-graph replay), ``None`` when it did not run.
        weight_layout: the ``wo_a`` layout (:data:`~sparkpair_overlay.serve_matrix.WEIGHT_LAYOUTS`)
            built through vLLM's weight post-processing for the linear backend that makes it.
        act_layout: the activation layout (:data:`~sparkpair_overlay.serve_matrix.ACT_LAYOUTS`); it
            follows from the recipe (the file says it so a reader need not know the rule).
        err: relative Frobenius error vs fp64 (``None`` when it did not run).
        error: why not ok, else ``None``.
    """

    backend: str
    recipe: Recipe
    t: int
    ok: bool
    us: float | None = None
    weight_layout: str = "w3-ue8m0-row"
    act_layout: str = ""
    err: float | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if not self.act_layout:
            object.__setattr__(self, "act_layout", act_layout(self.recipe))

    def to_json(self) -> dict[str, Any]:
        """The row as the probe JSON holds it."""
        return {
            "backend": self.backend,
            "recipe": list(self.recipe),
            "t": self.t,
            "ok": self.ok,
            "us": self.us,
            "weight_layout": self.weight_layout,
            "act_layout": self.act_layout,
            "err": self.err,
            "error": self.error,
        }

    @classmethod
    def from_json(cls, f: Fields) -> OProjProbe:
        """Parse one ``o_proj`` row (raises :class:`PlanError` naming the field)."""
        recipe = f.ints("recipe", 3)
        if recipe is None:
            raise f.fail("recipe", None, "a list of 3 integers")
        r = (recipe[0], recipe[1], recipe[2])
        weight = f.value("weight_layout", str)
        if weight not in WEIGHT_LAYOUTS:
            raise f.fail("weight_layout", weight, f"one of {', '.join(WEIGHT_LAYOUTS)}")
        act = f.value("act_layout", str)
        if act not in ACT_LAYOUTS or act != act_layout(r):
            raise f.fail("act_layout", act, f"{act_layout(r)!r} (the layout recipe {r} makes)")
        return cls(f.value("backend", str), r, f.value("t", int), f.value("ok", bool),
                   f.optional("us", float), weight, act, f.optional("err", float), f.optional("error", str))


@dataclass(frozen=True)
class OProjChoice:
    """The o_proj decision the probe made and persisted (the plan adopts it while its rows hold).

    Attributes:
        backend, recipe: the choice; weight_layout: the ``wo_a`` layout it was made for.
        reason: why (including whether it was kept from the previous probe within the margin).
    """

    backend: str
    recipe: Recipe
    weight_layout: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"backend": self.backend, "recipe": list(self.recipe), "weight_layout": self.weight_layout,
                "reason": self.reason}

    @classmethod
    def from_json(cls, f: Fields) -> OProjChoice:
        recipe = f.ints("recipe", 3)
        if recipe is None:
            raise f.fail("recipe", None, "a list of 3 integers")
        return cls(f.value("backend", str), (recipe[0], recipe[1], recipe[2]), f.value("weight_layout", str),
                   f.value("reason", str))


@dataclass(frozen=True)
class CheckpointCheck:
    """Our o_proj on one real layer's ``wo_a`` from the served checkpoint, against fp64.

    Attributes:
        file: the safetensors file; tensor: the weight's name in it; tp_rank / tp_size: the shard.
        weight_layout: the layout it was post-processed into; t: tokens of the random activation.
        ok, err, error: as the o_proj rows.
    """

    file: str
    tensor: str
    tp_rank: int
    tp_size: int
    weight_layout: str
    t: int
    ok: bool
    err: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "tensor": self.tensor, "tp_rank": self.tp_rank, "tp_size": self.tp_size,
                "weight_layout": self.weight_layout, "t": self.t, "ok": self.ok, "err": self.err,
                "error": self.error}

    @classmethod
    def from_json(cls, f: Fields) -> CheckpointCheck:
        return cls(f.value("file", str), f.value("tensor", str), f.value("tp_rank", int),
                   f.value("tp_size", int), f.value("weight_layout", str), f.value("t", int),
                   f.value("ok", bool), f.optional("err", float), f.optional("error", str))


@dataclass(frozen=True)
class ProbeResults:
    """Parsed probe results JSON (schema :data:`PROBE_SCHEMA`).

    Layout (the part the plan reads; the probe also writes device facts and the serve-path rows,
    docs/kernels.md "Probe JSON")::

        {"schema": "sparkpair-probe/2", "capability": [12, 1], "vllm": "0.33.0",
         "switches": {"linear_backend": "deep_gemm", "VLLM_USE_DEEP_GEMM": true,
                      "VLLM_USE_DEEP_GEMM_E8M0": true, "deepgemm": "vendored", "ckpt_scale": "e8m0"},
         "deepgemm_identity": "vllm.third_party.deep_gemm 2.8.1",
         "router": [{"path": "triton-bf16-lowM", "weight_dtype": "bfloat16", "m": 8, "ok": true,
                     "us": 9.1, "shape": [256, 4096], "layout": "x-bf16-rowmajor/w-bf16-rowmajor"}],
         "o_proj": [{"backend": "triton", "recipe": [1, 1, 128], "t": 1, "ok": true, "us": 20.5,
                     "weight_layout": "w3-ue8m0-row", "act_layout": "a-ue8m0-tma", "err": 0.002}],
         "o_proj_decision": {"backend": "triton", "recipe": [1, 1, 128], "weight_layout": "w3-ue8m0-row",
                             "reason": "..."},
         "kernel_paths": [{"kernel": "fp8_einsum", "path": "decode", "config": "dec_t16_d128_k4_w8",
                           "tokens": 6, "t_range": [1, 64], "layout": "w3-ue8m0-row/a-ue8m0-tma",
                           "ok": true, "us": 61.0, "err": 0.0021, "triton": "3.8.0",
                           "instructions": ["mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32"]}],
         "kernel_path_decision": {"kernel": "fp8_einsum", "layout": "w3-ue8m0-row/a-ue8m0-tma",
                                  "ranges": [{"t_max": 16, "config": "dec_t16_d128_k4_w8", "reason": "..."}],
                                  "source": "probe", "reason": "..."},
         "checkpoint": [], "margin": 0.08,
         "serve_choice": {"schema": "sparkpair-serve-paths/1", ...}}

    ``switches`` are the ones the served model gets: the environment the probe ran in and the
    ``--linear-backend`` of its serve-path choice. ``serve_choice`` (optional) is the serve-path
    choice of :mod:`sparkpair_overlay.probe.choice`.
    """

    capability: Capability
    router: tuple[RouterProbe, ...] = ()
    o_proj: tuple[OProjProbe, ...] = ()
    serve_choice: ServeChoice | None = None
    switches: Switches | None = None
    deepgemm_identity: str | None = None
    o_proj_decision: OProjChoice | None = None
    kernel_paths: tuple[KernelPathRow, ...] = ()
    checkpoint: tuple[CheckpointCheck, ...] = ()
    vllm_version: str | None = None
    margin: float | None = None
    kernel_path_decision: ConfigPlan | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object :meth:`from_json` reads back to an equal value."""
        return {
            "schema": PROBE_SCHEMA,
            "capability": list(self.capability),
            "vllm": self.vllm_version,
            "switches": None if self.switches is None else self.switches.to_json(),
            "deepgemm_identity": self.deepgemm_identity,
            "router": [r.to_json() for r in self.router],
            "o_proj": [o.to_json() for o in self.o_proj],
            "o_proj_decision": None if self.o_proj_decision is None else self.o_proj_decision.to_json(),
            "kernel_paths": [k.to_json() for k in self.kernel_paths],
            "kernel_path_decision": (None if self.kernel_path_decision is None
                                     else self.kernel_path_decision.to_json()),
            "checkpoint": [c.to_json() for c in self.checkpoint],
            "margin": self.margin,
            "serve_choice": None if self.serve_choice is None else self.serve_choice.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "probe JSON") -> ProbeResults:
        """Parse the probe JSON object.

        Raises:
            PlanError: wrong or old schema tag, missing capability, or a malformed entry; the
                message names ``source``, the field, the value seen and the value wanted.
        """
        f = _probe_fields(data, source)
        cap = f.ints("capability", 2)
        if cap is None:
            raise f.fail("capability", None, "[MAJOR, MINOR]")
        if not (1 <= cap[0] <= MAX_CAPABILITY_PART and 0 <= cap[1] <= MAX_CAPABILITY_PART):
            raise f.fail("capability", list(cap), f"[MAJOR, MINOR] with 1 <= MAJOR <= {MAX_CAPABILITY_PART} "
                         f"and 0 <= MINOR <= {MAX_CAPABILITY_PART} (GB10: [12, 1])")
        margin = f.optional("margin", float)
        if margin is not None and not 0.0 <= margin < 1.0:  # NaN fails both comparisons
            raise f.fail("margin", margin, "a fraction in [0, 1) (the probe writes DECISION_MARGIN, 0.08)")
        router = tuple(RouterProbe.from_json(r) for r in f.objects("router"))
        o_proj = tuple(OProjProbe.from_json(o) for o in f.objects("o_proj"))
        kernel_paths = tuple(KernelPathRow.from_json(k) for k in f.objects("kernel_paths"))
        # One row per measurement: a second row for the same one would hide the first (a
        # failure followed by a pass of the same shape reads as a pass).
        for what, keys in (
            ("router", [(r.path, r.weight_dtype, r.m, r.layout) for r in router]),
            ("o_proj", [(o.backend, o.recipe, o.weight_layout, o.t) for o in o_proj]),
            ("kernel_paths", [(k.kernel, k.config, k.layout, k.tokens) for k in kernel_paths]),
        ):
            dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
            if dup is not None:
                raise f.fail(what, f"two rows for {dup}",
                             "one row per (path/backend, dtype/recipe, layout, tokens)")
        bad = [r.m for r in router if r.m < 1] + [o.t for o in o_proj if o.t < 1] + [
            k.tokens for k in kernel_paths if k.tokens < 1]
        if bad:
            raise f.fail("router/o_proj/kernel_paths", f"token count {bad[0]}", "token counts >= 1")
        raw_sw = f.data.get("switches")
        switches = None
        if raw_sw is not None:
            sf = Fields(raw_sw, source, "switches")
            switches = Switches(sf.value("linear_backend", str), sf.value("VLLM_USE_DEEP_GEMM", bool),
                                sf.value("VLLM_USE_DEEP_GEMM_E8M0", bool), sf.value("deepgemm", str),
                                sf.optional("ckpt_scale", str) or "e8m0")
        raw_dec = f.data.get("o_proj_decision")
        decision = (None if raw_dec is None
                    else OProjChoice.from_json(Fields(raw_dec, source, "o_proj_decision")))
        checkpoint = tuple(CheckpointCheck.from_json(c) for c in f.objects("checkpoint"))
        raw_kp = f.data.get("kernel_path_decision")
        kp_decision = (None if raw_kp is None
                       else ConfigPlan.from_json(Fields(raw_kp, source, "kernel_path_decision")))
        return cls(
            capability=(cap[0], cap[1]), router=router, o_proj=o_proj, serve_choice=_serve_choice(f, source),
            switches=switches,
            deepgemm_identity=f.optional("deepgemm_identity", str), o_proj_decision=decision,
            kernel_paths=kernel_paths, checkpoint=checkpoint, vllm_version=f.optional("vllm", str),
            margin=margin, kernel_path_decision=kp_decision,
        )

    @classmethod
    def load(cls, path: Path | str, what: str = "SPARKPAIR_PROBE_RESULTS") -> ProbeResults:
        """Read and parse the probe results file at ``path``.

        Raises:
            PlanError: unreadable, not JSON, or a malformed field (naming ``what=path``).
        """
        source = f"{what}={path}"
        return cls.from_json(read_json_file(path, source), source)


def _probe_fields(data: object, source: str) -> Fields:
    """``data`` as :class:`~sparkpair_overlay.jsonio.Fields`, its schema tag checked.

    Raises:
        PlanError: not an object, an old tag (:data:`OLD_SCHEMAS`, with the way out) or another one.
    """
    f = Fields(data, source)
    schema = f.data.get("schema")
    if schema in OLD_SCHEMAS:
        why = OLD_SCHEMAS[str(schema)]
        raise f.fail("schema", schema, f"{PROBE_SCHEMA!r}: {why}; run sparkpair probe again")
    if schema != PROBE_SCHEMA:
        raise f.fail("schema", schema, repr(PROBE_SCHEMA))
    return f


def _serve_choice(f: Fields, source: str) -> ServeChoice | None:
    """The file's ``serve_choice`` object parsed, or ``None`` when it has none.

    Raises:
        PlanError: the object does not have the layout of ``ServeChoice``; the message names ``source``.
    """
    raw = f.data.get("serve_choice")
    if raw is None:
        return None
    from .probe.choice import ServeChoice, ServePathError

    try:
        return ServeChoice.from_json(Fields(raw, source, "serve_choice").data)
    except (ServePathError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, PlanError):
            raise
        raise PlanError(
            f"{source}: serve_choice malformed ({type(exc).__name__}: {exc}); "
            "wanted the layout of sparkpair_overlay.probe.choice.ServeChoice"
        ) from None


@dataclass(frozen=True)
class ProbeFile:
    """What a ``sparkpair probe --out`` file gives the node that starts vLLM from it.

    The one reader of that file besides :meth:`ProbeResults.load` (which the plan uses and which
    needs a capability): a probe run with no device capability (no CUDA device and no
    ``SPARKPAIR_FAKE_CAPABILITY``: ``"capability": null``) still carries its serve-path choice.

    Attributes:
        serve_choice: the serve-path choice, or ``None`` when the file has none.
        results: the parsed results (:class:`ProbeResults`), or ``None`` when the file records no
            capability (nothing for the plan to read).
        vllm_version: ``vllm.__version__`` where the probe ran (``"vllm"``), or ``None``.
    """

    serve_choice: ServeChoice | None
    results: ProbeResults | None
    vllm_version: str | None

    @classmethod
    def load(cls, path: Path | str, what: str = "probe JSON") -> ProbeFile:
        """Read and parse the probe output at ``path`` (bounded, regular files only).

        Raises:
            PlanError: unreadable, not JSON, another schema tag, or a malformed field (naming
                ``what=path``, the field, the value seen and the value wanted).
        """
        source = f"{what}={path}"
        data = read_json_file(path, source)
        f = _probe_fields(data, source)
        if f.data.get("capability") is not None:
            results = ProbeResults.from_json(data, source)
            return cls(results.serve_choice, results, results.vllm_version)
        return cls(_serve_choice(f, source), None, f.optional("vllm", str))


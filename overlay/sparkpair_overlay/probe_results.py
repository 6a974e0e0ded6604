"""The probe results: what ``sparkpair probe`` measured, as the kernel plan reads it.

``sparkpair probe`` (:func:`sparkpair_overlay.probe.run_probe`) writes the ``sparkpair-probe/1``
JSON to the file the node then names in ``SPARKPAIR_PROBE_RESULTS``; the plan reads it with
:meth:`ProbeResults.load`. Torch-free and vLLM-free (the CLI reads it too).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .jsonio import Fields, PlanError, read_json_file

if TYPE_CHECKING:
    from .probe.choice import ServeChoice

Capability = tuple[int, int]
Recipe = tuple[int, int, int]

#: Schema tag of the probe results JSON read from ``SPARKPAIR_PROBE_RESULTS``.
PROBE_SCHEMA = "sparkpair-probe/1"


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
    """

    path: str
    weight_dtype: str
    m: int
    ok: bool
    us: float | None = None
    shape: tuple[int, int] | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as the probe JSON holds it."""
        return {
            "path": self.path,
            "weight_dtype": self.weight_dtype,
            "m": self.m,
            "ok": self.ok,
            "us": self.us,
            "shape": list(self.shape) if self.shape else None,
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
        )


@dataclass(frozen=True)
class OProjProbe:
    """One o_proj measurement: backend ``deepgemm``/``triton``, recipe, T tokens, ok, us."""

    backend: str
    recipe: Recipe
    t: int
    ok: bool
    us: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as the probe JSON holds it."""
        return {
            "backend": self.backend,
            "recipe": list(self.recipe),
            "t": self.t,
            "ok": self.ok,
            "us": self.us,
        }

    @classmethod
    def from_json(cls, f: Fields) -> OProjProbe:
        """Parse one ``o_proj`` row (raises :class:`PlanError` naming the field)."""
        recipe = f.ints("recipe", 3)
        if recipe is None:
            raise f.fail("recipe", None, "a list of 3 integers")
        return cls(
            f.value("backend", str),
            (recipe[0], recipe[1], recipe[2]),
            f.value("t", int),
            f.value("ok", bool),
            f.optional("us", float),
        )


@dataclass(frozen=True)
class ProbeResults:
    """Parsed probe results JSON (schema :data:`PROBE_SCHEMA`).

    Layout (the part the plan reads; the probe also writes device facts, timings and the
    serve-path rows, docs/kernels.md "Probe")::

        {"schema": "sparkpair-probe/1", "capability": [12, 1],
         "router": [{"path": "triton-bf16-lowM", "weight_dtype": "bfloat16", "m": 8,
                     "ok": true, "us": 9.1, "shape": [256, 4096]}, ...],
         "o_proj": [{"backend": "triton", "recipe": [1, 1, 128], "t": 1,
                     "ok": true, "us": 20.5}, ...],
         "serve_choice": {"schema": "sparkpair-serve-paths/1", ...}}

    ``serve_choice`` (optional) is the DeepGEMM serve-path choice of
    :mod:`sparkpair_overlay.probe.choice`.
    """

    capability: Capability
    router: tuple[RouterProbe, ...] = ()
    o_proj: tuple[OProjProbe, ...] = ()
    serve_choice: ServeChoice | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON object :meth:`from_json` reads back to an equal value."""
        return {
            "schema": PROBE_SCHEMA,
            "capability": list(self.capability),
            "router": [r.to_json() for r in self.router],
            "o_proj": [o.to_json() for o in self.o_proj],
            "serve_choice": None if self.serve_choice is None else self.serve_choice.to_json(),
        }

    @classmethod
    def from_json(cls, data: object, source: str = "probe JSON") -> ProbeResults:
        """Parse the probe JSON object.

        Raises:
            PlanError: wrong schema tag, missing capability, or a malformed entry; the
                message names ``source``, the field, the value seen and the value wanted.
        """
        f = Fields(data, source)
        schema = f.data.get("schema")
        if schema != PROBE_SCHEMA:
            raise f.fail("schema", schema, repr(PROBE_SCHEMA))
        cap = f.ints("capability", 2)
        if cap is None:
            raise f.fail("capability", None, "[MAJOR, MINOR]")
        router = tuple(RouterProbe.from_json(r) for r in f.objects("router"))
        o_proj = tuple(OProjProbe.from_json(o) for o in f.objects("o_proj"))
        # One row per measurement: a second row for the same one would hide the first (a
        # failure followed by a pass of the same shape reads as a pass).
        for what, keys in (
            ("router", [(r.path, r.weight_dtype, r.m) for r in router]),
            ("o_proj", [(o.backend, o.recipe, o.t) for o in o_proj]),
        ):
            dup = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
            if dup is not None:
                raise f.fail(what, f"two rows for {dup}", "one row per (path/backend, dtype/recipe, tokens)")
        bad = [r.m for r in router if r.m < 1] + [o.t for o in o_proj if o.t < 1]
        if bad:
            raise f.fail("router/o_proj", f"token count {bad[0]}", "token counts >= 1")
        serve: ServeChoice | None = None
        raw = f.data.get("serve_choice")
        if raw is not None:
            from .probe.choice import ServeChoice, ServePathError

            try:
                serve = ServeChoice.from_json(Fields(raw, source, "serve_choice").data)
            except (ServePathError, KeyError, TypeError, ValueError) as exc:
                if isinstance(exc, PlanError):
                    raise
                raise PlanError(
                    f"{source}: serve_choice malformed ({type(exc).__name__}: {exc}); "
                    "wanted the layout of sparkpair_overlay.probe.choice.ServeChoice"
                ) from None
        return cls(capability=(cap[0], cap[1]), router=router, o_proj=o_proj, serve_choice=serve)

    @classmethod
    def load(cls, path: Path | str, what: str = "SPARKPAIR_PROBE_RESULTS") -> ProbeResults:
        """Read and parse the probe results file at ``path``.

        Raises:
            PlanError: unreadable, not JSON, or a malformed field (naming ``what=path``).
        """
        source = f"{what}={path}"
        return cls.from_json(read_json_file(path, source), source)

"""What a vLLM wheel's source says for the overlay, and what changed from one release to the next.

Every reading is of the source text (:data:`sparkpair_overlay.targets.Reader`): nothing of vLLM is
installed or imported. :func:`compare_source` gives the lane's findings for the targets, the o_proj
owner and recipe, the router's capability gates, DeepGEMM's conditions and the ``VLLM_*`` switches,
``--linear-backend`` values and FP8 block kernels.
"""

from __future__ import annotations

import ast
import re
from typing import NamedTuple

from sparkpair_overlay import versions
from sparkpair_overlay.serve_matrix import FP8_BLOCK_KERNEL, LINEAR_BACKENDS
from sparkpair_overlay.targets import (
    DEEPGEMM_CONDITIONS_MODELLED,
    RECIPE_SOURCE,
    Reader,
    check_source,
    deepgemm_conditions,
    module_path,
    o_proj_owner,
    router_capability_gates,
    router_family_120_tier,
)

from .findings import ReportLine

#: Capabilities the recipe is read for: SM90, SM100, and family 120 (RTX Pro 12.0, GB10 12.1).
RECIPE_CAPS: tuple[tuple[int, int], ...] = ((9, 0), (10, 0), (12, 0), (12, 1))
#: The recipe family 120 gets from vLLM 0.32-0.34 (the SM100 one, with TMA-aligned packed scales): the
#: one the overlay replaces (docs/reference/vllm-code-paths.md#o_proj-scales).
FAMILY_120_UPSTREAM_RECIPE = ((1, 1, 128), True)
#: Words that mark a ``VLLM_*`` variable as one that can change what the overlay patches.
RELEVANT_SWITCH_WORDS = (
    "DEEP_GEMM",
    "FP8",
    "LINEAR",
    "FLASHINFER",
    "MOE",
    "DSV4",
    "DEEPSEEK",
    "ROUTER",
    "EINSUM",
    "MLA",
    "CUTLASS",
    "B12X",
    "MARLIN",
    "TRITON",
    "GEMM",
)


class _Cap(NamedTuple):
    major: int
    minor: int


class _Platform:
    """The ``current_platform`` upstream's recipe function reads, answering for one capability."""

    def __init__(self, cap: tuple[int, int]) -> None:
        self.cap = _Cap(*cap)

    def get_device_capability(self, device_id: int = 0) -> _Cap:
        return self.cap

    def is_device_capability(self, cap: object, device_id: int = 0) -> bool:
        want = cap if isinstance(cap, tuple) else divmod(int(cap), 10)  # type: ignore[call-overload]
        return tuple(self.cap) == tuple(want)

    def is_device_capability_family(self, family: int, device_id: int = 0) -> bool:
        return (self.cap.major * 10 + self.cap.minor) // 10 == family // 10

    def has_device_capability(self, cap: object, device_id: int = 0) -> bool:
        want = cap if isinstance(cap, tuple) else divmod(int(cap), 10)  # type: ignore[call-overload]
        return tuple(self.cap) >= tuple(want)

    def is_cuda(self) -> bool:
        return True


def recipe_table(read: Reader) -> dict[tuple[int, int], object]:
    """What upstream's ``compute_fp8_einsum_recipe()`` returns per capability of :data:`RECIPE_CAPS`:
    ``((recipe), tma_aligned)``, or the error it raised as text. The function's own source is run with a
    stand-in ``current_platform`` (nothing of vLLM is imported)."""
    text = read(module_path(RECIPE_SOURCE))
    fn = (
        None
        if text is None
        else next(
            (
                n
                for n in ast.parse(text).body
                if isinstance(n, ast.FunctionDef) and n.name == "compute_fp8_einsum_recipe"
            ),
            None,
        )
    )
    if text is None or fn is None:
        return {cap: "compute_fp8_einsum_recipe not found" for cap in RECIPE_CAPS}
    fn.returns = None
    for a in (*fn.args.args, *fn.args.kwonlyargs):
        a.annotation = None
    code = compile(ast.Module(body=[fn], type_ignores=[]), module_path(RECIPE_SOURCE), "exec")
    out: dict[tuple[int, int], object] = {}
    for cap in RECIPE_CAPS:
        ns: dict[str, object] = {"current_platform": _Platform(cap)}
        try:
            exec(code, ns)  # noqa: S102 - upstream's own function, from the wheel this lane checks
            recipe, tma = ns["compute_fp8_einsum_recipe"]()  # type: ignore[operator]
            out[cap] = (tuple(int(v) for v in recipe), bool(tma))
        except Exception as exc:  # noqa: BLE001 - reported as the function's answer
            out[cap] = f"{type(exc).__name__}: {exc}"
    return out


def env_switches(read: Reader) -> frozenset[str]:
    """The ``VLLM_*`` variables ``vllm/envs.py`` defines (its ``environment_variables`` keys)."""
    text = read("vllm/envs.py") or ""
    return frozenset(re.findall(r'^\s+"(VLLM_[A-Z0-9_]+)":', text, flags=re.M))


def linear_backends(read: Reader) -> tuple[str, ...]:
    """``LinearBackend``'s values in ``vllm/config/kernel.py`` (the ``--linear-backend`` choices)."""
    text = read("vllm/config/kernel.py")
    for node in ast.parse(text or "").body:
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "LinearBackend" for t in node.targets)
            and isinstance(node.value, ast.Subscript)
            and isinstance(node.value.slice, ast.Tuple)
        ):
            return tuple(str(e.value) for e in node.value.slice.elts if isinstance(e, ast.Constant))
    return ()


def fp8_block_kernels(read: Reader) -> tuple[str, ...]:
    """``_POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]`` in order (``model_executor/kernels/linear``)."""
    text = read("vllm/model_executor/kernels/linear/__init__.py")
    for node in ast.parse(text or "").body:
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else (node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None)
        )
        if (
            isinstance(target, ast.Name)
            and target.id == "_POSSIBLE_FP8_BLOCK_KERNELS"
            and isinstance(getattr(node, "value", None), ast.Dict)
        ):
            d: ast.Dict = node.value  # type: ignore[assignment]
            for k, v in zip(d.keys, d.values, strict=False):
                if isinstance(k, ast.Attribute) and k.attr == "CUDA" and isinstance(v, ast.List):
                    return tuple(e.id for e in v.elts if isinstance(e, ast.Name))
    return ()


# --------------------------------------------------------------------------- comparisons


def _fmt_recipe(answer: object) -> str:
    if isinstance(answer, tuple):
        (a, b, c), tma = answer  # type: ignore[misc]
        return f"({a},{b},{c}) tma={tma}"
    return str(answer)


def compare_source(
    base: Reader, new: Reader, base_version: str, version: str, record: versions.Release | None
) -> list[ReportLine]:
    """What changed for the overlay from ``base_version`` to ``version`` (both wheels' source), judged
    against ``version``'s record in :data:`sparkpair_overlay.versions.RELEASES` (``None``: none yet)."""
    out: list[ReportLine] = []
    checked, moved = check_source(new)
    if moved:
        out += [ReportLine("targets", "ACTION", f"moved: {f}") for f in moved]
    else:
        clean = f"all {len(checked)} patch targets check clean in {version}"
        out.append(ReportLine("targets", "same", clean))
    base_checked = set(check_source(base)[0])
    for t in sorted(set(checked) - base_checked):
        out.append(ReportLine("targets", "changed", f"new target shape passes: {t}"))

    owner_b, owner_n = o_proj_owner(base), o_proj_owner(new)
    if owner_n is None:
        out.append(
            ReportLine(
                "o_proj owner",
                "ACTION",
                "the attention's _o_proj no longer reaches "
                "deep_gemm_fp8_o_proj; the serve matrix test cannot build its o_proj part",
            )
        )
    elif owner_n != owner_b:
        known = record is not None and record.o_proj_owner == owner_n
        out.append(
            ReportLine(
                "o_proj owner",
                "handled" if known else "ACTION",
                f"{owner_b} -> {owner_n}"
                + (
                    ""
                    if known
                    else f"; wanted the release's record (versions.RELEASES) with o_proj_owner={owner_n!r}"
                ),
            )
        )
    else:
        out.append(ReportLine("o_proj owner", "same", owner_n))

    rb, rn = recipe_table(base), recipe_table(new)
    for cap in RECIPE_CAPS:
        c = f"{cap[0]}.{cap[1]}"
        if rn[cap] != rb[cap]:
            out.append(
                ReportLine(
                    "recipe", "changed", f"capability {c}: {_fmt_recipe(rb[cap])} -> {_fmt_recipe(rn[cap])}"
                )
            )
    fam = [rn[(12, 0)], rn[(12, 1)]]
    if any(a != FAMILY_120_UPSTREAM_RECIPE for a in fam):
        out.append(
            ReportLine(
                "recipe",
                "UPSTREAM FIX",
                f"family 120 now gets {_fmt_recipe(fam[1])} (was {_fmt_recipe(FAMILY_120_UPSTREAM_RECIPE)}): "
                "upstream may serve GB10's o_proj itself; record upstream_o_proj_fixed in "
                "versions.RELEASES and rate our kernel against upstream's path on GB10 by the probe "
                "(correct and faster, or step aside: docs/operations.md#upgrading-vllm)",
            )
        )
    elif all(rn[cap] == rb[cap] for cap in RECIPE_CAPS):
        out.append(
            ReportLine(
                "recipe",
                "same",
                f"family 120 still gets {_fmt_recipe(FAMILY_120_UPSTREAM_RECIPE)} (no upstream fix)",
            )
        )

    gb, gn = router_capability_gates(base), router_capability_gates(new)
    if router_family_120_tier(new):
        out.append(
            ReportLine(
                "router",
                "UPSTREAM FIX",
                f"gate_linear.py gates a tier on family 120 ({sorted(gn)}): "
                "rate our router tiers against it by the probe before keeping them",
            )
        )
    elif gn != gb:
        out.append(
            ReportLine(
                "router", "changed", f"capability gates {sorted(gb)} -> {sorted(gn)}; none is family 120"
            )
        )
    else:
        out.append(ReportLine("router", "same", f"no family-120 tier (gates: {', '.join(sorted(gn))})"))

    (cb, nb), (cn, nn) = deepgemm_conditions(base), deepgemm_conditions(new)
    unknown = cn - DEEPGEMM_CONDITIONS_MODELLED
    if unknown:
        out.append(
            ReportLine(
                "DeepGEMM",
                "ACTION",
                f"is_deep_gemm_supported asks {sorted(unknown)}, which the "
                "serve matrix does not model; wanted a Switches field and the release's record",
            )
        )
    if (cn, nn) != (cb, nb):
        rec_nvcc = record.deepgemm_min_nvcc if record is not None else None
        ok = rec_nvcc == nn
        what = f"conditions {sorted(cb)} -> {sorted(cn)}" + (f", nvcc >= {nn[0]}.{nn[1]}" if nn else "")
        out.append(
            ReportLine(
                "DeepGEMM",
                "handled" if ok else "ACTION",
                what
                + (
                    f" (versions.RELEASES {version}: deepgemm_min_nvcc={rec_nvcc})"
                    if ok
                    else f"; wanted the release's record with deepgemm_min_nvcc={nn}"
                ),
            )
        )
    elif not unknown:
        out.append(ReportLine("DeepGEMM", "same", f"is_deep_gemm_supported asks {', '.join(sorted(cn))}"))

    sb, sn = env_switches(base), env_switches(new)
    added = sorted(sn - sb)
    relevant = [s for s in added if any(w in s for w in RELEVANT_SWITCH_WORDS)]
    if relevant:
        out.append(
            ReportLine(
                "switches",
                "changed",
                f"new VLLM_* variables that may touch the o_proj or router: "
                f"{', '.join(relevant)} (read what each does; the serve matrix models only "
                "VLLM_USE_DEEP_GEMM and VLLM_USE_DEEP_GEMM_E8M0)",
            )
        )
    out.append(
        ReportLine(
            "switches",
            "same" if not added else "changed",
            f"{len(added)} VLLM_* variables added, {len(sb - sn)} removed"
            + (f" ({', '.join(added[:12])}{', ...' if len(added) > 12 else ''})" if added else ""),
        )
    )
    lb = linear_backends(new)
    if lb != LINEAR_BACKENDS:
        out.append(
            ReportLine(
                "switches",
                "ACTION",
                f"--linear-backend values {list(lb)}; the serve matrix knows "
                f"{list(LINEAR_BACKENDS)} (serve_matrix.LINEAR_BACKENDS)",
            )
        )
    else:
        out.append(ReportLine("switches", "same", f"--linear-backend values as the serve matrix ({len(lb)})"))
    kb, kn = fp8_block_kernels(base), fp8_block_kernels(new)
    known_kernels = set(FP8_BLOCK_KERNEL.values()) | {
        "FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
        "DeepGemmFp8BlockScaledMMKernel",
    }
    if kn != kb or not set(kn) <= known_kernels:
        out.append(
            ReportLine(
                "switches",
                "ACTION",
                f"CUDA FP8 block kernels {list(kb)} -> {list(kn)}; wanted the "
                "serve matrix's linear_outcome updated to the new order",
            )
        )
    else:
        out.append(ReportLine("switches", "same", f"CUDA FP8 block kernels, in order: {', '.join(kn)}"))
    return out

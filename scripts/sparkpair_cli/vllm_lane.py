"""The vLLM upgrade lane: is a vLLM release proven for sparkpair, and what changed for the overlay.

``scripts/vllm-lane.sh VERSION`` runs :func:`main` (docs/operations.md, "Upgrading vLLM"):

1. downloads the release's wheel and the newest older release the stack tier runs (the base), with
   ``pip download --no-deps`` into ``~/.cache/sparkpair/vllm-wheels`` (pip's own cache keeps them too);
2. reads both wheels' source without installing or importing either, and prints what changed for the
   overlay: every patch target (:func:`sparkpair_overlay.targets.check_source`), how the attention
   reaches the o_proj, the o_proj recipe per capability (upstream's function, run with a stand-in
   platform), the router's capability gates (a family-120 tier of upstream's own), what DeepGEMM's
   availability asks, the ``VLLM_*`` switches, the ``--linear-backend`` values and FP8 block kernels,
   and the wheel's pins against the package registry and the stack tier's shared pins;
3. with ``--stack`` (the default), makes the release's stack venv (scripts/setup-stack.sh; a release
   with no requirements file gets one written, named in the output) and runs the ``stack`` tier in
   it (``tests/stack``).

Each finding is one line: ``same``, ``changed`` (informational: the release's record or the tier
covers it), ``handled`` (a difference the overlay handles, with the record that says so),
``ACTION`` (something an owner must do before the release can be verified) or ``UPSTREAM FIX``
(upstream now serves what the overlay exists for: the plan must rate our kernel against it).

Exit status: 0 when there is no ``ACTION`` and the stack tier passed; 1 otherwise; 2 on bad input
(a version the registry does not have, no older stack release to compare with).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
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

REPO = Path(__file__).resolve().parents[2]
WHEEL_CACHE = Path.home() / ".cache" / "sparkpair" / "vllm-wheels"
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


@dataclass(frozen=True)
class ReportLine:
    """One line of the lane's report: ``[status] section: text``."""

    section: str
    status: str
    text: str

    def __str__(self) -> str:
        return f"[{self.status}] {self.section}: {self.text}"


class LaneError(RuntimeError):
    """Bad input: the message names the value seen and the value wanted."""


# --------------------------------------------------------------------------- wheels


def parse_version(version: str) -> tuple[int, ...]:
    """``"0.34.0"`` -> ``(0, 34, 0)``.

    Raises:
        LaneError: not a release version: three ASCII numbers without leading zeros, the form of
            vLLM's release wheels (``vllm-0.34.0-…whl``).
    """
    if not re.fullmatch(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)){2}", version, flags=re.ASCII):
        raise LaneError(
            f"vLLM version {version!r} is not a release version; wanted MAJOR.MINOR.PATCH in ASCII "
            "digits without leading zeros, e.g. 0.34.0"
        )
    return tuple(int(x) for x in version.split("."))


def fetch_wheel(version: str, cache: Path | None = None) -> Path:
    """The vLLM ``version`` wheel for this machine, downloaded once into ``cache`` (default
    :data:`WHEEL_CACHE`; ``pip download --no-deps``, whose HTTP cache also keeps it).

    Raises:
        LaneError: pip could not download it (the message carries pip's last lines).
    """
    cache = cache or WHEEL_CACHE
    cache.mkdir(parents=True, exist_ok=True)
    have = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if have:
        return have[-1]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--quiet",
            "-d",
            str(cache),
            f"vllm=={version}",
        ],
        capture_output=True,
        text=True,
    )
    have = sorted(cache.glob(f"vllm-{version}-*.whl"))
    if proc.returncode != 0 or not have:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise LaneError(
            f"pip could not download vllm=={version} (rc {proc.returncode}); wanted a release the "
            f"package registry has:\n{tail}"
        )
    return have[-1]


def wheel_reader(wheel: Path) -> Reader:
    """``read(path)`` of a file inside ``wheel`` (``vllm/utils/deep_gemm.py``), or ``None``."""
    zf = zipfile.ZipFile(wheel)
    names = set(zf.namelist())

    def read(path: str) -> str | None:
        return zf.read(path).decode("utf-8", errors="replace") if path in names else None

    return read


def wheel_requires(wheel: Path) -> list[str]:
    """The wheel's ``Requires-Dist`` lines (its METADATA)."""
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    return [ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("Requires-Dist:")]


# --------------------------------------------------------------------------- what the source says


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


# --------------------------------------------------------------------------- pins


def registry_versions(package: str) -> list[str]:
    """The versions the package registry has for ``package`` (``pip index versions``), newest first;
    empty when it has none or pip cannot ask."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True
    )
    m = re.search(r"Available versions: (.*)", proc.stdout)
    return [v.strip() for v in m.group(1).split(",")] if m else []


def shared_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a requirements file's ``name==version`` lines."""
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s#;]+)", line)
        if m:
            pins[canonicalize_name(m.group(1).split("[")[0])] = m.group(2)
    return pins


def pin_findings(
    requires: Iterable[str],
    shared: dict[str, str],
    available: Callable[[str], list[str]],
) -> tuple[list[ReportLine], dict[str, str], list[versions.Substitute]]:
    """The wheel's runtime requirements against the stack tier's shared pins and the registry.

    Returns:
        ``(findings, chosen, substitutes)``: ``chosen`` maps ``torch`` and ``flashinfer-python`` to the
        versions the release's stack venv takes (the pin, or the nearest the registry has: torch's newest
        CPU build; FlashInfer's nearest newer release, else the newest older one); ``substitutes`` the
        ones that differ from the pin, as the release's record must name them.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    out: list[ReportLine] = []
    chosen: dict[str, str] = {}
    subs: list[versions.Substitute] = []
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        if name == "torch" and pinned:
            cpu = [v for v in available("torch") if v.endswith("+cpu")]
            want_cpu = f"{pinned[0]}+cpu"
            use = want_cpu if want_cpu in cpu else (max(cpu, key=Version) if cpu else "")
            chosen["torch"] = use
            status = "same" if use == want_cpu else "changed"
            if use != want_cpu:
                subs.append(versions.Substitute("torch", str(req.specifier), use))
            out.append(
                ReportLine(
                    "pins",
                    status,
                    f"torch=={pinned[0]}: "
                    + (
                        "its CPU build is on the registry"
                        if use == want_cpu
                        else f"no CPU build on the registry; the stack tier takes {use or 'NOTHING'} "
                        "(a substitute the record must name)"
                    ),
                )
            )
        elif name == "flashinfer-python" and pinned:
            have = available("flashinfer-python")
            if pinned[0] in have:
                chosen[name] = pinned[0]
                out.append(ReportLine("pins", "same", f"flashinfer-python=={pinned[0]} is on the registry"))
            else:
                newer = sorted((v for v in have if Version(v) > Version(pinned[0])), key=Version)
                older = sorted((v for v in have if Version(v) < Version(pinned[0])), key=Version)
                use = newer[0] if newer else (older[-1] if older else "")
                chosen[name] = use
                subs.append(versions.Substitute(req.name, str(req.specifier), use))
                out.append(
                    ReportLine(
                        "pins",
                        "changed",
                        f"flashinfer-python=={pinned[0]} is not on the registry "
                        f"(it has {', '.join(sorted(have, key=Version)[-3:])}); the stack tier takes "
                        f"{use or 'NOTHING'} (a substitute the record must name)",
                    )
                )
        elif name in shared and name not in ("vllm",):
            if not req.specifier.contains(shared[name], prereleases=True):
                out.append(
                    ReportLine(
                        "pins",
                        "ACTION",
                        f"scripts/stack-requirements.txt pins {name}=={shared[name]}; vLLM asks {req}",
                    )
                )
    if not any(f.status == "ACTION" for f in out):
        out.append(
            ReportLine(
                "pins", "same", "every shared pin of scripts/stack-requirements.txt satisfies the wheel"
            )
        )
    return out, chosen, subs


# --------------------------------------------------------------------------- the stack tier


def requirements_file(version: str) -> Path:
    """``scripts/stack-requirements-<version>.txt``."""
    return REPO / "scripts" / f"stack-requirements-{version}.txt"


def write_requirements(version: str, chosen: dict[str, str], needs_nvcc: bool) -> Path:
    """Write the release's stack requirements (the wheel, its FlashInfer, a real nvcc when its DeepGEMM
    asks for one) beside the shared file; returns the path."""
    path = requirements_file(version)
    lines = [
        f"# The `stack` tier's venv for vLLM {version} (.venv-stack-{version}), written by",
        f"# scripts/vllm-lane.sh on {time.strftime('%Y-%m-%d')}: scripts/stack-requirements.txt (shared by",
        "# every release) plus these.",
        "# Name every substitute in its record (sparkpair_overlay.versions.RELEASES) and say why here.",
        "-r stack-requirements.txt",
        f"vllm=={version}",
        f"flashinfer-python=={chosen.get('flashinfer-python', '')}",
    ]
    if needs_nvcc:
        lines.append("nvidia-cuda-nvcc==13.0.88")
    path.write_text("\n".join(lines) + "\n")
    return path


def suggested_record(
    version: str, subs: Sequence[str], nvcc: tuple[int, int] | None, owner: str | None
) -> str:
    """The ``versions.RELEASES`` entry to add for a release the lane met for the first time."""
    return (
        f'Release("{version}", "stack", PATCH, (substitutes: {"; ".join(subs) or "none"}), '
        f"deepgemm_min_nvcc={nvcc}, o_proj_owner={owner!r})"
    )


def run_stack(version: str, log: Callable[[str], None]) -> tuple[bool, str]:
    """Make the release's stack venv and run the stack tier in it: ``(passed, summary line)``."""
    t0 = time.monotonic()
    setup = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-stack.sh"), "--vllm", version], capture_output=True, text=True
    )
    for line in (setup.stdout + setup.stderr).splitlines():
        if line.startswith("sparkpair:"):
            log(f"  {line}")
    if setup.returncode != 0:
        return False, f"scripts/setup-stack.sh --vllm {version} failed (rc {setup.returncode})"
    listed = subprocess.run(
        ["bash", str(REPO / "scripts" / "setup-stack.sh"), "--list"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    venv = next(ln.split()[1] for ln in listed if ln.split() and ln.split()[0] == version)
    proc = subprocess.run(
        [f"{venv}/bin/python", "-m", "pytest", "tests/stack", "-m", "stack", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    lines = [ln for ln in proc.stdout.splitlines() if re.search(r" in [0-9.]+s", ln)]
    for ln in proc.stdout.splitlines():
        if ln.startswith(("FAILED", "ERROR")):
            log(f"  {ln}")
    minutes = (time.monotonic() - t0) / 60
    summary = (
        lines[-1].strip("= ") if lines else f"no pytest summary (rc {proc.returncode})"
    ) + f"; {minutes:.1f} min"
    return proc.returncode == 0, summary


# --------------------------------------------------------------------------- main


def base_release(version: str) -> str:
    """The newest stack-tier release older than ``version`` (what the lane compares with).

    Raises:
        LaneError: there is none.
    """
    older = [
        r.version
        for r in versions.RELEASES
        if r.tier == "stack" and parse_version(r.version) < parse_version(version)
    ]
    if not older:
        raise LaneError(
            f"no stack-tier release older than vLLM {version} to compare with; wanted a version "
            f"newer than {min((r.version for r in versions.RELEASES if r.tier == 'stack'), default='?')}"
        )
    return max(older, key=parse_version)


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/vllm-lane.sh VERSION [--base VERSION] [--no-stack]``: see the module docstring."""
    ap = argparse.ArgumentParser(
        prog="scripts/vllm-lane.sh",
        description="Is a vLLM release proven for sparkpair, and what changed for the overlay.",
    )
    ap.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    ap.add_argument(
        "--base", help="the release to compare with (default: the newest older stack-tier release)"
    )
    ap.add_argument(
        "--no-stack", action="store_true", help="read the source only; make no venv, run no tests"
    )
    ap.add_argument("--json", dest="json_out", type=Path, help="also write the findings to this JSON file")
    args = ap.parse_args(argv)
    say = print
    try:
        parse_version(args.version)
        base = args.base or base_release(args.version)
        parse_version(base)
        say(f"sparkpair lane: vLLM {args.version} against {base}")
        new_wheel, base_wheel = fetch_wheel(args.version), fetch_wheel(base)
    except LaneError as exc:
        print(f"sparkpair lane: {exc}", file=sys.stderr)
        return 2
    say(f"  wheels: {new_wheel.name}, {base_wheel.name} ({new_wheel.parent})")
    record = versions.release(args.version)
    say(f"  record: {versions.proof_line(args.version)}")
    new, old = wheel_reader(new_wheel), wheel_reader(base_wheel)
    findings = compare_source(old, new, base, args.version, record)
    pins, chosen, subs = pin_findings(
        wheel_requires(new_wheel), shared_pins(REPO / "scripts" / "stack-requirements.txt"), registry_versions
    )
    findings += pins
    if record is None:
        nvcc = deepgemm_conditions(new)[1]
        findings.append(
            ReportLine(
                "record",
                "ACTION",
                "no release record; wanted in versions.RELEASES: "
                + suggested_record(args.version, [str(x) for x in subs], nvcc, o_proj_owner(new)),
            )
        )
    elif list(record.substitutes) != subs:
        findings.append(
            ReportLine(
                "record",
                "ACTION",
                f"the record names substitutes "
                f"{[str(x) for x in record.substitutes]}; the registry gives {[str(x) for x in subs]}",
            )
        )
    else:
        findings.append(
            ReportLine(
                "record",
                "same",
                f"{record.level}; substitutes named: {', '.join(map(str, record.substitutes)) or 'none'}",
            )
        )
    if not requirements_file(args.version).exists():
        path = write_requirements(args.version, chosen, "nvcc" in deepgemm_conditions(new)[0])
        findings.append(
            ReportLine("record", "ACTION", f"wrote {path.relative_to(REPO)}: commit it with the record")
        )
    for f in findings:
        say(str(f))
    passed = True
    if not args.no_stack:
        say(
            f"sparkpair lane: the stack tier on vLLM {args.version} "
            f"(scripts/setup-stack.sh --vllm {args.version})"
        )
        passed, summary = run_stack(args.version, say)
        say(f"[{'same' if passed else 'ACTION'}] stack tier: {summary}")
        findings.append(ReportLine("stack tier", "same" if passed else "ACTION", summary))
    if args.json_out is not None:
        args.json_out.write_text(json.dumps([f.__dict__ for f in findings], indent=2) + "\n")
    actions = [f for f in findings if f.status == "ACTION"]
    fixes = [f for f in findings if f.status == "UPSTREAM FIX"]
    verdict = (
        "verified to patch"
        if not actions and passed and not args.no_stack
        else "source clean (stack tier not run)"
        if not actions and args.no_stack
        else "NOT verified"
    )
    say(
        f"sparkpair lane: vLLM {args.version}: {verdict}; {len(actions)} action(s), "
        f"{len(fixes)} upstream fix(es)"
    )
    return 0 if not actions and passed else 1


if __name__ == "__main__":
    raise SystemExit(main())

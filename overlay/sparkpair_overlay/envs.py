"""Every ``SPARKPAIR_*`` environment variable the overlay reads, defined once.

Modelled on vllm-ascend's ``envs.py``: one registry of variables, each with its
default and a comment, read through :func:`read` (or attribute access on this
module, ``envs.SPARKPAIR_ROUTER``) so nothing else in the overlay calls
``os.environ`` directly. Values are parsed and validated on every read; a bad
value raises :class:`EnvError` naming the variable, the value seen and the
values wanted.

This module imports nothing from vLLM or torch, so unit tests and the
``sparkpair`` CLI can use it without starting vLLM.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class EnvError(ValueError):
    """A ``SPARKPAIR_*`` variable holds a value the overlay cannot use.

    The message names the variable, the value seen and the values wanted.
    """


@dataclass(frozen=True)
class EnvVar:
    """One registered variable.

    Attributes:
        name: the variable's name (``SPARKPAIR_*``).
        default: the raw string used when the variable is unset or empty.
        wanted: a short phrase naming the accepted values (used in errors).
        parse: turns the raw string into the value; raises ``ValueError`` on a bad value.
        doc: what the variable does.
    """

    name: str
    default: str
    wanted: str
    parse: Callable[[str], Any]
    doc: str


def _choice(*allowed: str) -> Callable[[str], str]:
    def parse(raw: str) -> str:
        value = raw.strip().lower()
        if value not in allowed:
            raise ValueError(raw)
        return value

    return parse


def _bool(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


def _path(raw: str) -> str:
    return raw.strip()


def _optional_positive_int(raw: str) -> int | None:
    value = raw.strip().lower()
    if value in ("", "auto"):
        return None
    n = int(value)
    if n < 1:
        raise ValueError(raw)
    return n


def _recipe(raw: str) -> tuple[int, int, int] | None:
    value = raw.strip().lower().replace(" ", "").strip("()")
    if value in ("", "auto"):
        return None
    parts = tuple(int(p) for p in value.split(","))
    if parts not in ((1, 1, 128), (1, 128, 128)):
        raise ValueError(raw)
    return parts  # type: ignore[return-value]


def _serve_paths(raw: str) -> str:
    """``path=candidate[,path=candidate]`` (syntax only; the probe checks the names)."""
    items = [x.strip() for x in raw.split(",") if x.strip()]
    if any(x.count("=") != 1 or not all(p.strip() for p in x.split("=")) for x in items):
        raise ValueError(raw)
    return ",".join(items)


def _capability(raw: str) -> tuple[int, int] | None | str:
    """``""`` = not faked; ``cpu``/``none`` = no CUDA device; ``MAJOR.MINOR`` = that capability."""
    value = raw.strip().lower()
    if value == "":
        return ""
    if value in ("cpu", "none"):
        return None
    major_s, minor_s = value.split(".")
    major, minor = int(major_s), int(minor_s)
    if not (0 < major < 100 and 0 <= minor < 10):
        raise ValueError(raw)
    return (major, minor)


_VARS: tuple[EnvVar, ...] = (
    # Router GEMM (vLLM's GateLinear): auto = follow the kernel plan (probe results,
    # capability, weight dtype); triton = our Triton tiers wherever they apply (family
    # 120 only); upstream = register nothing, vLLM's own tiers run unchanged.
    EnvVar("SPARKPAIR_ROUTER", "auto", "one of auto, triton, upstream", _choice("auto", "triton", "upstream"),
           "router GEMM path: auto | triton | upstream"),
    # Largest token count M for which the bf16 low-M Triton router tier runs; above it
    # vLLM's cuBLAS tier runs. auto = the probe's crossover, else plan.DEFAULT_ROUTER_MAX_M.
    EnvVar("SPARKPAIR_ROUTER_MAX_M", "auto", "auto or a positive integer (tokens)", _optional_positive_int,
           "M threshold (tokens) of the bf16 low-M router tier"),
    # o_proj fp8_einsum (DeepSeek-V4 wo_a): auto = per the probe (DeepGEMM only where the
    # probe showed it correct on this device, else Triton); deepgemm = install the
    # dispatcher but route every call to vLLM's DeepGEMM wrapper; triton = route the calls
    # our kernel supports to Triton; upstream = patch nothing.
    EnvVar("SPARKPAIR_O_PROJ", "auto", "one of auto, deepgemm, triton, upstream",
           _choice("auto", "deepgemm", "triton", "upstream"), "o_proj fp8_einsum path"),
    # fp8_einsum recipe on family 120: auto = the plan's choice (upstream's (1,1,128) unless
    # the probe found (1,128,128) faster and correct); or force 1,1,128 / 1,128,128.
    EnvVar("SPARKPAIR_O_PROJ_RECIPE", "auto", "auto, 1,1,128 or 1,128,128", _recipe,
           "fp8_einsum recipe the o_proj uses on family 120"),
    # Where every vLLM process writes the kernel plan JSON (atomic replace, identical
    # content in every process of a node). Empty = do not write.
    EnvVar("SPARKPAIR_PLAN_PATH", "/tmp/sparkpair/kernel-plan.json", "a file path, or empty to disable",
           _path, "kernel plan JSON output path"),
    # Probe results JSON (written by `sparkpair probe` on the real GPU) that the plan reads.
    # Empty or missing file = no probe results; the plan then uses its built-in defaults.
    EnvVar("SPARKPAIR_PROBE_RESULTS", "", "a file path, or empty", _path, "probe results JSON input path"),
    # Serve paths forced to a candidate without (or against) probe evidence, the documented way
    # past a probe verdict: path=candidate[,path=candidate], e.g. moe-mxfp4=marlin (names in
    # sparkpair_overlay.probe.serve_paths; docs/kernels.md "Probe"). Empty = the probe decides.
    EnvVar("SPARKPAIR_SERVE_PATHS", "", "empty or path=candidate[,path=candidate]", _serve_paths,
           "serve-path candidates forced over the probe's choice"),
    # 1 = patch even on a vLLM version not in VERIFIED_VLLM_VERSIONS (an error is still logged).
    EnvVar("SPARKPAIR_ALLOW_UNVERIFIED_VLLM", "0", "0 or 1", _bool,
           "override the vLLM version guard"),
    # Testing only: pretend the device has this compute capability (MAJOR.MINOR, e.g. 12.1),
    # or `cpu` for no CUDA device. Used by CI (no GPU) and on the H200 to exercise the
    # family-120 paths. Empty = ask vLLM's current_platform.
    EnvVar("SPARKPAIR_FAKE_CAPABILITY", "", "empty, cpu, or MAJOR.MINOR such as 12.1", _capability,
           "fake device capability (testing)"),
)

REGISTRY: Mapping[str, EnvVar] = {v.name: v for v in _VARS}

#: Old names that are refused (never read silently), mapped to the name that replaced them.
#: ``SPARKPAIR_PROBE_PLAN``: "plan" means the kernel plan only; the probe writes probe results.
#: ``SPARKPAIR_PLAN_FILE``: the health container's name for the kernel plan file; the file has one
#: name everywhere (vLLM's containers write it, the gateway reads it).
#: ``sparkpair_health.gateway.settings`` and ``node validate`` refuse these names too.
RENAMED: Mapping[str, str] = {
    "SPARKPAIR_PROBE_PLAN": "SPARKPAIR_PROBE_RESULTS",
    "SPARKPAIR_PLAN_FILE": "SPARKPAIR_PLAN_PATH",
}


def _refuse_renamed(env: Mapping[str, str]) -> None:
    for old, new in RENAMED.items():
        if old in env:
            raise EnvError(f"{old}={env[old]!r} is no longer read; wanted {new} (the same value, new name)")


def read(name: str, environ: Mapping[str, str] | None = None) -> Any:
    """Return the parsed value of the registered variable ``name``.

    Args:
        name: a key of :data:`REGISTRY`.
        environ: the environment to read (default ``os.environ``).

    Raises:
        KeyError: ``name`` is not a registered ``SPARKPAIR_*`` variable.
        EnvError: the value does not parse; the message names the variable, the value
            seen and the values wanted. Also when a :data:`RENAMED` old name is set.
    """
    var = REGISTRY[name]
    env = os.environ if environ is None else environ
    _refuse_renamed(env)
    raw = env.get(name)
    # Unset means the default; set-but-empty means the default too, except for paths,
    # where empty is a value of its own ("do not write" / "no probe file").
    if raw is None or (raw.strip() == "" and var.parse is not _path):
        raw = var.default
    try:
        return var.parse(raw)
    except (ValueError, TypeError):
        raise EnvError(
            f"{name}={raw!r} is not valid; wanted {var.wanted} (default {var.default!r})"
        ) from None


def read_all(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Parse every registered variable; raises :class:`EnvError` on the first bad one."""
    return {name: read(name, environ) for name in REGISTRY}


def __getattr__(name: str) -> Any:
    if name in REGISTRY:
        return read(name)
    raise AttributeError(name)

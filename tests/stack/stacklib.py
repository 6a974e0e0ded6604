"""Helpers of the ``stack`` tier: run Python in a fresh process of the stack venv, with this
checkout's packages first on the path and the sparkpair plugin visible to vLLM's loader.

A process per case keeps patched vLLM globals (and vLLM's one-shot ``plugins_loaded`` guard)
from leaking between cases, exactly as vLLM starts each of its own processes.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: The vLLM releases this tier runs, one venv each (scripts/setup-stack.sh --list): exactly the
#: releases with a ``scripts/stack-requirements-<version>.txt``.
STACK_VLLM_VERSIONS = tuple(sorted(
    (p.name[len("stack-requirements-"):-len(".txt")]
     for p in (REPO / "scripts").glob("stack-requirements-*.txt")),
    key=lambda v: tuple(int(x) for x in v.split("."))))
#: This checkout's import roots (one package per folder, DESIGN.md).
SOURCE_ROOTS = (REPO / "overlay", REPO / "healthchecks", REPO / "scripts")


def installed_vllm() -> str | None:
    """The ``vllm`` distribution's version in this interpreter's environment, or ``None``."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_substitutes() -> list:
    """Every package installed at a version the ``vllm`` wheel's ``Requires-Dist`` does not accept, as
    :class:`sparkpair_overlay.versions.Substitute` (``why`` left empty). Requirements of extras, of
    other platforms, and packages not installed at all (CUDA-only kernel libraries and media packages
    this CPU tier never imports) are not substitutes.
    """
    from packaging.requirements import Requirement
    from sparkpair_overlay.versions import Substitute

    out = []
    for text in importlib.metadata.requires("vllm") or []:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        try:
            have = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            continue
        if not req.specifier.contains(have, prereleases=True):
            out.append(Substitute(req.name, str(req.specifier), have))
    return out


#: Names this tier calls that a release renamed: release -> {0.33.0's name: the release's}.
#: (vLLM 0.34.0 made ``flashinfer_sparse.py``'s private helpers public.)
RENAMED: dict[str, dict[str, str]] = {
    "0.34.0": {
        "_pad_to_supported_q_heads": "pad_to_supported_q_heads",
        "_required_sm120_sparse_topk": "required_sm120_sparse_topk",
    },
}


def upstream_name(name: str) -> str:
    """``name`` (as vLLM 0.33.0 spells it) as the installed release spells it (:data:`RENAMED`)."""
    return RENAMED.get(str(installed_vllm()), {}).get(name, name)


def image_cuda_home() -> Path | None:
    """The CUDA toolkit folder of this venv's ``nvidia-cuda-nvcc`` wheel (``nvidia/cu13``, whose
    ``bin/nvcc`` is a real nvcc 13.0: a toolkit new enough for DeepGEMM's JIT, as the image's), or
    ``None`` when the release's requirements do not install it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec("nvidia.cu13")
    except ModuleNotFoundError:  # no ``nvidia`` namespace package at all
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    home = Path(next(iter(spec.submodule_search_locations)))
    return home if (home / "bin" / "nvcc").is_file() else None


def plugin_entry_point() -> tuple[str, str]:
    """``(name, value)`` of the ``vllm.general_plugins`` entry point pyproject.toml declares."""
    import tomllib  # Python 3.11+, as the stack venv (this module is also imported by .venv's run)

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    eps = data["project"]["entry-points"]["vllm.general_plugins"]
    assert len(eps) == 1, f"pyproject.toml declares {eps}; wanted one vllm.general_plugins entry point"
    return next(iter(eps.items()))


def entry_point_dir(cache: Path) -> Path | None:
    """A folder holding a ``sparkpair`` dist-info with pyproject's plugin entry point, or ``None``
    when the ``sparkpair`` distribution is installed in this venv (scripts/setup-stack.sh does
    that). Lets the tier run in a venv made without sparkpair; vLLM's loader finds plugins only
    through distribution metadata, never through ``PYTHONPATH`` alone.
    """
    try:
        importlib.metadata.distribution("sparkpair")
        return None
    except importlib.metadata.PackageNotFoundError:
        pass
    name, value = plugin_entry_point()
    info = cache / "sparkpair-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sparkpair\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{name} = {value}\n")
    return cache


def clean_env(extra_path: Path | None = None, **env: str) -> dict[str, str]:
    """The environment of a stack subprocess: no ``SPARKPAIR_*``/``VLLM_PLUGINS`` leaking in from
    the caller, this checkout's packages first on ``PYTHONPATH``, then ``env`` on top."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_") and k != "VLLM_PLUGINS"}
    roots = [str(p) for p in SOURCE_ROOTS] + ([str(extra_path)] if extra_path else [])
    if full.get("PYTHONPATH"):
        roots.append(full["PYTHONPATH"])
    full["PYTHONPATH"] = os.pathsep.join(roots)
    full["VLLM_CONFIGURE_LOGGING"] = "1"
    full.update(env)
    return full


def run_report(code: str, env: dict[str, str], *args: str, timeout: float = 300) -> tuple[dict, str]:
    """Run ``code`` with this interpreter; return the JSON after its ``REPORT `` line, and stderr.

    Raises:
        AssertionError: the process failed or printed no report (its stderr tail is shown).
    """
    proc = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"driver failed (rc {proc.returncode}):\n{proc.stderr[-6000:]}"
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    assert lines, f"driver printed no REPORT line:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    return json.loads(lines[-1][len("REPORT "):]), proc.stderr


def deepgemm_transform_stand_in(record: list | None = None, disable_ue8m0_cast: bool | None = None):
    """DeepGEMM 2.8.1's ``transform_sf_into_required_layout`` on arch 12, for the CPU (its extension
    needs CUDA). Its documented host behaviour (csrc/apis/layout.hpp;
    docs/reference/vllm-code-paths.md#deepgemm-einsum-checks): check
    ``sf.size(-2) == ceil_div(mn, gran_mn)`` and ``sf.size(-1) == ceil_div(k, gran_k)``; with
    ``disable_ue8m0_cast`` keep the fp32 (128, 128) block scales; otherwise broadcast each block scale
    to its rows and pack the UE8M0 exponents four per int32 (block k in byte k % 4), MN-major with the
    row count padded to a multiple of 4.

    ``record`` (a list) receives what vLLM hands it. ``disable_ue8m0_cast``: ``None`` takes the argument
    vLLM's wrapper passes (standing in at DeepGEMM's entry point); a bool stands in for vLLM's wrapper
    itself (``fp8_utils.transform_sf_into_required_layout``), fixing what ``VLLM_USE_DEEP_GEMM_E8M0``
    would give on GB10.
    """
    import torch
    from sparkpair_overlay.numerics import pack_ue8m0

    def transform(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast_arg=None, **kw):
        disable = kw.pop("disable_ue8m0_cast", disable_ue8m0_cast_arg)
        if disable_ue8m0_cast is not None:
            disable = disable_ue8m0_cast
        gran_mn = recipe[0] if is_sfa else recipe[1]
        assert sf.dtype == torch.float32, sf.dtype
        assert sf.shape[-2] == -(-mn // gran_mn), (sf.shape, mn, recipe)
        assert sf.shape[-1] == -(-k // recipe[2]), (sf.shape, k, recipe)
        if record is not None:
            record.append({"sf": [list(sf.shape), str(sf.dtype)], "mn": mn, "k": k, "recipe": list(recipe),
                           "num_groups": num_groups, "is_sfa": bool(is_sfa),
                           "disable_ue8m0_cast": bool(disable)})
        if disable:
            return sf
        rows = sf.index_select(-2, torch.arange(mn) // gran_mn)
        packed = pack_ue8m0((rows.contiguous().view(torch.int32) >> 23) & 0xFF)
        g, m, c = packed.shape
        m4 = -(-m // 4) * 4
        out = torch.zeros(g * c * m4, dtype=torch.int32).as_strided((g, m, c), (c * m4, 1, m4))
        out.copy_(packed)
        return out

    return transform

"""Toolchain and package checks of one node: the ptxas Triton uses, FlashInfer's SM120 DeepSeek-V4
decode table, and the DeepGEMM vLLM will load."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from .host import CommandUnavailable
from .result import Ctx, Status

DSV4_DECODE_HEADS = 64
"""DeepSeek-V4-Flash attention heads (docs/reference/vllm-code-paths.md#dsv4-shapes); per-rank heads = 64 /
TP."""
DSV4_DECODE_TOPK = 128
"""DeepSeek-V4-Flash's sliding window (``sliding_window`` in the checkpoint's config.json): the
top-k vLLM 0.33 asks FlashInfer's SM120 DSv4 decode table for without DSpark (see
:func:`dsv4_decode_pair`)."""


PTX_PROBE = """.version 8.8
.target sm_121a
.address_size 64
.visible .entry sparkpair_probe() { ret; }
"""


def ptxas_path(arch: str = "sm_121a") -> tuple[str, str]:
    """The ptxas Triton will use for ``arch``, and the setting that chooses it.

    Triton (3.6, and 3.8 the image's) compiles sm_100 and newer (GB10 is sm_121a) with a second
    bundled ptxas, ``ptxas-blackwell`` (CUDA 12.9 in 3.6, 13.3 in 3.8: both know sm_121a), chosen by
    ``TRITON_PTXAS_BLACKWELL_PATH``; older targets and older Tritons use ``ptxas`` /
    ``TRITON_PTXAS_PATH`` (triton/backends/nvidia/compiler.py ``get_ptxas``). Asking Triton
    itself keeps this check on the binary that will really run (B01).
    """
    cc = int("".join(ch for ch in arch.removeprefix("sm_") if ch.isdigit()) or 0)
    try:
        import triton.knobs as knobs
        from triton.backends.nvidia.compiler import get_ptxas

        setting = (
            "TRITON_PTXAS_BLACKWELL_PATH"
            if cc >= 100 and hasattr(knobs.nvidia, "ptxas_blackwell")
            else "TRITON_PTXAS_PATH"
        )
        return str(get_ptxas(cc).path), setting
    except Exception:  # noqa: BLE001 - no Triton, or one without get_ptxas: fall back below
        pass
    p = os.environ.get("TRITON_PTXAS_PATH")
    if p:
        return p, "TRITON_PTXAS_PATH"
    try:
        import triton

        bundled = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
        return str(bundled), "TRITON_PTXAS_PATH"
    except Exception:  # noqa: BLE001 - triton absent: report below
        return "ptxas", "TRITON_PTXAS_PATH"


def check_ptxas(c: Ctx, arch: str = "sm_121a") -> None:
    """The ptxas Triton uses accepts ``--gpu-name=sm_121a`` on a trivial kernel (B01)."""
    exe, setting = ptxas_path(arch)
    probe = Path(os.environ.get("TMPDIR", "/tmp")) / "sparkpair-ptxas-probe.ptx"
    if c.host.live:
        probe.write_text(PTX_PROBE)
    try:
        r = c.host.run("ptxas-sm_121a", [exe, f"--gpu-name={arch}", str(probe), "-o", os.devnull])
    except CommandUnavailable as e:
        c.add("ptxas", "fail", setting, exe, f"a ptxas that accepts {arch} (CUDA >= 12.9)", str(e))
        return
    if r.rc != 0:
        first = (r.stdout.strip().splitlines() or ["(no output)"])[0]
        c.add(
            "ptxas",
            "fail",
            setting,
            exe,
            f"a ptxas that accepts --gpu-name={arch}",
            f"it said: {first} (B01)",
        )
    else:
        c.add("ptxas", "pass", setting, exe, f"accepts {arch}")


def _tp(profile: Any) -> int:
    return int(getattr(getattr(profile, "server", None), "tensor_parallel_size", 1) or 1)


DSV4_Q_HEAD_SPECIALISATIONS = (8, 16, 32, 64, 128)
"""Query-head counts FlashInfer's sparse MLA decode accepts; vLLM 0.33 pads a rank's heads up to
the next one (``_SPARSE_MLA_SUPPORTED_Q_HEADS`` in vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py)."""


def dsv4_decode_pair(tp: int) -> tuple[int, int]:
    """The ``(num_q_heads, top_k)`` vLLM 0.33 asks FlashInfer's SM120 DSv4 decode table for at TP.

    vLLM's ``DeepseekV4FlashInferSM120Attention.__init__`` asks
    ``has_flashinfer_sparse_mla_sm120_config(padded_heads, required_topk)``
    (vllm/models/deepseek_v4/nvidia/flashinfer_sparse.py, vllm/utils/flashinfer.py, 0.33.0):
    ``padded_heads`` is the rank's heads (64 / TP) padded up to
    :data:`DSV4_Q_HEAD_SPECIALISATIONS`, ``required_topk`` the model's sliding window (128)
    when no DSpark speculative decoding runs. At TP=2: ``(32, 128)``.

    Raises:
        ValueError: more heads per rank than any specialisation (TP < 1 is refused earlier by
            the profile schema).
    """
    per_rank = -(-DSV4_DECODE_HEADS // max(tp, 1))
    for h in DSV4_Q_HEAD_SPECIALISATIONS:
        if per_rank <= h:
            return (h, DSV4_DECODE_TOPK)
    raise ValueError(f"{per_rank} DSv4 heads per rank; wanted <= {DSV4_Q_HEAD_SPECIALISATIONS[-1]}")


DSPARK_SWA_INDEX_ALIGNMENT = 64
"""vLLM 0.33 pads the DSpark draft's sliding-window index width (window + k) up to a multiple of
this (``_DSPARK_SWA_INDEX_ALIGNMENT``, vllm/v1/attention/backends/mla/compressor_utils.py)."""


def dsv4_decode_pairs(profile: Any) -> list[tuple[int, int]]:
    """Every ``(num_q_heads, top_k)`` vLLM 0.33 asks FlashInfer's SM120 DSv4 decode table for
    with this profile: the target's :func:`dsv4_decode_pair`, and with a DSpark draft also the
    draft's non-causal window, ``top_k`` = window + k rounded up to
    :data:`DSPARK_SWA_INDEX_ALIGNMENT` (``_required_sm120_sparse_topk`` and
    ``get_dspark_swa_index_width`` in vLLM 0.33; (32, 192) at TP=2, k=5; checked against
    vLLM 0.33 in tests/stack/test_speculation_config.py)."""
    heads, window = dsv4_decode_pair(_tp(profile))
    pairs = [(heads, window)]
    spec = getattr(getattr(profile, "server", None), "speculation", None)
    if spec is not None and spec.method == "dspark":
        width = -(-(window + spec.num_speculative_tokens) // DSPARK_SWA_INDEX_ALIGNMENT)
        pairs.append((heads, width * DSPARK_SWA_INDEX_ALIGNMENT))
    return pairs


FLASHINFER_DSV4_CMD = """import json, sys
asked = [tuple(p) for p in json.loads(sys.argv[1])]
missing = []
try:
    import flashinfer.decode as d
    missing += [n for n in ("trtllm_batch_decode_sparse_mla_dsv4", "trtllm_batch_decode_with_kv_cache_mla")
                if not callable(getattr(d, n, None))]
except ImportError as e:
    missing.append(f"flashinfer.decode ({e})")
try:
    from flashinfer.autotuner import autotune
    if not callable(autotune):
        missing.append("flashinfer.autotuner.autotune")
except ImportError as e:
    missing.append(f"flashinfer.autotuner.autotune ({e})")
import flashinfer.mla._sparse_mla_sm120 as m
table = getattr(m, "_DECODE_DSV4_DISPATCH", None)
print(json.dumps({"missing": missing, "table": repr(table),
                  "answers": [[h, k, table is not None and (h, k) in table] for h, k in asked]}))
"""
"""Asks the installed FlashInfer what vLLM 0.33 asks before it builds the SM120 DSv4 attention
(``has_flashinfer_sparse_mla_sm120`` and ``has_flashinfer_sparse_mla_sm120_config`` in
vllm/utils/flashinfer.py): are the two sparse-MLA decode entry points and the autotuner there, and
is each asked pair a member (``in``) of ``flashinfer.mla._sparse_mla_sm120._DECODE_DSV4_DISPATCH``.
Membership is that object's API: in FlashInfer 0.7.2.post1 it is a dispatch envelope whose
iteration lists only ``(heads, 1)`` pairs (docs/reference/flashinfer-dsv4.md). Runs in a child
Python so a FlashInfer that crashes on import fails this check, not the preflight."""


def check_flashinfer_table(c: Ctx) -> None:
    """FlashInfer's SM120 DSv4 decode table answers ``(heads, top_k) in table`` with True for
    every pair vLLM 0.33 asks with this profile (:func:`dsv4_decode_pairs`; ``(32, 128)`` at
    TP=2, and ``(32, 192)`` for the DSpark draft at k=5), and the
    sparse-MLA decode entry points vLLM checks exist; otherwise vLLM's attention layer raises at
    init ("requires a FlashInfer DSV4 sparse MLA decode specialization")."""
    setting = "FlashInfer DSv4 decode table"
    if not c.profile.is_dsv4:
        c.add("flashinfer-dsv4", "pass", setting, "n/a", "n/a", "profile is not DeepSeek-V4")
        return
    want = dsv4_decode_pairs(c.profile)
    wanted = f"{', '.join(map(str, want))} in the table (what vLLM 0.33 asks at TP={_tp(c.profile)})"
    argv = [sys.executable, "-c", FLASHINFER_DSV4_CMD, json.dumps([list(p) for p in want])]
    try:
        r = c.host.run("flashinfer-dsv4-table", argv, timeout_s=IMPORT_CHECK_TIMEOUT_S)
    except CommandUnavailable as e:
        c.add("flashinfer-dsv4", "fail", setting, str(e), wanted)
        return
    lines = r.stdout.strip().splitlines() or ["(no output)"]
    try:
        got = json.loads(lines[-1]) if r.rc == 0 else None
    except json.JSONDecodeError:
        got = None
    if not isinstance(got, dict):
        c.add("flashinfer-dsv4", "fail", setting, lines[-1], f"FlashInfer importable, {wanted}")
        return
    if got.get("missing"):
        c.add(
            "flashinfer-dsv4",
            "fail",
            setting,
            f"missing {', '.join(map(str, got['missing']))}",
            f"FlashInfer's SM120 sparse-MLA decode API, {wanted}",
            "vLLM 0.33 does not build the SM120 DSv4 attention without them",
        )
        return
    answers = {(int(h), int(k)): bool(ok) for h, k, ok in got.get("answers", [])}
    absent = [p for p in want if not answers.get(p, False)]
    if absent:
        c.add(
            "flashinfer-dsv4",
            "fail",
            setting,
            f"{got.get('table')} answers {', '.join(map(str, absent))} in table: False",
            wanted,
            f"TP={_tp(c.profile)} needs (padded heads per rank, top_k); install a FlashInfer with it",
        )
    else:
        has = ", ".join(map(str, want))
        c.add("flashinfer-dsv4", "pass", setting, f"{got.get('table')} has {has}", wanted)


DEEPGEMM_LOCATE_ARGV = ["-m", "sparkpair_overlay.deepgemm"]

IMPORT_CHECK_TIMEOUT_S = 300.0
"""Seconds a check that imports the serving stack in a child (FlashInfer, vLLM's DeepGEMM wrapper:
torch and CUDA libraries, gigabytes from a cold page cache after a boot) may take. The 60 s of
other commands timed these out on a loaded 2-core CI machine, which a preflight must not report
as a broken package."""
"""Run with this node's Python: prints :func:`sparkpair_overlay.deepgemm.locate_deepgemm` as JSON."""


def check_deepgemm(c: Ctx) -> None:
    """The DeepGEMM vLLM will use is found, imports, and has the version vLLM vendors.

    Asks :func:`sparkpair_overlay.deepgemm.locate_deepgemm` (vLLM 0.33's own precedence: a
    top-level ``deep_gemm`` first, then the vendored ``vllm.third_party.deep_gemm``) in a child
    Python, as the probe does. DeepSeek-V4's sparse indexer has no CUDA path without DeepGEMM,
    so for a DSv4 profile a missing or non-importing DeepGEMM fails; elsewhere it warns. A
    replacement build (top-level ``deep_gemm``) or ``VLLM_USE_DEEP_GEMM=0`` is reported as a
    warning naming what vLLM will do (docs/reference/deepgemm-sm120.md).
    """
    from sparkpair_overlay.deepgemm import VLLM_033_VENDORED_VERSION

    setting = "DeepGEMM (vLLM's)"
    dsv4 = c.profile.is_dsv4
    bad: Status = "fail" if dsv4 else "warn"
    why_needed = "DeepSeek-V4's indexer needs it" if dsv4 else "vLLM falls back without it"
    try:
        r = c.host.run(
            "deepgemm-locate", [sys.executable, *DEEPGEMM_LOCATE_ARGV], timeout_s=IMPORT_CHECK_TIMEOUT_S
        )
    except CommandUnavailable as e:
        c.add("deepgemm", bad, setting, str(e), "vllm.third_party.deep_gemm found and importable", why_needed)
        return
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    try:
        loc = json.loads(lines[-1])
    except (IndexError, ValueError):
        tail = (r.stdout.strip().splitlines() or ["(no output)"])[-1]
        c.add("deepgemm", bad, setting, f"locator exited {r.rc}: {tail}", "its JSON answer", why_needed)
        return
    if "setting_error" in loc:
        c.add("deepgemm", "fail", "VLLM_USE_DEEP_GEMM", loc["setting_error"], "0 or 1")
        return
    c.report.facts["deepgemm"] = {k: loc.get(k) for k in ("module", "source", "version", "file")}
    want = f"vllm.third_party.deep_gemm {VLLM_033_VENDORED_VERSION} (vendored) or a replacement, importable"
    seen = f"{loc.get('module')} {loc.get('version')} ({loc.get('file')})"
    if loc.get("module") is None or not loc.get("importable"):
        note = f"{loc['reason']}; {why_needed}"
        c.add("deepgemm", bad, setting, seen if loc.get("module") else "none", want, note)
    elif not loc.get("enabled"):
        c.add("deepgemm", "warn", "VLLM_USE_DEEP_GEMM", "0", "1 unless the probe chose 0", loc["reason"])
    elif loc.get("source") == "external":
        c.add("deepgemm", "warn", setting, seen, want, f"a replacement DeepGEMM: {loc['reason']}")
    elif loc.get("version") != VLLM_033_VENDORED_VERSION:
        c.add("deepgemm", "warn", setting, seen, want, "vendored version differs from vLLM 0.33.0's")
    else:
        c.add("deepgemm", "pass", setting, seen, want)

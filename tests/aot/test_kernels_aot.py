"""Kernels-AOT tier (CPU, no GPU), on the image's Triton (the ``kernels`` extra's pin): every
config of every kernel compiles for what the image builds (sm_121a) without a spill, fits GB10's
101,376 B of shared memory on sm_12x, and runs only native fp8 MMAs there on its fp8 operands
(the block-scaled configs the block-scaled MMA); the gate fails, naming kernel/config/arch and
what is wrong, on a config that does not fit, one that spills, and on Triton 3.6's real sm_121a
output (tests/aot/fixtures, made by make_triton36_ptx.py there)."""

from __future__ import annotations

import gzip
import re
from pathlib import Path

import pytest

pytest.importorskip("triton")

from sparkpair_overlay.kernels import aot  # noqa: E402
from sparkpair_overlay.kernels._common import (  # noqa: E402
    GB10_SHARED_MEMORY_BYTES,
    make_config,
    triton_problem,
    triton_requirement,
)

pytestmark = [pytest.mark.aot, pytest.mark.slow]

FIXTURES = Path(__file__).parent / "fixtures"


def test_the_gate_runs_on_the_images_triton() -> None:
    """This venv's Triton is the pin of the ``kernels`` extra (the image's), and the check the
    gate and the Dockerfile run names a Triton of another series."""
    import triton

    want = triton_requirement()
    assert want is not None and want == f"triton=={triton.__version__}", (want, triton.__version__)
    assert triton_problem() == ""
    assert "Triton 3.6.0 is installed" in triton_problem("3.6.0") and want in triton_problem("3.6.0")


def image_archs() -> tuple[str, ...]:
    """The targets the image's AOT build compiles (the Dockerfile's ``SPARKPAIR_KERNEL_ARCHS``
    default): what ships, so what every config is gated on."""
    dockerfile = (Path(__file__).resolve().parents[2] / "Dockerfile").read_text()
    m = re.search(r"^ARG SPARKPAIR_KERNEL_ARCHS=([\w,]+)$", dockerfile, flags=re.M)
    assert m, "the Dockerfile names no SPARKPAIR_KERNEL_ARCHS default"
    return tuple(m.group(1).split(","))


#: The ptxas each target is assembled with here. sm_121a, what the image serves, takes CUDA 12.9's
#: (Triton 3.8's bundled ``ptxas``): the oldest release that knows sm_121a and the one the image's
#: base carries (the Dockerfile points Triton at it), which allocates registers differently from
#: 13.3's ``ptxas-blackwell`` (test below).
GATE_PTXAS = {"sm_121a": "ptxas"}

#: Every config is gated on what the image builds. sm_120a and sm_90a (in ``aot.DEFAULT_ARCHS``
#: for ``sparkpair kernels build``) are not: no image ships them, and the lent H100/H200 compile
#: with their own Triton 3.6 at run time (tests/gpu), so a 3.8 build proves nothing about them.
GATE_ARCHS = image_archs()


def test_the_gate_covers_what_the_image_builds() -> None:
    """Every target the image builds has its ptxas named here (a new one must say which)."""
    assert GATE_ARCHS and set(GATE_ARCHS) <= set(GATE_PTXAS), (GATE_ARCHS, GATE_PTXAS)


@pytest.mark.parametrize("arch", GATE_ARCHS)
def test_every_config_compiles_and_fits(arch: str, tmp_path) -> None:
    name = GATE_PTXAS[arch]
    results = aot.build([arch], str(tmp_path / "cache"), ptxas=aot.bundled_ptxas(name) if name else None)
    variants = aot.all_variants()
    assert len(results) == len(variants)
    if name == "ptxas":
        assert {r.ptxas for r in results} == {"12.9"}, {r.ptxas for r in results}
    problems = [r.problem() for r in results if not r.fits]
    assert not problems, "\n".join(problems)
    for v, r in zip(variants, results, strict=True):
        assert r.shared is not None and r.n_regs is not None, r
        if arch.startswith("sm_12"):
            assert r.spills == 0, r
            assert r.limit == GB10_SHARED_MEMORY_BYTES and r.shared <= GB10_SHARED_MEMORY_BYTES
            if v.mma is not None:  # every fp8 build: its MMAs are there, and all native
                assert r.mma and not aot.mma_problem(r.mma, v.mma), (r.config, r.mma)
    wanted = {v.mma for v in variants}
    assert {"fp8", "mxf8"} <= wanted, wanted  # both kinds of fp8 build are in the set


def test_the_mma_check_fails_on_triton36s_sm_121a_ptx() -> None:
    """Triton 3.6's sm_121a PTX of a decode tile (``tl.dot``: f16 MMAs on upcast operands) and of a
    block-scaled decode tile (``tl.dot_scaled``: bf16) fails the check the gate runs, naming the
    instruction; the PTX Triton 3.8 makes of the same configs passes it (the build above)."""
    ptx = {
        name: gzip.decompress((FIXTURES / f"triton36-sm_121a-{name}.ptx.gz").read_bytes()).decode()
        for name in ("dec_t16_d64_k4_w4", "mxd_t16_d64_k512_w4")
    }
    assert all(text.startswith("// Triton 3.6.0, sm_121a") for text in ptx.values())
    dec = aot.mma_instructions(ptx["dec_t16_d64_k4_w4"])
    assert dec == {"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32": 64}, dec
    msg = aot.mma_problem(dec, "fp8")
    assert "f32.f16.f16.f32 x64" in msg and "native fp8" in msg, msg
    mx = aot.mma_instructions(ptx["mxd_t16_d64_k512_w4"])
    for want in ("fp8", "mxf8"):
        assert "bf16.bf16" in aot.mma_problem(mx, want), (want, mx)
    # The same fixture through the gate's result: not fit, and the table's status says why.
    r = aot.AotResult("fp8_einsum", "dec_t16_d64_k4_w4", "ue8m0-int32-blocks", "sm_121a", ok=True,
                      n_regs=1, shared=1, spills=0, limit=GB10_SHARED_MEMORY_BYTES, mma=dec,
                      mma_error=msg)  # fmt: skip
    assert not r.fits and r.status == "upcast mma" and "sm_121a" in r.problem()
    # What Triton 3.8 emits passes: plain fp8, and block-scaled where that is wanted.
    native = {"mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32": 8}
    scaled = {"mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
              ".f32.e4m3.e4m3.f32.ue8m0": 8}  # fmt: skip
    assert aot.mma_problem(native, "fp8") == "" and aot.mma_problem(scaled, "fp8") == ""
    assert aot.mma_problem(scaled, "mxf8") == "" and "block-scaled" in aot.mma_problem(native, "mxf8")
    assert "no MMA" in aot.mma_problem({}, "fp8")


def test_gate_rejects_a_config_that_spills(tmp_path) -> None:
    """A 64x128 tile with the per-row share check on 4 warps and 4 stages (the config the plan
    had before Triton 3.8) spills on sm_121a with per-row packed scales: the gate fails it,
    naming the bytes."""
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.kernels import fp8_einsum_configs as fec

    base = aot.fp8_einsum_variants(("ue8m0-int32",))[0]
    cfg = fec._cfg("t64_d128_s4_bc", 64, 128, 4, 4, share_check=True)
    v = aot.AotVariant("fp8_einsum", cfg, base.variant, fe.jitted_kernel(cfg), base.args,
                       {**base.kwargs, **cfg.constexprs()}, "fp8")  # fmt: skip
    r = aot.compile_variant(v, "sm_121a", str(tmp_path))
    assert r.ok and r.spills and r.spills > 0 and not r.fits, r
    assert r.status == "spills" and f"spills {r.spills} B" in r.problem() and "t64_d128_s4_bc" in r.problem()


def test_gate_rejects_a_config_that_spills_only_with_cuda_129s_ptxas(tmp_path) -> None:
    """A 32x64 decode tile over 2 K blocks (dropped from the configs for this) on per-row packed scales:
    CUDA 13.3's ptxas (Triton's default) fits it in 106 registers, CUDA 12.9's (the image's base) spills
    8 B; the gate assembling sm_121a with 12.9 fails it, naming the release."""
    from sparkpair_overlay.kernels import fp8_einsum_configs as fec

    cfg = fec._dcfg("dec_t32_d64_k2_w4", 32, 64, 2, 4)
    variants = aot.fp8_einsum_variants(("ue8m0-int32",))
    base = next(v for v in variants if v.config.name == "dec_t16_d64_k2_w4")
    kwargs = {**base.kwargs, **cfg.constexprs()}
    v = aot.AotVariant("fp8_einsum", cfg, base.variant, base.fn, base.args, kwargs, "fp8")
    new = aot.compile_variant(v, "sm_121a", str(tmp_path / "a"), aot.bundled_ptxas("ptxas-blackwell"))
    old = aot.compile_variant(v, "sm_121a", str(tmp_path / "b"), aot.bundled_ptxas("ptxas"))
    assert (new.ptxas, old.ptxas) == ("13.3", "12.9")
    assert new.fits and new.spills == 0, new
    assert not old.fits and old.spills and old.status == "spills", old
    assert "(ptxas 12.9) spills" in old.problem() and "dec_t32_d64_k2_w4" in old.problem()
    with pytest.raises(ValueError, match="unknown bundled ptxas 'nvcc'"):
        aot.bundled_ptxas("nvcc")


def _oversized_fp8_variant() -> aot.AotVariant:
    base = aot.fp8_einsum_variants(("ue8m0-int32",))[0]
    cfg = make_config(
        "t256_d256_s4_oversized",
        "_fp8_einsum_tile_kernel",
        8,
        4,
        BLOCK_T=256,
        BLOCK_D=256,
        BLOCK_R=128,
        GROUP_T=8,
    )
    kwargs = {**base.kwargs, **cfg.constexprs()}
    return aot.AotVariant("fp8_einsum", cfg, base.variant, base.fn, base.args, kwargs)


def test_gate_rejects_config_over_gb10_shared_memory(tmp_path) -> None:
    v = _oversized_fp8_variant()
    r121 = aot.compile_variant(v, "sm_121a", str(tmp_path))
    assert r121.ok and r121.shared > GB10_SHARED_MEMORY_BYTES
    assert not r121.fits
    msg = r121.problem()
    assert "fp8_einsum/t256_d256_s4_oversized" in msg and "sm_121a" in msg and str(r121.shared) in msg
    assert "101376" in msg
    assert aot.shared_memory_limit("sm_90a") is None  # no GB10 limit on Hopper


def test_gate_reports_compile_errors(tmp_path) -> None:
    base = aot.router_variants()[0]
    bad = aot.AotVariant(
        base.kernel, base.config, base.variant, base.fn, base.args, {**base.kwargs, "BLOCK_K": 48}
    )  # not a power of two: tl.arange rejects it
    r = aot.compile_variant(bad, "sm_121a", str(tmp_path))
    assert not r.ok and not r.fits and "does not compile for sm_121a" in r.problem()


def test_cli_fails_non_zero_naming_the_config(tmp_path, monkeypatch) -> None:
    typer = pytest.importorskip("typer")
    from sparkpair_cli import cmd_kernels
    from typer.testing import CliRunner

    # A config that fails to compile (fails at once; the shared-memory rejection is the test above's).
    base = aot.router_variants()[0]
    broken = aot.AotVariant(
        base.kernel, base.config, base.variant, base.fn, base.args, {**base.kwargs, "BLOCK_K": 48}
    )
    small = aot.router_variants()[1:2] + [broken]
    monkeypatch.setattr(aot, "all_variants", lambda: small)
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    cmd_kernels.register(app)
    cache = tmp_path / "tcache"
    res = CliRunner().invoke(app, ["kernels", "build", "--arch", "sm_121a,sm_90a", "--cache-dir", str(cache)])
    assert res.exit_code == 1, res.output
    assert base.config.name in res.output and "does not compile for sm_121a" in res.output, res.output
    assert small[0].config.name in res.output, "the table keeps whole config names when piped"
    assert any(cache.rglob("*.cubin")), "the cache directory holds the compiled kernels"
    monkeypatch.setattr(aot, "all_variants", lambda: small[:1])
    ok = CliRunner().invoke(app, ["kernels", "build", "--arch", "sm_121a", "--quiet"])
    assert ok.exit_code == 0, ok.output
    bad = CliRunner().invoke(app, ["kernels", "build", "--arch", "sm_75"])
    assert bad.exit_code != 0


def test_shipped_cache_has_the_keys_the_runtime_looks_up(tmp_path, monkeypatch) -> None:
    """The cache the gate writes is hit by the real launchers (same specialisation and options).

    The launchers run with CPU tensors under the gate's stand-in sm_90a driver: Triton computes
    the runtime cache key, finds (or misses) the entry, and only then fails to launch (no GPU).
    """
    import torch
    import triton
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.kernels import router_gemm as rg
    from sparkpair_overlay.numerics import make_fp8_operands

    cache = tmp_path / "cache"
    # What the calls below can look up: every router config, the fp8_einsum plans' configs and
    # their split sums (the rest of the fp8_einsum set is built by the test of every config).
    plans = {name for _, name in fe.FP8_EINSUM_PLAN_UE8M0 + fe.FP8_EINSUM_PLAN_FP32}
    plans |= {c.name for c in fe.FP8_EINSUM_SUM_CONFIGS}
    variants = [v for v in aot.all_variants() if v.kernel == "router_gemm" or v.config.name in plans]
    results = aot.build(["sm_90a"], str(cache), variants)
    assert all(r.fits for r in results)
    kernels = (
        rg._router_dot_kernel,
        rg._router_rows_kernel,
        rg._router_reduce_kernel,
        *fe.JITTED.values(),
    )
    for fn in kernels:
        fn.device_caches.clear()  # forget the in-memory kernels: go through the file cache
    events: list[tuple[str, bool]] = []

    def listener(src, metadata, metadata_group, times, cache_hit):  # noqa: ANN001
        events.append((metadata.get("name", "?") if isinstance(metadata, dict) else "?", cache_hit))

    monkeypatch.setattr(triton.knobs.compilation, "listener", listener)
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # lets the launchers take CPU tensors
    calls = []
    for w_dtype in (torch.bfloat16, torch.float32):
        w = torch.randn(256, 4096).to(w_dtype)
        planes = rg.bf16x3_split(w) if w_dtype == torch.float32 else None
        for m in (1, 8, 32, 64, 2048, 8192):
            for presplit in (True, False) if planes is not None else (True,):
                cfg = rg.select_router_config(m, w_dtype, 4096, presplit=presplit)
                if cfg is not None:
                    calls.append(
                        lambda m=m, w=w, cfg=cfg, p=planes if presplit else None: rg.router_gemm_with_config(
                            torch.randn(m, 4096).bfloat16(), w, cfg, planes=p
                        )
                    )
    for recipe, enc in (((1, 1, 128), "int32"), ((1, 128, 128), "fp32"), ((1, 1, 128), "int32-bcast")):
        for t in (1, 32, 64, 512, 2048):
            ops = make_fp8_operands(t, 4, 1024, 4096, recipe, enc, device="cpu")
            out = torch.empty((t, 4, 1024), dtype=torch.bfloat16)
            # int32-bcast: per-row scales that repeat their 128-row block, which the dispatcher
            # hands the kernel as the strided block view (block_scales_view answers at once here).
            calls.append(
                lambda ops=ops, out=out, recipe=recipe: fe.fp8_einsum_with_config(
                    "bhr,hdr->bhd", (ops[0], ops[1]), (ops[2], ops[3]), out, recipe
                )
            )
    with aot._target_driver("sm_90a", str(cache)):
        for call in calls:
            try:
                call()
            except AttributeError as exc:  # the launch itself: the stand-in driver has no launcher
                assert "launcher_cls" in str(exc), exc  # any earlier failure would skip the lookup
    print("cache lookups:", events)
    assert events, "no kernel was looked up"
    misses = [name for name, hit in events if not hit]
    assert not misses, f"runtime keys missing from the shipped cache: {misses}"

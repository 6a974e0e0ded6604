"""Kernels-AOT tier (CPU, no GPU): every config of every kernel compiles for sm_121a, sm_120a,
sm_100a and sm_90a, and fits GB10's 101,376 B of shared memory on sm_12x; the gate fails, naming
kernel/config/arch/bytes, on a config that does not fit."""

from __future__ import annotations

import pytest

pytest.importorskip("triton")

from sparkpair_overlay.kernels import aot  # noqa: E402
from sparkpair_overlay.kernels._common import (  # noqa: E402
    GB10_SHARED_MEMORY_BYTES,
    SM90_SHARED_MEMORY_BYTES,
    make_config,
)

pytestmark = [pytest.mark.aot, pytest.mark.slow]


@pytest.mark.parametrize("arch", aot.DEFAULT_ARCHS)
def test_every_config_compiles_and_fits(arch: str, tmp_path) -> None:
    results = aot.build([arch], str(tmp_path / "cache"))
    assert len(results) == len(aot.all_variants())
    problems = [r.problem() for r in results if not r.fits]
    assert not problems, "\n".join(problems)
    for r in results:
        assert r.shared is not None and r.n_regs is not None, r
        if arch.startswith("sm_12"):
            assert r.limit == GB10_SHARED_MEMORY_BYTES and r.shared <= GB10_SHARED_MEMORY_BYTES


def _oversized_fp8_variant() -> aot.AotVariant:
    base = aot.fp8_einsum_variants(("ue8m0-int32",))[0]
    cfg = make_config(
        "t256_d256_s4_oversized", "_fp8_einsum_kernel", 8, 4, BLOCK_T=256, BLOCK_D=256, BLOCK_R=128, GROUP_T=8
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
    r90 = aot.compile_variant(v, "sm_90a", str(tmp_path))  # no GB10 limit on Hopper
    assert r90.limit is None


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

    small = aot.router_variants()[:1] + [_oversized_fp8_variant()]
    monkeypatch.setattr(aot, "all_variants", lambda: small)
    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        """test root"""

    cmd_kernels.register(app)
    cache = tmp_path / "tcache"
    res = CliRunner().invoke(app, ["kernels", "build", "--arch", "sm_121a,sm_90a", "--cache-dir", str(cache)])
    assert res.exit_code == 1, res.output
    assert "t256_d256_s4_oversized" in res.output and "sm_121a" in res.output
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
    results = aot.build(["sm_90a"], str(cache))
    assert all(r.fits for r in results)
    kernels = (rg._router_dot_kernel, rg._router_rows_kernel, rg._router_reduce_kernel, fe._fp8_einsum_kernel)
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
        for t in (1, 32, 64, 2048):
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


#: The most dynamic shared memory one CTA may use on an H100/H200 (227 KB; NVIDIA's Hopper tuning
#: guide, https://docs.nvidia.com/cuda/hopper-tuning-guide/).


@pytest.mark.parametrize("kinds", ((0, 0, False), (1, 1, True), (2, 2, True)), ids=("fp32", "int32", "u8"))
def test_gluon_decode_configs_build_for_sm90a_and_fit_one_h200_block(kinds, tmp_path, monkeypatch) -> None:
    """PATH 4 and 5 (Gluon, wgmma) are built for sm_90a only: every config compiles for each scale
    encoding, with its K range and ring as dispatched on R = 4096, within one H200 block's shared
    memory (a ring three times deeper does not fit: the bound can fail)."""
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.kernels import fp8_einsum_gluon as fg

    if not fg.HAS_GLUON:
        pytest.skip("this Triton has no Gluon Hopper API")
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon._runtime import GluonASTSource

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    ptr = {0: "*fp32", 1: "*i32", 2: "*u8"}

    def build(cfg, stages: int):
        m = cfg.constexprs()
        bt, bd = m["BLOCK_T"], m["BLOCK_D"]
        lay = {n: gl.NVMMASharedLayout.get_default_for([n, 128], gl.float8e4nv) for n in {bt, bd}}
        consts = {
            "SA_KIND": kinds[0], "SW_KIND": kinds[1], "SW_PER_ROW": kinds[2], "BLOCK_T": bt, "BLOCK_D": bd,
            "STAGES": stages, "num_warps": cfg.num_warps,
        }  # fmt: skip
        if m["PATH"] == 4:
            kernel = fg._fp8_einsum_gluon_kernel
            consts.update(KB_PER=32 // m["SPLIT_R"], USE_PDL=True)
        else:
            kernel = fg._fp8_einsum_gluon_tm_kernel
            consts.update(KB=32)
        types = {
            "ws_ptr": "*fp32", "out_ptr": "*bf16", "sa_ptr": ptr[kinds[0]], "sw_ptr": ptr[kinds[1]],
            "w_desc": f"tensordesc<fp8e4nv[{bd}, 128],{lay[bd]!r}>",
            "a_desc": f"tensordesc<fp8e4nv[{bt}, 128],{lay[bt]!r}>",
        }  # fmt: skip
        names = kernel.arg_names
        sig = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
        src = GluonASTSource(kernel, sig, constexprs={(names.index(k),): v for k, v in consts.items()})
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": cfg.num_warps})

    assert {c["PATH"] for c in fe.FP8_EINSUM_GLUON_CONFIGS} == {4, 5}
    for cfg in fe.FP8_EINSUM_GLUON_CONFIGS:
        k = build(cfg, cfg["STAGES"])
        assert 0 < k.metadata.shared <= SM90_SHARED_MEMORY_BYTES, (cfg.name, k.metadata.shared)
        assert "wgmma.mma_async" in k.asm["ptx"] and "cp.async.bulk.tensor" in k.asm["ptx"], cfg.name
        n_regs, spills = aot._resource_usage(k.asm["cubin"])
        print(f"{cfg.name} kinds={kinds}: {k.metadata.shared} B shared, {n_regs} registers, {spills} B spill")
        assert spills == 0, (cfg.name, spills)
    for cfg in fe.FP8_EINSUM_GLUON_CONFIGS:
        deep = build(cfg, 3 * cfg["STAGES"])
        assert deep.metadata.shared > SM90_SHARED_MEMORY_BYTES, (cfg.name, deep.metadata.shared)


@pytest.mark.parametrize("enc", ("fp32", "int32", "int32-bcast", "e8m0"))
def test_gluon_kernels_as_dispatched_build_for_sm90a_without_spills(enc, tmp_path, monkeypatch) -> None:
    """What the dispatcher launches on compute capability 9.x at T = 17 … 128 (paths 4 and 5),
    built for sm_90a from the served operands (their strides and sizes: Triton specialises on
    what is not ``do_not_specialize``, so the generic build above can differ), spills no
    register, and one build per config serves every T. A PATH 5 form with compile-time K
    coordinates spilled 232 B on fp32 scales and ran 1.6x slower on the H200 (run 5 of
    benchmarks/results/explore-2026-12-04-k17k/README.md); R = 3072 (24 K blocks, not a power
    of 2) must build too."""
    import torch
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.kernels import fp8_einsum_gluon as fg
    from sparkpair_overlay.numerics import make_fp8_operands

    if not fg.HAS_GLUON:
        pytest.skip("this Triton has no Gluon Hopper API")
    recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
    # the dispatcher's own plan, as on an sm_90 GPU with Gluon (these are CPU tensors)
    monkeypatch.setattr(fe, "_tma_ok", lambda x, w: True)
    monkeypatch.setattr(fe, "_gluon_ok", lambda x, w: True)
    builds: dict[str, set[str]] = {}
    shapes = [(t, 4096) for t in (17, 32, 33, 64, 65, 128)] + [(36, 3072), (100, 3072)]
    for t, r in shapes:
        a, sa, w, sw, _, _ = make_fp8_operands(t, 4, 1024, r, recipe, enc, device="cpu")
        out = torch.empty((t, 4, 1024), dtype=torch.bfloat16)
        sa_kind, sa, sw_kind, sw, per_row = fe._prepare(fe.SUPPORTED_EQUATION, a, sa, w, sw, out, recipe)
        cfg, sw, per_row = fe._plan(a, w, sw, sa_kind, sw_kind, per_row)  # int32-bcast: the block view
        assert per_row == (enc in ("int32", "e8m0"))
        assert cfg["PATH"] in (4, 5) and fe._gluon_fits(cfg, r), (cfg.name, r)
        kernel, grid, args, kwargs = fe._gluon_launch(cfg, a, sa, w, sw, out, sa_kind, sw_kind, per_row)
        with aot._target_driver("sm_90a", str(tmp_path)):
            k = kernel.warmup(*args, grid=grid, **kwargs)
            k = k.result() if hasattr(k, "result") else k
        assert k.metadata.shared == fe._gluon_shared_bytes(cfg, r, per_row), (cfg.name, enc, t, r)
        n_regs, spills = aot._resource_usage(k.asm["cubin"])
        if r == 4096:  # the served shape
            assert spills == 0, (cfg.name, enc, t, n_regs, spills)
            builds.setdefault(cfg.name, set()).add(k.hash)
    assert all(len(h) == 1 for h in builds.values()), builds  # no build per T

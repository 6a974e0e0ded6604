"""fp8_einsum on the GPU: both recipes and all scale encodings against fp64, graphs, determinism."""

from __future__ import annotations

import pytest
import torch
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import fp8_einsum_reference, make_fp8_operands, rel_fro

pytestmark = pytest.mark.gpu

TS = (1, 3, 17, 31, 36, 100, 129, 4099)
G, D, R = 4, 1024, 4096  # TP=2 (docs/reference/vllm-code-paths.md#dsv4-shapes)
CASES = [
    ((1, 128, 128), "fp32"),
    ((1, 1, 128), "int32"),
    ((1, 1, 128), "e8m0"),
    ((1, 128, 128), "e8m0"),
    ((1, 1, 128), "int32-bcast"),  # block scales broadcast per row: DeepGEMM's sm_10x/12x layout
]
IDS = ["r128-fp32", "r1-int32", "r1-e8m0", "r128-e8m0", "r1-int32-bcast"]
TOL = 1e-2  # relative Frobenius, bf16-output level (issue 3)


def _run(t, g, d, r, recipe, enc, config=None, seed=0):
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, g, d, r, recipe, enc, seed=seed)
    return call_fp8_einsum(a, sa, w, sw, recipe, config), fp8_einsum_reference(a, sa_f, w, sw_f)


@pytest.mark.parametrize("recipe,enc", CASES, ids=IDS)
@pytest.mark.parametrize("t", TS)
def test_dispatch_matches_fp64(t, recipe, enc) -> None:
    out, ref = _run(t, G, D, R, recipe, enc, seed=t)
    assert not out.isnan().any(), "unwritten (poisoned) outputs"
    err = rel_fro(out, ref)
    assert err <= TOL, f"T={t} {recipe} {enc}: rel fro err {err:.3g}"


@pytest.mark.parametrize("t", (1, 31, 129))
def test_every_config(t) -> None:
    for cfg in fe.FP8_EINSUM_CONFIGS:
        for recipe, enc in (*CASES[:2], CASES[4]):
            out, ref = _run(t, G, D, R, recipe, enc, config=cfg, seed=7)
            assert not out.isnan().any(), cfg.name
            assert rel_fro(out, ref) <= TOL, (cfg.name, recipe, enc)


@pytest.mark.parametrize("t", (1, 31, 129))
def test_every_gluon_config(t) -> None:
    """Every PATH 4 / 5 config, explicitly, at T off its plan's range (T = 1: one token in a 32-,
    64- or 128-token tile; T = 129: a second T tile of one token), on every scale encoding: no
    output left unwritten, fp64-close, the same bits on a second call."""
    if torch.cuda.get_device_capability()[0] != 9 or not fe.HAS_GLUON:
        pytest.skip("paths 4 and 5 run on compute capability 9.x with Gluon only")
    for cfg in fe.FP8_EINSUM_GLUON_CONFIGS:
        for recipe, enc in CASES:
            a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=9)
            out = call_fp8_einsum(a, sa, w, sw, recipe, cfg)
            assert not out.isnan().any(), (cfg.name, enc)
            assert rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, (cfg.name, recipe, enc)
            assert torch.equal(out, call_fp8_einsum(a, sa, w, sw, recipe, cfg)), (cfg.name, enc)


@pytest.mark.parametrize(
    "t,g,d,r",
    ((36, 4, 1024, 3072), (100, 4, 1024, 3072), (36, 4, 1000, 4096), (100, 4, 1000, 4096),
     (100, 4, 1024, 512), (36, 8, 1024, 4096), (100, 8, 1024, 4096)),
)  # fmt: skip
def test_gluon_plan_on_other_shapes(t, g, d, r) -> None:
    """Shapes other than the served TP=2 one through the public dispatch on compute capability
    9.x: K block counts that are not a power of 2 (R = 3072: 24 blocks), a D tail (D = 1000),
    TP=1's eight groups, and an R too short for the Gluon rings (R = 512: the dispatcher takes
    another plan); every scale encoding fp64-close, the same bits twice, and where the Gluon
    config fits, its explicit call's bits."""
    if torch.cuda.get_device_capability()[0] != 9 or not fe.HAS_GLUON:
        pytest.skip("paths 4 and 5 are dispatched on compute capability 9.x with Gluon only")
    for recipe, enc in CASES:
        a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, g, d, r, recipe, enc, seed=t + r)
        cfg = fe.select_fp8_einsum_config(t, enc == "fp32", tma=True, per_row=recipe[1] == 1, gluon=True)
        assert fe._gluon_fits(cfg, r) == (r != 512), (cfg.name, r)
        out = call_fp8_einsum(a, sa, w, sw, recipe)
        assert not out.isnan().any(), (enc, t, g, d, r)
        assert rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, (enc, t, g, d, r)
        assert torch.equal(out, call_fp8_einsum(a, sa, w, sw, recipe)), (enc, t, g, d, r)
        if r != 512:
            assert torch.equal(out, call_fp8_einsum(a, sa, w, sw, recipe, cfg)), (cfg.name, enc)


@pytest.mark.parametrize("t", (1, 17, 300))
def test_tp1_shapes(t) -> None:
    out, ref = _run(t, 8, D, R, (1, 1, 128), "int32", seed=3)
    assert rel_fro(out, ref) <= TOL


@pytest.mark.parametrize("t", (1, 300, 4099))
def test_rows_sharing_scales_match_block_scales_bitwise(t) -> None:
    """SHARE_CHECK configs: per-row UE8M0 scales that repeat each 128x128 block's scale (DeepGEMM's
    layout) give the bits of the same call with the block scales; a row with its own scale in one
    K block is still scaled by its own and the other tiles keep their bits. (Both loops give the
    same bits, so which one ran is shown by the CPU test of the tile check and by the benchmark.)"""
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 1, 128), "int32-bcast", seed=5)
    sw_block = sw_f[:, ::128].contiguous()  # fp32 [G, D/128, Kb], the same values
    configs = [c for c in fe.FP8_EINSUM_CONFIGS if c["SHARE_CHECK"]]
    assert configs
    for cfg in configs:
        rows = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
        block = torch.empty_like(rows)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), rows, (1, 1, 128), cfg)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw_block), block, (1, 128, 128), cfg)
        assert torch.equal(rows, block), cfg.name
        # One row (group 2, row 300) gets 8x its block's scale in K block 5.
        words = sw.clone()
        words[2, 300, 1] += 3 << 8  # K block 5 is byte 1 of word 1
        sw_odd = sw_f.clone()
        sw_odd[2, 300, 5] *= 8
        odd = torch.empty_like(rows)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, words), odd, (1, 1, 128), cfg)
        ref = fp8_einsum_reference(a, sa_f, w, sw_odd)
        assert rel_fro(odd[:, 2, 300], ref[:, 2, 300]) <= TOL, cfg.name
        assert rel_fro(odd, ref) <= TOL, cfg.name
        tile = torch.zeros(G, D, dtype=torch.bool, device="cuda")
        bd = cfg["BLOCK_D"]
        tile[2, (300 // bd) * bd : (300 // bd + 1) * bd] = True
        assert torch.equal(odd[:, ~tile], block[:, ~tile]), cfg.name


def test_encodings_agree_bitwise() -> None:
    """B02: e8m0fnu, packed int32 and fp32 scales with the same exponents give the same bits."""
    t = 37
    outs = {}
    for enc in ("fp32", "int32", "e8m0"):
        a, sa, w, sw, _, _ = make_fp8_operands(t, G, D, R, (1, 1, 128), enc, seed=11)
        out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
        # same config for all (the plans differ by encoding; tile shapes change MMA rounding)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 1, 128), "t64_d64_s4")
        outs[enc] = out
    assert torch.equal(outs["fp32"], outs["int32"])
    assert torch.equal(outs["fp32"], outs["e8m0"])


def test_contiguous_activation_layout() -> None:
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(19, G, D, R, (1, 128, 128), "fp32", group_major=False)
    out = torch.empty((19, G, D), dtype=torch.bfloat16, device="cuda")
    fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=(1, 128, 128))
    assert rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL


def test_deterministic_bitwise() -> None:
    for t in (1, 129, 4099):
        a, sa, w, sw, _, _ = make_fp8_operands(t, G, D, R, (1, 1, 128), "int32")
        outs = []
        for _ in range(4):
            out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
            fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=(1, 1, 128))
            outs.append(out)
        assert all(torch.equal(outs[0], o) for o in outs[1:]), t


def _n_compiled() -> int:
    kernels = [fe._fp8_einsum_kernel]
    if fe.HAS_GLUON:  # paths 4 and 5 (T = 17 .. 128 on compute capability 9.x)
        from sparkpair_overlay.kernels import fp8_einsum_gluon as fg

        kernels += [fg._fp8_einsum_gluon_kernel, fg._fp8_einsum_gluon_tm_kernel]
    return sum(len(c[0]) for k in kernels for c in k.device_caches.values())


def test_no_recompile_across_t() -> None:
    ops = {t: make_fp8_operands(t, G, D, R, (1, 1, 128), "int32", seed=t) for t in range(1, 70)}
    ops |= {t: make_fp8_operands(t, G, D, R, (1, 1, 128), "int32", seed=t) for t in (100, 127, 128)}
    for t in (1, 16, 17, 32, 33, 64, 65, 66):  # warm each plan config
        a, sa, w, sw, _, _ = ops[t]
        fe.fp8_einsum(
            "bhr,hdr->bhd",
            (a, sa),
            (w, sw),
            torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda"),
            recipe=(1, 1, 128),
        )
    before = _n_compiled()
    for t, (a, sa, w, sw, _, _) in ops.items():
        out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=(1, 1, 128))
    assert _n_compiled() == before


@pytest.mark.parametrize("recipe,enc", CASES[:2], ids=IDS[:2])
def test_cuda_graph_capture_and_replay_across_t(recipe, enc) -> None:
    graphs = {}
    for t in (1, 5, 32, 37, 300, 1100):  # 1100, fp32: PATH 3 on sm_90 (its descriptor scratch reused)
        a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=t)
        out = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
        graphs[t] = (g, a, sa, w, sw, sa_f, sw_f, out)
    for t, (g, a, _sa, w, _sw, sa_f, sw_f, out) in graphs.items():
        new = make_fp8_operands(t, G, D, R, recipe, enc, seed=1000 + t)
        a.copy_(new[0])
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, t


def test_custom_op_and_errors() -> None:
    a, sa, w, sw, _, _ = make_fp8_operands(3, G, D, R, (1, 1, 128), "int32")
    out = torch.empty((3, G, D), dtype=torch.bfloat16, device="cuda")
    torch.ops.sparkpair.fp8_einsum("bhr,hdr->bhd", a, sa, w, sw, out, [1, 1, 128])
    with pytest.raises(ValueError, match="equation"):
        fe.fp8_einsum("bhr,hrd->bhd", (a, sa), (w, sw), out, recipe=(1, 1, 128))


def test_split_configs_reset_counters_and_repeat_bitwise() -> None:
    from sparkpair_overlay.kernels._common import SEMAPHORES

    for cfg in fe.FP8_EINSUM_CONFIGS:
        if cfg["SPLIT_R"] == 1:
            continue
        a, sa, w, sw, sa_f, sw_f = make_fp8_operands(9, G, D, R, (1, 1, 128), "int32", seed=4)
        outs = []
        for _ in range(3):
            out = torch.empty((9, G, D), dtype=torch.bfloat16, device="cuda")
            fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 1, 128), cfg)
            outs.append(out)
        assert all(torch.equal(outs[0], o) for o in outs[1:]), cfg.name
        assert rel_fro(outs[0], fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, cfg.name
    torch.cuda.synchronize()
    for arena in SEMAPHORES._arena.values():
        assert int(arena.abs().sum()) == 0


@pytest.mark.parametrize("recipe,enc", (CASES[0], CASES[4]), ids=(IDS[0], IDS[4]))
@pytest.mark.parametrize("t", (1, 16, 32))
def test_decode_pdl_reads_activations_written_just_before(t, recipe, enc) -> None:
    """The decode configs launch with PDL and load the weight before ``gdc_wait``: inside one
    graph, each call must see the activations a copy kernel wrote just before it (not the previous
    call's), and its split sum must read this call's partials."""
    cfg = fe.select_fp8_einsum_config(t, fp32_scales=enc == "fp32")
    assert cfg["PATH"] == 1 and cfg["USE_PDL"], cfg.name
    # Contiguous activations: group-major ones take PATH 4 from FP8_EINSUM_GLUON_MIN_T on sm_90.
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=21, group_major=False)
    assert t < fe.FP8_EINSUM_GLUON_MIN_T or not fe._tma_ok(a, w)  # at T = 1 both layouts are one
    srcs = [make_fp8_operands(t, G, D, R, recipe, enc, seed=22 + k)[0] for k in range(3)]
    assert_graph_calls_read_fresh_activations(a, sa, w, sw, sa_f, sw_f, recipe, srcs, cfg.name)


def assert_graph_calls_read_fresh_activations(a, sa, w, sw, sa_f, sw_f, recipe, srcs, label) -> None:
    """Inside one CUDA graph, each ``fp8_einsum`` call after a copy kernel writes ``srcs[k]`` into
    ``a`` gives the fp64-close result of ``srcs[k]`` (not the previous call's activations, nor its
    partials). The public call is made once outside capture first (warm-up)."""
    t = a.shape[0]
    outs = [torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda") for _ in srcs]
    fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), outs[0], recipe=recipe)  # warm-up outside capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for src, out in zip(srcs, outs, strict=True):
            a.copy_(src)
            fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    for out in outs:
        out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for k, (src, out) in enumerate(zip(srcs, outs, strict=True)):
        err = rel_fro(out, fp8_einsum_reference(src, sa_f, w, sw_f))
        assert err <= TOL, (label, k, err)


def test_decode_pdl_and_plain_launch_give_the_same_bits() -> None:
    for recipe, enc in (CASES[0], CASES[1]):
        a, sa, w, sw, _, _ = make_fp8_operands(13, G, D, R, recipe, enc, seed=9)
        outs = []
        for name in ("dec_t16_d64_k4_w4", "dec_t16_d64_k4_w4_nopdl"):
            out = torch.empty((13, G, D), dtype=torch.bfloat16, device="cuda")
            fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, name)
            outs.append(out)
        assert torch.equal(outs[0], outs[1]), enc


def test_prefill_takes_the_persistent_tma_path_on_sm90_only_where_it_can() -> None:
    """From FP8_EINSUM_TMA_MIN_T on a compute capability 9.x GPU, group-major activations with
    block weight scales take PATH 3 (same bits as its explicit call, fp64-close, the same bits run
    to run); per-row weight scales keep the plan's config on their first call (before
    block_scales_view has answered; what follows: the test of every T below); contiguous
    activations keep the plan's PATH 0 config; an explicit PATH 3 call on them is refused."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("PATH 3 is dispatched on compute capability 9.x only")
    t = fe.FP8_EINSUM_TMA_MIN_T
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 128, 128), "fp32", seed=2)
    assert fe._tma_ok(a, w)
    assert fe.select_fp8_einsum_config(t, True, tma=True).name == fe.FP8_EINSUM_TMA_PLAN_CONFIG
    assert fe.select_fp8_einsum_config(t - 1, True, tma=True).name != fe.FP8_EINSUM_TMA_PLAN_CONFIG
    assert_dispatch_is(fe.FP8_EINSUM_TMA_PLAN_CONFIG, a, sa, w, sw, sa_f, sw_f, (1, 128, 128))
    explicit = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
    p = make_fp8_operands(t, G, D, R, (1, 1, 128), "int32-bcast", seed=2)
    plan = fe.select_fp8_einsum_config(t)
    via_plan, via_auto = torch.empty_like(explicit), torch.empty_like(explicit)
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (p[0], p[1]), (p[2], p[3]), via_plan, (1, 1, 128), plan)
    fe.fp8_einsum("bhr,hdr->bhd", (p[0], p[1]), (p[2], p[3]), via_auto, recipe=(1, 1, 128))
    assert plan.constexprs().get("PATH", 0) == 0 and torch.equal(via_plan, via_auto)
    c = make_fp8_operands(t, G, D, R, (1, 128, 128), "fp32", seed=2, group_major=False)
    assert not fe._tma_ok(c[0], c[2])
    with pytest.raises(ValueError, match="group-major"):
        fe.fp8_einsum_with_config(
            "bhr,hdr->bhd", (c[0], c[1]), (c[2], c[3]), explicit, (1, 128, 128), fe.FP8_EINSUM_TMA_PLAN_CONFIG
        )


def call_fp8_einsum(a, sa, w, sw, recipe, config=None) -> torch.Tensor:
    """bf16 ``[T, G, D]`` output of the public dispatch (``config`` None) or of ``config``, written
    into a NaN-poisoned tensor on ``a``'s device."""
    out = torch.full(
        (a.shape[0], a.shape[1], w.shape[1]), float("nan"), dtype=torch.bfloat16, device=a.device
    )
    if config is None:
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    else:
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, config)
    return out


def assert_dispatch_is(name, a, sa, w, sw, sa_f, sw_f, recipe) -> None:
    """The public call gives the bits of the explicit call of config ``name``, the same bits
    twice, and stays within TOL of the fp64 reference."""
    outs = [call_fp8_einsum(a, sa, w, sw, recipe, config) for config in (None, None, name)]
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2]), name
    assert rel_fro(outs[0], fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, name


@pytest.mark.parametrize("t", (65, 100, 128))
@pytest.mark.parametrize("recipe,enc", (CASES[1], CASES[4]), ids=("r1-int32", "r1-int32-bcast"))
def test_mid_t_takes_path3_with_k_splits_on_sm90(t, recipe, enc, monkeypatch) -> None:
    """UE8M0 scales, T = 65 .. 128 on a compute capability 9.x GPU without Gluon (switched off
    here) with group-major activations: the mid plan (PATH 3, K in four splits, PATH 2 sums them;
    launched with PDL) gives the bits of its explicit call and of the plain launch, the same bits
    run to run, fp64-close, and inside one CUDA graph reads activations a copy kernel wrote just
    before; T = 32 and 129, both-fp32 scales and contiguous activations keep the plans."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("PATH 3 is dispatched on compute capability 9.x only")
    monkeypatch.setattr(fe, "HAS_GLUON", False)
    cfg = fe.select_fp8_einsum_config(t, False, tma=True, per_row=True, gluon=False)
    assert cfg.constexprs()["PATH"] == 3 and cfg["SPLIT_R"] == 4, cfg.name
    for other in (
        fe.select_fp8_einsum_config(
            fe.FP8_EINSUM_TMA_MID_MIN_T - 1, False, tma=True, per_row=True, gluon=True
        ),
        fe.select_fp8_einsum_config(129, False, tma=True, per_row=True),
        fe.select_fp8_einsum_config(t, True, tma=True),
        fe.select_fp8_einsum_config(t, False, tma=False, per_row=True),
    ):
        assert other.constexprs().get("PATH", 0) != 3, other.name
    assert cfg["USE_PDL"] == (t > 64), cfg.name
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=t)
    assert fe._tma_ok(a, w)
    assert_dispatch_is(cfg.name, a, sa, w, sw, sa_f, sw_f, recipe)
    plain = torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda")
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), plain, recipe, "tma_t64_d128_s4_sk4_nosc")
    pdl = torch.empty_like(plain)
    fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), pdl, recipe=recipe)
    assert torch.equal(plain, pdl), (enc, t)
    srcs = [make_fp8_operands(t, G, D, R, recipe, enc, seed=60 + k)[0] for k in range(2)]
    assert_graph_calls_read_fresh_activations(a, sa, w, sw, sa_f, sw_f, recipe, srcs, (enc, t))


@pytest.mark.parametrize("t", (17, 24, 32, 33, 36, 50, 64, 65, 100, 128))
@pytest.mark.parametrize(
    "recipe,enc",
    (CASES[0], CASES[1], CASES[2], CASES[4]),
    ids=("fp32", "r1-int32", "r1-e8m0", "r1-int32-bcast"),
)
def test_mid_t_takes_the_gluon_tile_on_sm90(t, recipe, enc) -> None:
    """T in FP8_EINSUM_GLUON_MIN_T .. FP8_EINSUM_GLUON_MAX_T on a compute capability 9.x GPU with
    Gluon and group-major activations, every scale encoding: PATH 4 (K in two ranges, PATH 2 sums
    them; the 32-token tile to T = 32, the 64-token one to 64) or beyond PATH 5 (the whole K, 128
    tokens a tile) gives the bits of its explicit call, the same bits run to run, fp64-close;
    inside one CUDA graph, calls whose activations a copy kernel rewrote just before read the new
    ones."""
    if torch.cuda.get_device_capability()[0] != 9 or not fe.HAS_GLUON:
        pytest.skip("paths 4 and 5 are dispatched on compute capability 9.x with Gluon only")
    cfg = fe.select_fp8_einsum_config(t, enc == "fp32", tma=True, per_row=recipe[1] == 1, gluon=True)
    want = (4, 32) if t <= 32 else (4, 64) if t <= 64 else (5, 128)
    assert (cfg["PATH"], cfg["BLOCK_T"]) == want, cfg.name
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=t + 5)
    assert fe._gluon_ok(a, w)
    assert_dispatch_is(cfg.name, a, sa, w, sw, sa_f, sw_f, recipe)
    srcs = [make_fp8_operands(t, G, D, R, recipe, enc, seed=40 + k)[0] for k in range(2)]
    assert_graph_calls_read_fresh_activations(a, sa, w, sw, sa_f, sw_f, recipe, srcs, (enc, t))


@pytest.mark.parametrize("enc", ("int32", "int32-bcast"))
def test_prefill_on_per_row_scales_takes_path3_from_its_threshold_on_sm90(enc) -> None:
    """Per-row UE8M0 weight scales (rows that differ, or repeat a block's scale) from
    FP8_EINSUM_TMA_ROW_MIN_T on a compute capability 9.x GPU: PATH 3 without the share check
    (for repeating rows until block_scales_view has answered), the bits of its explicit call, the
    same bits run to run, fp64-close; one T below, the per-row plan keeps PATH 0."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("PATH 3 is dispatched on compute capability 9.x only")
    t = fe.FP8_EINSUM_TMA_ROW_MIN_T
    cfg = fe.select_fp8_einsum_config(t, False, tma=True, per_row=True)
    assert cfg.name == fe.FP8_EINSUM_TMA_ROW_PLAN_CONFIG and not cfg["SHARE_CHECK"]
    assert fe.select_fp8_einsum_config(t - 1, False, tma=True, per_row=True).constexprs().get("PATH", 0) == 0
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 1, 128), enc, seed=11)
    assert_dispatch_is(cfg.name, a, sa, w, sw, sa_f, sw_f, (1, 1, 128))


@pytest.mark.parametrize("enc", ("int32-bcast", "int32"))
@pytest.mark.parametrize("t", (1, 16, 32, 36, 128, 256, 1536))
def test_every_t_reads_per_row_scales_that_repeat_blocks_as_block_scales(t, enc, monkeypatch) -> None:
    """At decode and mid T too, per-row UE8M0 scales that repeat their 128-row block's value are
    dispatched as block scales (the block-scale plan on ``sw[:, ::128, :]``) once the check has
    answered, and rows that differ keep the per-row plan; the first call (check not yet answered)
    and every later one give the same bits, those of the per-row plan's config; on each plan (with
    TMA where the device has it, and without: GB10's) the block plan's config on the view gives
    the bits of the per-row plan's config on the per-row scales (plans split K differently, so
    bits are compared within a plan), fp64-close."""
    recipe = (1, 1, 128)
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=40 + t)
    select, per_row_seen = fe.select_fp8_einsum_config, []

    def spy(t_, fp32_scales=False, tma=False, per_row=False, gluon=False):
        per_row_seen.append(per_row)
        return select(t_, fp32_scales, tma, per_row, gluon)

    monkeypatch.setattr(fe, "select_fp8_einsum_config", spy)

    def call(scales, rec=recipe, config=None):
        return call_fp8_einsum(a, sa, w, scales, rec, config)

    first = call(sw)  # starts the check: the per-row plan
    torch.cuda.synchronize()
    second = call(sw)
    assert per_row_seen == [True, enc == "int32"]
    assert torch.equal(first, second)
    tma = t >= min(fe.FP8_EINSUM_GLUON_MIN_T, fe.FP8_EINSUM_TMA_MID_MIN_T) and fe._tma_ok(a, w)
    ref = fp8_einsum_reference(a, sa_f, w, sw_f)
    for plan_tma in {tma, False}:
        gluon = plan_tma and fe._gluon_ok(a, w)
        rows_cfg = select(t, False, plan_tma, True, gluon)
        rows = call(sw, recipe, rows_cfg)
        if plan_tma == tma:
            assert torch.equal(first, rows), rows_cfg.name
        assert rel_fro(rows, ref) <= TOL, rows_cfg.name
        if enc == "int32-bcast":
            block_cfg = select(t, False, plan_tma, False, gluon)
            assert torch.equal(rows, call(sw[:, ::128, :], (1, 128, 128), block_cfg)), block_cfg.name


def test_prefill_reads_per_row_scales_that_repeat_blocks_as_block_scales() -> None:
    """At FP8_EINSUM_TMA_ROW_MIN_T on compute capability 9.x (every T: the test above): per-row
    UE8M0 scales that repeat their 128-row block's value (DeepGEMM's layout) are read as block
    scales once the
    asynchronous check has answered (block_scales_view: no sync, nothing while capturing), with
    the bits of the per-row loop; a write into the scales, rows that differ, a new tensor and a
    tensor first seen inside a graph capture all fall back to the per-row loop, fp64-close."""
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("PATH 3 is dispatched on compute capability 9.x only")
    t, recipe = fe.FP8_EINSUM_TMA_ROW_MIN_T, (1, 1, 128)
    row_cfg, block_cfg = fe.FP8_EINSUM_TMA_ROW_PLAN_CONFIG, fe.FP8_EINSUM_TMA_PLAN_CONFIG
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, "int32-bcast", seed=21)
    assert fe.block_scales_view(sw) is None  # the check has only started
    torch.cuda.synchronize()
    view = fe.block_scales_view(sw)
    assert view is not None and view.data_ptr() == sw.data_ptr()
    assert view.shape == (G, D // 128, sw.shape[2]) and view.stride(1) == 128 * sw.stride(1)

    def call(scales, rec=recipe, config=None):
        return call_fp8_einsum(a, sa, w, scales, rec, config)

    public = call(sw)
    assert torch.equal(public, call(view, (1, 128, 128), block_cfg))
    assert torch.equal(public, call(sw, recipe, row_cfg))
    assert rel_fro(public, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL

    # A write into the scales (version bump): checked again, and now the rows differ.
    sw[2, 300, 1] += 3 << 8  # K block 5 of row 300 of group 2: 8x its block's scale
    sw_odd = sw_f.clone()
    sw_odd[2, 300, 5] *= 8
    assert fe.block_scales_view(sw) is None
    torch.cuda.synchronize()
    assert fe.block_scales_view(sw) is None
    odd = call(sw)
    assert torch.equal(odd, call(sw, recipe, row_cfg))
    assert rel_fro(odd[:, 2, 300], fp8_einsum_reference(a, sa_f, w, sw_odd)[:, 2, 300]) <= TOL

    # Rows that differ throughout, in a new tensor (often at the freed address of the old one).
    del sw, view
    b = make_fp8_operands(t, G, D, R, recipe, "int32", seed=22)
    fe.block_scales_view(b[3])
    torch.cuda.synchronize()
    assert fe.block_scales_view(b[3]) is None
    out = torch.full((t, G, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    fe.fp8_einsum("bhr,hdr->bhd", (b[0], b[1]), (b[2], b[3]), out, recipe=recipe)
    assert rel_fro(out, fp8_einsum_reference(b[0], b[4], b[2], b[5])) <= TOL

    # First seen inside a capture: no check starts; the graph runs the per-row loop, correctly.
    c = make_fp8_operands(t, G, D, R, recipe, "int32-bcast", seed=23)
    out = torch.full((t, G, D), float("nan"), dtype=torch.bfloat16, device="cuda")
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (c[0], c[1]), (c[2], c[3]), out, recipe, row_cfg)  # compile
    torch.cuda.synchronize()
    n_checks = len(fe._ROW_BLOCK_CHECKS)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fe.fp8_einsum("bhr,hdr->bhd", (c[0], c[1]), (c[2], c[3]), out, recipe=recipe)
    assert len(fe._ROW_BLOCK_CHECKS) == n_checks
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert rel_fro(out, fp8_einsum_reference(c[0], c[4], c[2], c[5])) <= TOL
    assert fe.block_scales_view(c[3]) is None  # now checked, outside the capture
    torch.cuda.synchronize()
    assert fe.block_scales_view(c[3]) is not None

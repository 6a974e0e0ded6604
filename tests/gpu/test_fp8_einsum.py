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
    configs = [c for c in fe.FP8_EINSUM_CONFIGS if c.constexprs().get("SHARE_CHECK")]
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
    kernels = list(fe.JITTED.values())
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
    for t in (1, 5, 32, 37, 300, 1100):  # 1100: the block-scaled path
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
@pytest.mark.parametrize("t", (1, 8, 16))
def test_decode_pdl_reads_activations_written_just_before(t, recipe, enc) -> None:
    """The decode configs launch with PDL and load the weight before ``gdc_wait``: inside one
    graph, each call must see the activations a copy kernel wrote just before it (not the previous
    call's), and its split sum must read this call's partials."""
    cfg = fe.select_fp8_einsum_config(t, fp32_scales=enc == "fp32")
    assert fe.kernel_path(cfg) == "decode" and cfg["USE_PDL"], cfg.name
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=21)
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


@pytest.mark.parametrize("enc", ("int32-bcast", "int32"))
@pytest.mark.parametrize("t", (1, 16, 32, 36, 128, 256, 1536, 2048))
def test_every_t_reads_per_row_scales_that_repeat_blocks_as_block_scales(t, enc) -> None:
    """Per-row UE8M0 scales that repeat their 128-row block's value are dispatched as block scales
    (the plan's config on ``sw[:, ::128, :]``) once the check has answered, and rows that differ
    stay per row; the first call (check not yet answered) and every later one give the same bits,
    those of the plan's config on the per-row scales, fp64-close (the block-scaled path at
    prefill reads the same exponents either way)."""
    recipe = (1, 1, 128)
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=40 + t)
    kinds = (fe._SCALE_PACKED_I32, fe._SCALE_PACKED_I32)
    assert fe._plan(a, sw, *kinds, True)[2]  # the check has only started: per row
    first = call_fp8_einsum(a, sa, w, sw, recipe)
    torch.cuda.synchronize()
    cfg, view, per_row = fe._plan(a, sw, *kinds, True)
    assert per_row == (enc == "int32"), (enc, per_row)
    second = call_fp8_einsum(a, sa, w, sw, recipe)
    assert torch.equal(first, second)
    rows = call_fp8_einsum(a, sa, w, sw, recipe, cfg)
    assert torch.equal(first, rows), cfg.name
    assert rel_fro(rows, fp8_einsum_reference(a, sa_f, w, sw_f)) <= TOL, cfg.name
    if enc == "int32-bcast":
        assert view.shape[1] == D // 128
        assert torch.equal(rows, call_fp8_einsum(a, sa, w, view, (1, 128, 128), cfg)), cfg.name


def test_prefill_reads_per_row_scales_that_repeat_blocks_as_block_scales() -> None:
    """At prefill (the block-scaled path; every T: the test above): per-row UE8M0 scales that
    repeat their 128-row block's value (DeepGEMM's layout) are read as block scales once the
    asynchronous check has answered (block_scales_view: no sync, nothing while capturing), with
    the bits of the per-row read; a write into the scales, rows that differ, a new tensor and a
    tensor first seen inside a graph capture all fall back to the per-row read, fp64-close."""
    t, recipe = 2048, (1, 1, 128)
    row_cfg = block_cfg = fe.select_fp8_einsum_config(t)
    assert row_cfg.kernel in fe.MX_KERNELS, row_cfg.name
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


@pytest.mark.parametrize("t", (1, 37, 1100))
def test_every_block_scaled_config_on_every_layout(t) -> None:
    """The block-scaled path (``tl.dot_scaled``; Triton decomposes it on sm_90, so this is its
    numerics, not GB10's instruction) on every served scale layout, explicitly per config: no
    output left unwritten, fp64-close, the same bits on a second call. Both promotion forms
    (per K tile, and MMA-accumulated over the whole K) are printed with their errors."""
    for cfg in fe.FP8_EINSUM_MX_CONFIGS:
        for recipe, enc in CASES:
            a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=13 + t)
            out = call_fp8_einsum(a, sa, w, sw, recipe, cfg)
            assert not out.isnan().any(), (cfg.name, enc)
            err = rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f))
            print(f"T={t} {cfg.name} {enc}: rel fro err {err:.3g}")
            assert err <= TOL, (cfg.name, recipe, enc, err)
            assert torch.equal(out, call_fp8_einsum(a, sa, w, sw, recipe, cfg)), (cfg.name, enc)


def test_block_scaled_path_writes_nan_where_an_fp32_scale_is_not_a_power_of_two() -> None:
    """fp32 scales whose exponent alone is not the scale (not a power of two) give NaN in exactly
    the outputs that use them, on the tile loop and the decode tile; the rest are fp64-close."""
    t = 37
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 128, 128), "fp32", seed=5)
    sa[3, 2, 7] *= 1.5
    sw[1, 4, 9] *= 0.75  # group 1, weight rows 512 .. 639
    sa_f, sw_f = sa.clone(), sw.clone()
    ref = fp8_einsum_reference(a, sa_f, w, sw_f)
    nan = torch.zeros((t, G, D), dtype=torch.bool, device="cuda")
    nan[3, 2, :] = True
    nan[:, 1, 512:640] = True
    for cfg in ("mx_t128_d64_k128_w8_s4", "mxd_t16_d64_k512_w4"):
        out = call_fp8_einsum(a, sa, w, sw, (1, 128, 128), cfg)
        assert torch.equal(out.isnan(), nan), cfg
        assert rel_fro(out[~nan], ref[~nan]) <= TOL, cfg


@pytest.mark.parametrize("recipe,enc", (CASES[0], CASES[4]), ids=(IDS[0], IDS[4]))
def test_block_scaled_decode_tile_reads_activations_written_just_before(recipe, enc) -> None:
    """The block-scaled decode tile launches with PDL and loads the weight before ``gdc_wait``:
    inside one graph, each call sees the activations a copy kernel wrote just before it, and its
    split sum this call's partials (as the promoting decode tile, above)."""
    t = 16
    cfg = "mxd_t16_d64_k512_w4"
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, recipe, enc, seed=31)
    srcs = [make_fp8_operands(t, G, D, R, recipe, enc, seed=32 + k)[0] for k in range(3)]
    outs = [torch.empty((t, G, D), dtype=torch.bfloat16, device="cuda") for _ in srcs]
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), outs[0], recipe, cfg)  # compile
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for src, out in zip(srcs, outs, strict=True):
            a.copy_(src)
            fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe, cfg)
    for out in outs:
        out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    for k, (src, out) in enumerate(zip(srcs, outs, strict=True)):
        assert rel_fro(out, fp8_einsum_reference(src, sa_f, w, sw_f)) <= TOL, (cfg, k)


def test_prefill_takes_the_block_scaled_path() -> None:
    """From the plan's prefill entry the public dispatch runs the block-scaled tile loop: the
    bits of its explicit call, twice, fp64-close."""
    t = 2048
    cfg = fe.select_fp8_einsum_config(t)
    assert fe.kernel_path(cfg) == "mx-tile", cfg.name
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(t, G, D, R, (1, 1, 128), "int32", seed=8)
    assert_dispatch_is(cfg.name, a, sa, w, sw, sa_f, sw_f, (1, 1, 128))

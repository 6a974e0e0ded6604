"""Router GEMM on the GPU: every config and the dispatcher against fp64, graphs, determinism."""

from __future__ import annotations

import pytest
import torch
from sparkpair_overlay.kernels import router_gemm as rg
from sparkpair_overlay.numerics import assert_close_verbose, max_rel

pytestmark = pytest.mark.gpu

MS = (1, 3, 17, 31, 129, 4099)
N, K = 256, 4096  # DeepSeek-V4-Flash gate (docs/reference/vllm-code-paths.md#dsv4-shapes)


def _inputs(m: int, n: int, k: int, w_dtype: torch.dtype, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(m, k, device="cuda", generator=g).to(torch.bfloat16)
    w = (torch.randn(n, k, device="cuda", generator=g) * k**-0.5).to(w_dtype)  # real init scale
    return x, w


def _ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x.double() @ w.double().t()


TOL = {torch.bfloat16: 1e-5, torch.float32: 2e-6}  # max|err| / max|ref|; the kernels' fp32 bar


def _planes(w: torch.Tensor) -> torch.Tensor | None:
    """What the overlay passes: the BF16x3 planes of an fp32 weight, made once (None for bf16)."""
    return rg.bf16x3_split(w) if w.dtype == torch.float32 else None


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32], ids=["bf16w", "fp32w"])
@pytest.mark.parametrize("m", MS)
def test_every_config_matches_fp64(m: int, w_dtype: torch.dtype) -> None:
    x, w = _inputs(m, N, K, w_dtype, seed=m)
    ref, planes = _ref(x, w), _planes(w)
    for cfg in rg.configs_for(w_dtype):
        out = rg.router_gemm_with_config(x, w, cfg, planes=planes)
        assert out.dtype == torch.float32 and out.shape == (m, N)
        err = max_rel(out, ref)
        assert err <= TOL[w_dtype], f"{cfg.name} M={m}: max rel err {err:.3g} > {TOL[w_dtype]}"
        assert_close_verbose(out, ref, rtol=0, atol=TOL[w_dtype] * ref.abs().max().item(), what=cfg.name)


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32], ids=["bf16w", "fp32w"])
@pytest.mark.parametrize("m", (*MS, 8, 32, 512, 8192))
def test_dispatch_matches_fp64(m: int, w_dtype: torch.dtype) -> None:
    x, w = _inputs(m, N, K, w_dtype, seed=100 + m)
    out = rg.router_gemm(x, w, _planes(w))
    err = max_rel(out, _ref(x, w))
    assert err <= TOL[w_dtype], f"dispatch M={m}: {err:.3g}"
    if w_dtype == torch.float32:  # no planes: tiles split in registers, same accuracy
        err = max_rel(rg.router_gemm(x, w), _ref(x, w))
        assert err <= TOL[w_dtype], f"dispatch without planes M={m}: {err:.3g}"


@pytest.mark.parametrize("shape", [(5, 200, 1000), (33, 64, 4096), (2, 256, 7168)])
def test_odd_shapes(shape: tuple[int, int, int]) -> None:
    m, n, k = shape
    for w_dtype in (torch.bfloat16, torch.float32):
        x, w = _inputs(m, n, k, w_dtype)
        planes = _planes(w)
        for cfg in rg.configs_for(w_dtype, k):
            out = rg.router_gemm_with_config(x, w, cfg, planes=planes)
            assert max_rel(out, _ref(x, w)) <= TOL[w_dtype], cfg.name
        out = rg.router_gemm(x, w, planes)  # the dispatch skips configs that cannot take this K
        assert max_rel(out, _ref(x, w)) <= TOL[w_dtype], ("dispatch", shape, w_dtype)


def test_deterministic_bitwise() -> None:
    for w_dtype in (torch.bfloat16, torch.float32):
        for m in (1, 17, 129, 4099):
            x, w = _inputs(m, N, K, w_dtype)
            planes = _planes(w)
            outs = [rg.router_gemm(x, w, planes) for _ in range(5)] + [rg.router_gemm(x, w) for _ in range(2)]
            assert all(torch.equal(outs[5], o) for o in outs[6:]), (w_dtype, m, "no planes")
            outs = outs[:5]
            assert all(torch.equal(outs[0], o) for o in outs[1:]), (w_dtype, m)


def _n_compiled() -> int:
    fns = (rg._router_dot_kernel, rg._router_rows_kernel, rg._router_reduce_kernel)
    return sum(len(c[0]) for f in fns for c in f.device_caches.values())


def test_no_recompile_across_m() -> None:
    x, w = _inputs(64, N, K, torch.bfloat16)
    xf, wf = _inputs(64, N, K, torch.float32)
    pf = _planes(wf)
    for m in (1, 2, 3, 4, 5, 16, 17, 31, 32, 48, 64):  # warm every config the plan uses here
        rg.router_gemm(x[:m], w)
        rg.router_gemm(xf[:m], wf, pf)
    before = _n_compiled()
    for m in range(1, 65):
        rg.router_gemm(x[:m], w)
        rg.router_gemm(xf[:m], wf, pf)
    assert _n_compiled() == before


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32], ids=["bf16w", "fp32w"])
def test_cuda_graph_capture_and_replay_across_m(w_dtype: torch.dtype) -> None:
    graphs = {}
    for m in (1, 7, 16, 33):
        x, w = _inputs(m, N, K, w_dtype, seed=m)
        planes = _planes(w)
        rg.router_gemm(x, w, planes)  # warm-up (compile) outside capture
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = rg.router_gemm(x, w, planes)
        graphs[m] = (g, x, w, out, planes)
    for m, (g, x, w, out, planes) in graphs.items():
        x.copy_(torch.randn_like(x, dtype=torch.float32).to(torch.bfloat16))
        g.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, rg.router_gemm(x, w, planes)), m
        assert max_rel(out, _ref(x, w)) <= TOL[w_dtype]


def test_custom_op_and_errors() -> None:
    x, w = _inputs(3, N, K, torch.bfloat16)
    assert torch.equal(torch.ops.sparkpair.router_gemm(x, w), rg.router_gemm(x, w))
    with pytest.raises(ValueError, match="K differs"):
        rg.router_gemm(x, w[:, :100])
    with pytest.raises(ValueError, match="bfloat16"):
        rg.router_gemm(x.float(), w)


def test_single_launch_fixup_matches_two_stage_bitwise() -> None:
    for w_dtype in (torch.bfloat16, torch.float32):
        for m in (1, 17, 129):
            x, w = _inputs(m, N, K, w_dtype, seed=5 + m)
            planes = _planes(w)
            for cfg in rg.configs_for(w_dtype):
                if cfg.kernel != "_router_dot_kernel" or cfg["SPLIT_K"] == 1:
                    continue
                one = rg.router_gemm_with_config(x, w, cfg, fixup=True, planes=planes)
                two = rg.router_gemm_with_config(x, w, cfg, fixup=False, planes=planes)
                assert torch.equal(one, two), (cfg.name, m)
    torch.cuda.synchronize()
    for arena in rg.SEMAPHORES._arena.values():
        assert int(arena.abs().sum()) == 0, "tile counters must be back to zero"


def test_concurrent_streams_do_not_share_counters() -> None:
    x1, w = _inputs(8, N, K, torch.bfloat16, seed=1)
    x2, _ = _inputs(8, N, K, torch.bfloat16, seed=2)
    ref1, ref2 = rg.router_gemm(x1, w), rg.router_gemm(x2, w)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    s1.wait_stream(torch.cuda.current_stream())
    s2.wait_stream(torch.cuda.current_stream())
    outs = []
    for _ in range(200):
        with torch.cuda.stream(s1):
            o1 = rg.router_gemm(x1, w)
        with torch.cuda.stream(s2):
            o2 = rg.router_gemm(x2, w)
        outs.append((o1, o2))
    torch.cuda.synchronize()
    assert all(torch.equal(a, ref1) and torch.equal(b, ref2) for a, b in outs)


def test_pdl_and_non_pdl_launches_give_identical_bits() -> None:
    for w_dtype in (torch.bfloat16, torch.float32):
        for m in (1, 4, 17):
            x, w = _inputs(m, N, K, w_dtype, seed=40 + m)
            planes = _planes(w)
            for cfg in rg.configs_for(w_dtype):
                if not cfg.constexprs().get("USE_PDL"):
                    continue
                a = rg.router_gemm_with_config(x, w, cfg, pdl=True, planes=planes)
                b = rg.router_gemm_with_config(x, w, cfg, pdl=False, planes=planes)
                assert torch.equal(a, b), (cfg.name, m)


@pytest.mark.parametrize("w_dtype", [torch.bfloat16, torch.float32], ids=["bf16w", "fp32w"])
def test_pdl_reads_x_written_by_the_kernel_just_before(w_dtype: torch.dtype) -> None:
    """In one graph, each router call follows the copy that writes its input: a PDL kernel that read
    ``x`` before ``griddepcontrol.wait`` would see the previous call's values."""
    m_values = (1, 3, 8, 16, 32, 64)
    _, w = _inputs(1, N, K, w_dtype)
    planes = _planes(w)
    x = torch.empty(64, K, device="cuda", dtype=torch.bfloat16)
    srcs = [_inputs(64, N, K, w_dtype, seed=200 + i)[0] for i in range(len(m_values) * 2)]
    for m in m_values:
        rg.router_gemm(x[:m], w, planes)  # compile outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    outs = []
    with torch.cuda.graph(g):
        for i, src in enumerate(srcs):
            m = m_values[i % len(m_values)]
            x.copy_(src)
            outs.append(rg.router_gemm(x[:m], w, planes))
    for _ in range(3):
        g.replay()
        torch.cuda.synchronize()
        for i, src in enumerate(srcs):
            m = m_values[i % len(m_values)]
            assert torch.equal(outs[i], rg.router_gemm(src[:m], w, planes)), (i, m)


def test_planes_refused_inside_capture_and_the_no_planes_path_captures() -> None:
    x, w = _inputs(16, N, K, torch.float32, seed=9)
    rg.router_gemm(x, w)  # compile + tile counters outside capture
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        with pytest.raises(ValueError, match="inside CUDA-graph capture"):
            rg.bf16x3_split(w)
        out = rg.router_gemm(x, w)  # no planes: in-register split, allocates nothing new
    g.replay()
    torch.cuda.synchronize()
    assert max_rel(out, _ref(x, w)) <= TOL[torch.float32]


def test_bad_planes_are_refused() -> None:
    x, w = _inputs(8, N, K, torch.float32, seed=12)
    planes = rg.bf16x3_split(w)
    with pytest.raises(ValueError, match="planes must be bf16"):
        rg.router_gemm(x, w, planes[:2])
    with pytest.raises(ValueError, match="planes must be bf16"):
        rg.router_gemm(x, w, planes.float())
    with pytest.raises(ValueError, match="planes are for an fp32 weight"):
        rg.router_gemm(x, w.bfloat16(), planes)
    with pytest.raises(ValueError, match="pass planes=bf16x3_split"):
        rg.router_gemm_with_config(x, w, "fp32w3_dot_m16_n32_k256_s16_w4_st1_1t_pdl_r32")


def test_row_strides_past_int32_offsets_give_the_right_answer() -> None:
    """A view whose rows sit 2**30 elements apart: its offsets pass int32, which the kernels index
    in. Before the launcher copied such operands, row 2 came silently from 2**31 elements before x
    (or the kernel hit an illegal address); now every config matches fp64 (8 GiB buffer)."""
    buf = torch.zeros(2**32 + 128, dtype=torch.bfloat16, device="cuda")
    buf[:64] = 7
    x = buf[2**31 :].as_strided((3, 64), (2**30, 1))
    x.copy_(torch.randn(3, 64, device="cuda"))
    w = torch.randn(16, 64, device="cuda").bfloat16()
    for cfg in ("bf16_rows_m1_n2_k4096_w8_st1_pdl", "bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32"):
        assert max_rel(rg.router_gemm_with_config(x, w, cfg), _ref(x, w)) <= TOL[torch.bfloat16], cfg
    x2 = torch.randn(3, 64, device="cuda").bfloat16()
    wide = buf.as_strided((16, 64), (2**28, 1))  # the weight's rows, too: row 15 at 15 * 2**28
    wide.copy_(w)
    for cfg in ("bf16_rows_m1_n2_k4096_w8_st1_pdl", "bf16_dot_m16_n64_k256_s16_w4_st1_1t_pdl_r32"):
        assert max_rel(rg.router_gemm_with_config(x2, wide, cfg), _ref(x2, w)) <= TOL[torch.bfloat16], cfg
    del buf
    torch.cuda.empty_cache()

"""fp8_einsum on the CPU: scale decoding (bit-exact UE8M0, e8m0fnu), layout/stride validation,
the fake implementation, and a TRITON_INTERPRET=1 run of the real kernel on tiny shapes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.kernels import fp8_einsum_configs as fec

E8M0 = getattr(torch, "float8_e8m0fnu", None)


def test_decode_ue8m0_is_bit_exact_for_every_byte() -> None:
    e = torch.arange(256, dtype=torch.int32)
    got = fe.decode_ue8m0(e)
    for v in range(1, 255):
        assert got[v].item() == 2.0 ** (v - 127)
    assert got[0].item() == 2.0**-127  # subnormal, exact
    assert torch.isnan(got[255])
    assert got[127].view(torch.int32).item() == 0x3F800000


@pytest.mark.skipif(E8M0 is None, reason="torch has no float8_e8m0fnu")
def test_decode_matches_torch_e8m0fnu_upcast() -> None:
    b = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    as_e8 = b.view(E8M0)
    ours = fe.decode_ue8m0(as_e8)
    theirs = as_e8.to(torch.float32)
    same = (ours.view(torch.int32) == theirs.view(torch.int32)) | (torch.isnan(ours) & torch.isnan(theirs))
    assert bool(same.all()), [(i, ours[i].item(), theirs[i].item()) for i in range(256) if not same[i]]


def test_unpack_int32_byte_k_at_bits_8k() -> None:
    words = torch.tensor(
        [[0x7F80_0102, -1]], dtype=torch.int32
    )  # bytes (LSB first): 02 01 80 7F | FF FF FF FF
    assert fe.unpack_ue8m0_int32(words, 8).tolist() == [[0x02, 0x01, 0x80, 0x7F, 255, 255, 255, 255]]
    assert fe.unpack_ue8m0_int32(words, 6).shape == (1, 6)
    with pytest.raises(ValueError, match="int32"):
        fe.unpack_ue8m0_int32(words.float(), 8)


def _ops(t=3, g=2, d=256, r=512, recipe=(1, 1, 128), enc="int32"):
    a = torch.zeros(g, t, r).to(torch.float8_e4m3fn).transpose(0, 1)
    w = torch.zeros(g, d, r).to(torch.float8_e4m3fn)
    kb = r // 128
    if enc == "int32":
        sa = torch.zeros(t, g, kb // 4, dtype=torch.int32)
        sw = torch.zeros(g, d, kb // 4, dtype=torch.int32)
    elif enc == "fp32":
        sa = torch.ones(t, g, kb)
        sw = torch.ones(g, d if recipe[1] == 1 else d // 128, kb)
    else:
        sa = torch.zeros(t, g, kb, dtype=torch.uint8).view(E8M0)
        sw = torch.zeros(g, d if recipe[1] == 1 else d // 128, kb, dtype=torch.uint8).view(E8M0)
    out = torch.empty(t, g, d, dtype=torch.bfloat16)
    return a, sa, w, sw, out


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda o: {"equation": "bhr,hrd->bhd"}, "only equation"),
        (lambda o: {"a": o["a"].float()}, "float8_e4m3fn"),
        (lambda o: {"out": o["out"].float()}, "bfloat16"),
        (lambda o: {"sa": o["sa"][:, :, :0]}, "sa has shape"),
        (lambda o: {"sw": torch.zeros(2, 2, 1, dtype=torch.int32)}, "sw has shape"),
        (lambda o: {"sa": o["sa"].to(torch.int16)}, "not a supported scale encoding"),
        (lambda o: {"recipe": (1, 64, 128)}, "recipe"),
        (lambda o: {"w": o["w"].transpose(1, 2).contiguous().transpose(1, 2)}, "unit stride"),
        (lambda o: {"out": torch.empty(3, 2, 128, dtype=torch.bfloat16)}, "shapes disagree"),
    ],
)
def test_validation_errors_name_the_problem(mutate, match) -> None:
    a, sa, w, sw, out = _ops()
    args = {"equation": "bhr,hdr->bhd", "a": a, "sa": sa, "w": w, "sw": sw, "out": out, "recipe": (1, 1, 128)}
    args.update(mutate(args))
    with pytest.raises(ValueError, match=match):
        fe.fp8_einsum(
            args["equation"],
            (args["a"], args["sa"]),
            (args["w"], args["sw"]),
            args["out"],
            recipe=args["recipe"],
        )


@pytest.mark.parametrize("dtype", (torch.int32, torch.uint8, torch.float32))
def test_rows_repeat_in_blocks_sees_one_differing_entry(dtype) -> None:
    """The check behind block_scales_view: true for per-row scales copied from 128x128 blocks
    (any strides), false when one entry of one row differs or a row holds NaN, none when D is
    not a multiple of 128."""
    gen = torch.Generator().manual_seed(3)
    blocks = torch.randint(100, 140, (4, 8, 8), generator=gen).to(dtype)  # [G, D/128, Ks]
    rows = blocks.repeat_interleave(128, dim=1)  # [G, 1024, Ks]
    assert bool(fe.rows_repeat_in_blocks(rows))
    assert bool(fe.rows_repeat_in_blocks(rows.transpose(1, 2).contiguous().transpose(1, 2)))  # MN-major
    odd = rows.clone()
    odd[3, 1023, 7] += 1  # the last entry of the last row
    assert not bool(fe.rows_repeat_in_blocks(odd))
    if dtype == torch.float32:
        nan = rows.clone()
        nan[0, 0, 0] = float("nan")
        assert not bool(fe.rows_repeat_in_blocks(nan))
    assert fe.rows_repeat_in_blocks(rows[:, :1000]) is None


def test_cpu_tensors_without_interpreter_are_refused(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    a, sa, w, sw, out = _ops()
    with pytest.raises(ValueError, match="CUDA"):
        fe.fp8_einsum("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=(1, 1, 128))


def test_block_scales_refuse_a_tile_wider_than_one_scale_block(monkeypatch) -> None:
    """With 128x128 block weight scales each tile reads one weight scale per K block, so a config
    whose BLOCK_D does not divide 128 would mix two blocks' rows under one scale: refused."""
    pytest.importorskip("triton")
    from sparkpair_overlay.kernels._common import make_config

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    wide = make_config(
        "t16_d256", "_fp8_einsum_tile_kernel", 4, 2, BLOCK_T=16, BLOCK_D=256, BLOCK_R=128, GROUP_T=8
    )
    a, sa, w, sw, out = _ops(recipe=(1, 128, 128), enc="fp32")
    with pytest.raises(ValueError, match=r"t16_d256 has BLOCK_D=256.*must divide 128"):
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 128, 128), wide)
    with pytest.raises(ValueError, match="must divide 128"):
        fec._cfg("t16_d256", 16, 256, 4, 2)


def test_split_sum_stage_is_not_a_config_to_call(monkeypatch) -> None:
    """A split-sum config only follows its decode config's launch; called on its own it
    would write ``out`` from an uninitialised workspace, so the launcher refuses it."""
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    cfg = fe.FP8_EINSUM_SUM_CONFIGS[0]
    a, sa, w, sw, out = _ops()
    with pytest.raises(ValueError, match=rf"config {cfg.name} is a split-sum stage"):
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 1, 128), cfg)


@pytest.mark.skipif(E8M0 is None, reason="torch has no float8_e8m0fnu")
def test_e8m0_scales_are_viewed_as_uint8_not_passed_as_e8m0() -> None:
    kind, s = fe._scale_kind(torch.zeros(2, 4, dtype=torch.uint8).view(E8M0), "sa")
    assert kind == fe._SCALE_U8 and s.dtype == torch.uint8


def test_fake_impl_under_fake_tensor_mode() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        a, sa, w, sw, out = _ops()
        torch.ops.sparkpair.fp8_einsum("bhr,hdr->bhd", a, sa, w, sw, out, [1, 1, 128])
        assert out.shape == (3, 2, 256)


INTERPRET_SCRIPT = textwrap.dedent(
    """
    import torch
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.kernels.fp8_einsum_sm120 import tile as fe_tile
    from sparkpair_overlay.kernels import fp8_einsum_configs as fec
    g = torch.Generator().manual_seed(0)
    T, G, D, R = 5, 2, 256, 512
    a = (torch.randn(G, T, R, generator=g) * 100).to(torch.float8_e4m3fn).transpose(0, 1)
    w = (torch.randn(G, D, R, generator=g) * 100).to(torch.float8_e4m3fn)
    ea = torch.randint(118, 124, (T, G, R // 128), generator=g, dtype=torch.int32)
    ew = torch.randint(114, 120, (G, D, R // 128), generator=g, dtype=torch.int32)
    sa_f, sw_f = fe.decode_ue8m0(ea), fe.decode_ue8m0(ew)
    ref = torch.einsum("tgr,gdr->tgd", a.double() * sa_f.double().repeat_interleave(128, -1),
                       w.double() * sw_f.double().repeat_interleave(128, -1))
    def pack(e):
        e = e.view(*e.shape[:-1], -1, 4)
        return (e[..., 0] | (e[..., 1] << 8) | (e[..., 2] << 16) | (e[..., 3] << 24)).to(torch.int32)
    T4 = (T + 3) // 4 * 4
    buf = torch.zeros(G * (R // 512) * T4, dtype=torch.int32)
    sa_p = buf.as_strided((G, T, R // 512), ((R // 512) * T4, 1, T4)).transpose(0, 1)
    sa_p.copy_(pack(ea))
    outs = {}
    for name, sa, sw in (("fp32", sa_f, sw_f), ("int32", sa_p, pack(ew)),
                         ("e8m0", ea.to(torch.uint8).view(torch.float8_e8m0fnu),
                          ew.to(torch.uint8).view(torch.float8_e8m0fnu))):
        out = torch.empty(T, G, D, dtype=torch.bfloat16)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 1, 128), "t16_d32_s6")
        outs[name] = out
        err = float((out.double() - ref).norm() / ref.norm())
        assert err < 1e-2, (name, err)
    assert torch.equal(outs["fp32"], outs["int32"]) and torch.equal(outs["fp32"], outs["e8m0"])
    # The decode path (weight rows on the MMA's M side, 4 K blocks per CTA) with its
    # split sum: R = 1024 is two K splits. PDL is off under the interpreter.
    R2 = 1024
    a2 = (torch.randn(G, T, R2, generator=g) * 100).to(torch.float8_e4m3fn).transpose(0, 1)
    w2 = (torch.randn(G, D, R2, generator=g) * 100).to(torch.float8_e4m3fn)
    ea2 = torch.randint(118, 124, (T, G, R2 // 128), generator=g, dtype=torch.int32)
    ew2 = torch.randint(114, 120, (G, D, R2 // 128), generator=g, dtype=torch.int32)
    sa2, sw2 = fe.decode_ue8m0(ea2), fe.decode_ue8m0(ew2)
    ref2 = torch.einsum("tgr,gdr->tgd", a2.double() * sa2.double().repeat_interleave(128, -1),
                        w2.double() * sw2.double().repeat_interleave(128, -1))
    dec = {}
    for name, sa, sw in (("fp32", sa2, sw2), ("int32", pack(ea2), pack(ew2))):
        out = torch.full((T, G, D), float("nan"), dtype=torch.bfloat16)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a2, sa), (w2, sw), out, (1, 1, 128), "dec_t16_d64_k4_w4")
        err = float((out.double() - ref2).norm() / ref2.norm())
        assert err < 1e-2, ("decode", name, err)
        dec[name] = out
    assert torch.equal(dec["fp32"], dec["int32"]), "decode: fp32 and packed int32 scales differ"
    # recipe (1,128,128): one weight scale per 128x128 block
    swb = fe.decode_ue8m0(ew[:, ::128])
    out = torch.empty(T, G, D, dtype=torch.bfloat16)
    fe.fp8_einsum("bhr,hdr->bhd", (a, sa_f), (w, swb), out, recipe=(1, 128, 128))
    refb = torch.einsum("tgr,gdr->tgd", a.double() * sa_f.double().repeat_interleave(128, -1),
                        w.double() * swb.double().repeat_interleave(128, -1).repeat_interleave(128, 1))
    assert float((out.double() - refb).norm() / refb.norm()) < 1e-2
    # recipe (1,128,128) on sm_10x/12x: fp32 activation scales with DeepGEMM's per-row packed
    # int32 weight scales (the block scale broadcast to every row) -> the same numbers as above.
    sw_rows = pack(ew[:, ::128].repeat_interleave(128, 1))
    out_mixed = torch.empty(T, G, D, dtype=torch.bfloat16)
    fe.fp8_einsum("bhr,hdr->bhd", (a, sa_f), (w, sw_rows), out_mixed, recipe=(1, 128, 128))
    assert torch.equal(out_mixed, out), "per-row int32 sw under recipe (1,128,128) must equal block sw"
    # The dispatcher reads per-row scales that repeat their 128-row block's value as block scales
    # (block_scales_view's strided view, answered at once on the CPU) with the per-row plan's
    # bits, and keeps the per-row plan where one entry of one row differs.
    sw_rep = pack(ew[:, ::128].repeat_interleave(128, 1))
    sw_odd = sw_rep.clone()
    sw_odd[1, 77, 0] += 1 << 8  # row 77, K block 1: 2x its block's scale
    for sw, want in ((sw_rep, False), (sw_odd, True)):
        cfg, sw_used, per_row = fe._plan(a, sw, fe._SCALE_PACKED_I32, fe._SCALE_PACKED_I32, True)
        assert per_row == want and (sw_used.shape[1] == D // 128) != want, (want, sw_used.shape)
        o_auto, o_rows = (torch.empty(T, G, D, dtype=torch.bfloat16) for _ in range(2))
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa_p), (w, sw), o_auto, (1, 1, 128))
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa_p), (w, sw), o_rows, (1, 1, 128), cfg)
        assert torch.equal(o_auto, o_rows), want
    # Per-row weight scales under SHARE_CHECK: a tile whose rows all carry the same scales (block
    # scales broadcast per row, as DeepGEMM stores them on sm_10x/12x) takes the one-scale loop
    # and gives the bits of the block-scale call; a tile where one row differs in one K block
    # must take the per-row loop.
    R5 = 640
    a5 = (torch.randn(G, T, R5, generator=g) * 100).to(torch.float8_e4m3fn).transpose(0, 1)
    w5 = (torch.randn(G, D, R5, generator=g) * 100).to(torch.float8_e4m3fn)
    sa5 = fe.decode_ue8m0(torch.randint(118, 124, (T, G, 5), generator=g, dtype=torch.int32))
    eb5 = torch.randint(114, 120, (G, D // 128, 5), generator=g, dtype=torch.int32)
    sw_block = fe.decode_ue8m0(eb5)
    e_rows = eb5.repeat_interleave(128, 1)
    e_rows[1, 77, 3] += 3  # one row of one tile, one K block: 8x its block's scale
    for cfg in ("t64_d128_s4_w8_bc", fec._cfg("bc_split", 16, 64, 4, 2, split_r=2, share_check=True)):
        o_block = torch.empty(T, G, D, dtype=torch.bfloat16)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a5, sa5), (w5, sw_block), o_block, (1, 128, 128), cfg)
        o_rows = torch.empty(T, G, D, dtype=torch.bfloat16)
        sw_rows = fe.decode_ue8m0(e_rows)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a5, sa5), (w5, sw_rows), o_rows, (1, 1, 128), cfg)
        ref5 = torch.einsum("tgr,gdr->tgd", a5.double() * sa5.double().repeat_interleave(128, -1),
                            w5.double() * sw_rows.double().repeat_interleave(128, -1))
        col = (o_rows[:, 1, 77].double() - ref5[:, 1, 77]).norm() / ref5[:, 1, 77].norm()
        assert float(col) < 1e-2, (cfg, "the odd row took its tile's first-row scale", float(col))
        assert float((o_rows.double() - ref5).norm() / ref5.norm()) < 1e-2, cfg
        same = torch.ones(G, D, dtype=torch.bool)
        lo = 0 if cfg == "t64_d128_s4_w8_bc" else 64
        same[1, lo:128] = False  # the odd row's tile
        assert torch.equal(o_rows[:, same], o_block[:, same]), cfg
    # The per-tile check itself (its answer picks the loop; both loops give the same bits, so the
    # outputs above cannot show which one ran): rows x K-scale entries, row stride 4.
    import triton
    import triton.language as tl

    @triton.jit
    def share_probe(sw_ptr, out_ptr, rows, lo, hi, BLOCK_D: tl.constexpr):
        offs = tl.arange(0, BLOCK_D)
        share = fe_tile._rows_share_scales(sw_ptr, offs * 4, 0, lo, hi, offs < rows, 1)
        tl.store(out_ptr, share.to(tl.int32))

    def probe(sw, rows=16, lo=0, hi=4):
        res = torch.zeros(1, dtype=torch.int32)
        share_probe[(1,)](sw, res, rows, lo, hi, BLOCK_D=16)
        return int(res.item())

    for dt in (torch.int32, torch.uint8):
        base = torch.randint(1, 120, (1, 4), generator=g, dtype=torch.int32).to(dt).repeat(16, 1)
        assert probe(base) == 1, dt
        odd = base.clone(); odd[5, 2] += 1
        assert probe(odd) == 0 and probe(odd, hi=2) == 1 and probe(odd, lo=3) == 1, dt
        first = base.clone(); first[0, 3] += 1
        assert probe(first) == 0, dt
        assert probe(odd, rows=5) == 1, dt  # the differing row lies past the tile's last row
    print("OK")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(E8M0 is None, reason="torch has no float8_e8m0fnu")
def test_kernel_under_triton_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", INTERPRET_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr


def test_plans_name_existing_configs_in_increasing_t() -> None:
    names = {c.name for c in fe.FP8_EINSUM_CONFIGS}
    assert len(names) == len(fe.FP8_EINSUM_CONFIGS)
    for plan in (fe.FP8_EINSUM_PLAN_UE8M0, fe.FP8_EINSUM_PLAN_FP32):
        ts = [t for t, _ in plan]
        assert ts == sorted(ts) and all(name in names for _, name in plan)
    assert fe.select_fp8_einsum_config(1).name == fe.FP8_EINSUM_PLAN_UE8M0[0][1]
    assert fe.select_fp8_einsum_config(16384, fp32_scales=True).name == fe.FP8_EINSUM_PLAN_FP32[-1][1]


MX_SCRIPT = textwrap.dedent(
    """
    import torch
    from sparkpair_overlay.kernels import fp8_einsum as fe
    from sparkpair_overlay.numerics import fp8_einsum_reference, make_fp8_operands, rel_fro
    T, G, D = 5, 2, 256
    # Every block-scaled config on the served layouts (per-row packed int32 with the MN-major
    # strides, the same read as block scales, fp32 block scales, e8m0 bytes): fp64-close, no
    # output left unwritten. R = 1024 splits the decode tile's K in two (the split sum adds them).
    cases = (("int32", (1, 1, 128)), ("int32-bcast", (1, 1, 128)), ("fp32", (1, 128, 128)),
             ("e8m0", (1, 1, 128)))
    names = [c.name for c in fe.FP8_EINSUM_MX_CONFIGS]
    assert {"mx_t64_d64_k128_w4_s4", "mx_t64_d64_k128_w4_s4_acc", "mxd_t16_d64_k512_w4"} <= set(names), names
    for k, (enc, recipe) in enumerate(cases):
        a, sa, w, sw, sa_f, sw_f = make_fp8_operands(T, G, D, 1024, recipe, enc, device="cpu", seed=k)
        if enc == "int32-bcast":
            sw = fe.block_scales_view(sw)  # what the dispatcher hands the kernel
            assert sw is not None
        ref = fp8_einsum_reference(a, sa_f, w, sw_f)
        for name in ("mx_t64_d64_k128_w4_s4", "mx_t64_d64_k128_w4_s4_acc", "mxd_t16_d64_k512_w4"):
            out = torch.full((T, G, D), float("nan"), dtype=torch.bfloat16)
            fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out,
                                      (1, 128, 128) if enc in ("fp32", "int32-bcast") else recipe, name)
            assert not out.isnan().any(), (enc, name)
            assert rel_fro(out, ref) < 1e-2, (enc, name, rel_fro(out, ref))
    # The decode tile with R = 512: one K tile, no split, out written directly.
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(T, G, D, 512, (1, 1, 128), "int32", device="cpu", seed=9)
    out = torch.full((T, G, D), float("nan"), dtype=torch.bfloat16)
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), out, (1, 1, 128), "mxd_t16_d64_k512_w4")
    assert rel_fro(out, fp8_einsum_reference(a, sa_f, w, sw_f)) < 1e-2
    # fp32 scales that are not powers of two: their exponent alone would be a wrong scale, so the
    # outputs that use them are NaN, never wrong numbers; every other output is untouched.
    a, sa, w, sw, sa_f, sw_f = make_fp8_operands(T, G, D, 1024, (1, 128, 128), "fp32", device="cpu", seed=3)
    good = torch.empty((T, G, D), dtype=torch.bfloat16)
    fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), good, (1, 128, 128), "mx_t64_d64_k128_w4_s4")
    sa_odd, sw_odd = sa.clone(), sw.clone()
    sa_odd[2, 1, 5] *= 1.5  # token 2, group 1, K block 5
    sw_odd[0, 1, 3] *= 0.75  # group 0, weight rows 128..255, K block 3
    for name in ("mx_t64_d64_k128_w4_s4", "mxd_t16_d64_k512_w4"):
        out = torch.empty((T, G, D), dtype=torch.bfloat16)
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa_odd), (w, sw_odd), out, (1, 128, 128), name)
        nan = torch.zeros((T, G, D), dtype=torch.bool)
        nan[2, 1, :] = True
        nan[:, 0, 128:256] = True
        assert torch.equal(out.isnan(), nan), (name, out.isnan().nonzero()[:8])
        assert rel_fro(out[~nan].view(-1, 1), good[~nan].view(-1, 1)) < 1e-2, name
    # A block-scaled config whose K tile does not divide R is refused by name.
    a, sa, w, sw, _, _ = make_fp8_operands(T, G, D, 640, (1, 1, 128), "e8m0", device="cpu", seed=4)
    try:
        fe.fp8_einsum_with_config("bhr,hdr->bhd", (a, sa), (w, sw), good, (1, 1, 128), "mxd_t16_d64_k512_w4")
        raise AssertionError("R = 640 with BLOCK_K = 512 was accepted")
    except ValueError as exc:
        assert "mxd_t16_d64_k512_w4 has BLOCK_K=512; R=640" in str(exc), exc
    print("OK")
    """
)


@pytest.mark.slow
@pytest.mark.skipif(E8M0 is None, reason="torch has no float8_e8m0fnu")
def test_block_scaled_kernel_under_triton_interpreter() -> None:
    """The block-scaled path (``tl.dot_scaled`` on the served scale layouts, no copy) under
    Triton's interpreter: fp64-close on every encoding and form (promoted per K tile, MMA-
    accumulated, the decode tile with its split sum), NaN where an fp32 scale is not a power of
    two, and a config whose K tile does not divide R refused."""
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    res = subprocess.run(
        [sys.executable, "-c", MX_SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr


def test_gb10_plan_takes_the_block_scaled_path_for_prefill_only() -> None:
    """The plan's prefill entry (T >= 1024) is the block-scaled tile loop, promoted per K tile,
    with a K tile of 128 (it tiles any R the kernel takes); below it the plan names the promoting
    kernel's configs."""
    for fp32 in (False, True):
        for t in (1024, 2048, 16384):
            cfg = fe.select_fp8_einsum_config(t, fp32)
            assert fe.kernel_path(cfg) == "mx-tile" and cfg["BLOCK_K"] == 128, (t, cfg.name)
        for t in (1, 16, 36, 128, 1023):
            assert fe.select_fp8_einsum_config(t, fp32).kernel not in fe.MX_KERNELS, t

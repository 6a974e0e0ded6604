"""Round-11 candidates: name -> parameters.

``tm_*``: gl_tm.tm_kernel (tokens on wgmma's M side); T_LOAD 0 = the tokens rounded up to a power
of 2 (>= 8, <= BLOCK_T). ``BATCH`` False stages the scales a K block at a time as PATH 4 did at
ab63c02 (one global load's latency per K block, in series), True in one 2-D load.
``gl_*``: PATH 4 (``_fp8_einsum_gluon_kernel``) configs; runs 2-4 ran them with the batched
staging switched on (a ``BATCH_SCALES`` flag then), which the shipped kernel always does.
"""


def cand(bt, bd, stages, ahead, split=1, warps=4, t_load=0, batch=True):
    return dict(kind="tm", BLOCK_T=bt, BLOCK_D=bd, STAGES=stages, AHEAD=ahead, SPLIT_R=split,
                num_warps=warps, T_LOAD=t_load, BATCH=batch)  # fmt: skip


def gcand(bt, bd, split, stages, warps=4, batch=True, view=False):
    return dict(kind="gl", BLOCK_T=bt, BLOCK_D=bd, SPLIT_R=split, STAGES=stages, num_warps=warps, BATCH=batch,
                VIEW=view)  # fmt: skip


CANDS = {
    "tm_t64_d32_s16_a1": cand(64, 32, 16, 1),
    "tm_t64_d32_s16_a2": cand(64, 32, 16, 2),
    "tm_t64_d32_s16_a2_nob": cand(64, 32, 16, 2, batch=False),
    "tm_t64_d32_s12_a2": cand(64, 32, 12, 2),
    "tm_t64_d32_s8_a2": cand(64, 32, 8, 2),
    "tm_t64_d16_s12_a2": cand(64, 16, 12, 2),
    "tm_t64_d16_s8_a2": cand(64, 16, 8, 2),
    "tm_t64_d64_s12_a2": cand(64, 64, 12, 2),
    "tm_t64_d32_s8_a2_sk2": cand(64, 32, 8, 2, split=2),
    "tm_t128_d32_s8_a2_w8": cand(128, 32, 8, 2, warps=8),
    "tm_t128_d64_s6_a2_w8": cand(128, 64, 6, 2, warps=8),
    "gl_t32_d64_sk4_s8_b": gcand(32, 64, 4, 8),
    "gl_t32_d64_sk2_s8_b": gcand(32, 64, 2, 8),
    "gl_t32_d64_sk2_s12_b": gcand(32, 64, 2, 12),
    "gl_t16_d64_sk4_s8_b": gcand(16, 64, 4, 8),
    "gl_t16_d64_sk2_s12_b": gcand(16, 64, 2, 12),
    "gl_t64_d64_sk4_s6_b": gcand(64, 64, 4, 6),
    "gl_t64_d64_sk2_s6_b": gcand(64, 64, 2, 6),
    "gl_t64_d128_sk4_s4_w8_b": gcand(64, 128, 4, 4, warps=8),
    "tm_t128_d32_s8_a1_w8": cand(128, 32, 8, 1, warps=8),
    "tm_t128_d32_s8_a3_w8": cand(128, 32, 8, 3, warps=8),
    "tm_t128_d32_s10_a2_w8": cand(128, 32, 10, 2, warps=8),
    "tm_t128_d32_s4_a2_w8": cand(128, 32, 4, 2, warps=8),
    "tm_t128_d16_s5_a2_w8": cand(128, 16, 5, 2, warps=8),
    "gl_t64_d64_sk2_s8_b": gcand(64, 64, 2, 8),
    "gl_t32_d64_sk2_s6_b": gcand(32, 64, 2, 6),
    "gl_t32_d64_sk2_s10_b": gcand(32, 64, 2, 10),
    "tm_t128_d32_s6_a1_w8": cand(128, 32, 6, 1, warps=8),
    "glv_t64_d64_sk2_s8": gcand(64, 64, 2, 8, view=True),
    "glv_t64_d64_sk2_s6": gcand(64, 64, 2, 6, view=True),
    "glv_t64_d64_sk2_s10": gcand(64, 64, 2, 10, view=True),
    "glv_t64_d64_sk2_s12": gcand(64, 64, 2, 12, view=True),
    "glv_t64_d64_sk4_s6": gcand(64, 64, 4, 6, view=True),
    "glv_t64_d64_sk4_s8": gcand(64, 64, 4, 8, view=True),
}

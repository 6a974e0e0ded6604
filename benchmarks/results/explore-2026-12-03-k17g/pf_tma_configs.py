"""Round 7 PATH 3 candidates on per-row weight scales: tma_t64_d128_s3_r168 split into two
launches by the per-tile share check (SHARE_LOOP 1: only the tiles whose rows share their scales,
with the one-FMA promotion; SHARE_LOOP 2: only the others, with the per-row promotion)."""

from sparkpair_overlay.kernels._common import make_config


def _c(name, share_loop, stages=3, maxnreg=168, group_t=8):
    return make_config(
        name, "_fp8_einsum_kernel", 4, stages, BLOCK_T=64, BLOCK_D=128, BLOCK_R=128, GROUP_T=group_t,
        SPLIT_R=1, ROW_STAGES=2, SHARE_CHECK=False, PATH=3, USE_PDL=False, SHARE_LOOP=share_loop,
        maxnreg=maxnreg,
    )  # fmt: skip


CANDS = (
    _c("tma_t64_d128_s3_r168_shared", 1),
    _c("tma_t64_d128_s3_r168_differ", 2),
)

"""Compile PATH 3 prefill candidates (the per-row share check splitting the tiles over two
launches, SHARE_LOOP 1 / 2; prefill.patch applied) beside the shipped configs for sm_90a on the
CPU, through the AOT gate's own compile step: registers, spilled bytes, shared memory, on the
per-row int32 scale layout.

usage: python3 build_tma_sm90a.py
"""

import os
import tempfile

from pf_tma_configs import CANDS
from sparkpair_overlay.kernels import aot
from sparkpair_overlay.kernels import fp8_einsum as fe


def main() -> None:
    cache = tempfile.mkdtemp()
    names = {c.name for c in CANDS} | {"tma_t64_d128_s3_r168", "tma_t64_d128_s3_r168_nosc"}
    for v in aot.fp8_einsum_variants(("ue8m0-int32",)):
        if v.config.name != "tma_t64_d128_s3_r168":
            continue
        for cfg in [fe._CONFIGS_BY_NAME[n] for n in sorted(names) if n in fe._CONFIGS_BY_NAME] + list(CANDS):
            kw = {**v.kwargs, **cfg.constexprs()}
            r = aot.compile_variant(
                aot.AotVariant("fp8_einsum", cfg, v.variant, v.fn, v.args, kw), "sm_90a", cache
            )
            res = f"ok={r.ok} regs={r.n_regs} spills={r.spills} shared={r.shared} {r.error or ''}"
            print(f"{cfg.name:32s} {res}", flush=True)
    os.system(f"rm -rf {cache}")


if __name__ == "__main__":
    main()

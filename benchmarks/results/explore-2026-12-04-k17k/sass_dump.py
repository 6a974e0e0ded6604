"""Round 11 refactor check: the sm_90a SASS of every Gluon launch the dispatcher makes (4 encodings x
T = 32 / 36 / 128 at R = 4096, T = 36 / 100 at R = 3072), kernel names and addresses stripped, one
file each under OUT_DIR, to compare two trees byte for byte (CPU only).

usage: PYTHONPATH=overlay python3 sass_dump.py OUT_DIR
"""

import hashlib
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from sparkpair_overlay.kernels import aot
from sparkpair_overlay.kernels import fp8_einsum as fe
from sparkpair_overlay.numerics import make_fp8_operands

ND = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "nvdisasm")
outdir = sys.argv[1]
cache = tempfile.mkdtemp()
for enc in ("fp32", "int32", "int32-bcast", "e8m0"):
    recipe = (1, 128, 128) if enc == "fp32" else (1, 1, 128)
    for t, r in ((32, 4096), (36, 4096), (128, 4096), (36, 3072), (100, 3072)):
        a, sa, w, sw, _, _ = make_fp8_operands(t, 4, 1024, r, recipe, enc, device="cpu")
        out = torch.empty((t, 4, 1024), dtype=torch.bfloat16)
        sa_kind, sa, sw_kind, sw, per_row = fe._prepare(fe.SUPPORTED_EQUATION, a, sa, w, sw, out, recipe)
        v = fe.block_scales_view(sw) if per_row else None
        if v is not None:
            sw, per_row = v, False
        cfg = fe.select_fp8_einsum_config(t, enc == "fp32", tma=True, per_row=per_row, gluon=True)
        k_, grid, args, kw = fe._gluon_launch(cfg, a, sa, w, sw, out, sa_kind, sw_kind, per_row)
        with aot._target_driver("sm_90a", cache):
            k = k_.warmup(*args, grid=grid, **kw)
            k = k.result() if hasattr(k, "result") else k
        open(os.path.join(cache, "x.cubin"), "wb").write(k.asm["cubin"])
        s = subprocess.run([ND, "-c", os.path.join(cache, "x.cubin")], capture_output=True, text=True).stdout
        s = re.sub(r"/\*[0-9a-f]+\*/", "", s)
        s = re.sub(r"_fp8_einsum_gluon\w*kernel", "K", s)
        name = f"{enc}_{t}_{r}_{cfg.name}"
        open(f"{outdir}/{name}.sass", "w").write(s)
        print(
            name, aot._resource_usage(k.asm["cubin"]), hashlib.sha1(s.encode()).hexdigest()[:10], flush=True
        )

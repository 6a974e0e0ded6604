"""Compile PATH 4 prefill candidates (fp8_einsum_gluon, K unsplit, bf16 out; prefill.patch
applied) for sm_90a on the CPU: shared memory, registers and spills (cuobjdump), per encoding.

usage: python3 build_sm90a.py [bt,bd,stages,warps ...]
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import triton
from sparkpair_overlay.kernels import fp8_einsum_gluon as fg
from triton.backends.compiler import GPUTarget
from triton.experimental.gluon import language as gl
from triton.experimental.gluon._runtime import GluonASTSource

PTR = {0: "*fp32", 1: "*i32", 2: "*u8"}
KINDS = {"fp32": (0, 0, False), "int32": (1, 1, True)}


def build(bt, bd, stages, warps, kinds):
    lay = {n: gl.NVMMASharedLayout.get_default_for([n, 128], gl.float8e4nv) for n in {bt, bd}}
    consts = {
        "SA_KIND": kinds[0], "SW_KIND": kinds[1], "SW_PER_ROW": kinds[2], "BLOCK_T": bt, "BLOCK_D": bd,
        "KB_PER": 32, "STAGES": stages, "USE_PDL": True, "num_warps": warps,
    }  # fmt: skip
    types = {
        "ws_ptr": "*bf16", "sa_ptr": PTR[kinds[0]], "sw_ptr": PTR[kinds[1]],
        "w_desc": f"tensordesc<fp8e4nv[{bd}, 128],{lay[bd]!r}>",
        "a_desc": f"tensordesc<fp8e4nv[{bt}, 128],{lay[bt]!r}>",
    }  # fmt: skip
    names = fg._fp8_einsum_gluon_kernel.arg_names
    sig = {n: "constexpr" if n in consts else types.get(n, "i32") for n in names}
    src = GluonASTSource(
        fg._fp8_einsum_gluon_kernel, sig, constexprs={(names.index(k),): v for k, v in consts.items()}
    )
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"num_warps": warps})


def regs(k) -> str:
    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(k.asm["cubin"])
        f.flush()
        out = subprocess.run(
            [str(tool), "--dump-resource-usage", f.name], capture_output=True, text=True
        ).stdout
    return " ".join(w for w in out.split() if w.startswith(("REG:", "STACK:", "SHARED:", "LOCAL:")))


def main() -> None:
    os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp())
    for a in sys.argv[1:]:
        c = tuple(int(v) for v in a.split(","))
        for name, kinds in KINDS.items():
            k = build(*c, kinds)
            print(f"{c} {name:5s} shared {k.metadata.shared} {regs(k)}", flush=True)
    shutil.rmtree(os.environ["TRITON_CACHE_DIR"], ignore_errors=True)


if __name__ == "__main__":
    main()

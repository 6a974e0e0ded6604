"""Compile the round-11 candidates (gl_tm.tm_kernel) for sm_90a on the CPU through the AOT gate's
target driver: registers, spilled bytes, shared memory, or the compiler's error.

usage: python3 compile_tm.py [NAME ...]
"""

import sys
import tempfile

import torch
from gl_tm import descriptor, tm_kernel
from sparkpair_overlay.kernels import aot
from tm_cands import CANDS

G, D, R = 4, 1024, 4096


def main() -> None:
    cache = tempfile.mkdtemp()
    want = {a for a in sys.argv[1:] if not a.isdigit()}
    for name, c in CANDS.items():
        if (want and name not in want) or c["kind"] != "tm":
            continue
        t = c["T_LOAD"] or c["BLOCK_T"]
        t = int(sys.argv[-1]) if sys.argv[-1].isdigit() else t
        a2 = torch.empty((G * t, R), dtype=torch.float8_e4m3fn)
        w2 = torch.empty((G * D, R), dtype=torch.float8_e4m3fn)
        out = torch.empty((t, G, D), dtype=torch.bfloat16 if c["SPLIT_R"] == 1 else torch.float32)
        for kind, sdt in (("int32", torch.int32), ("fp32", torch.float32)):
            sa = torch.empty((t, G, R // 128 // (4 if sdt == torch.int32 else 1)), dtype=sdt)
            sw = torch.empty((G, D // 128, R // 128 // (4 if sdt == torch.int32 else 1)), dtype=sdt)
            tm_kernel.device_caches.pop("aot-sm_90a", None)
            try:
                with aot._target_driver("sm_90a", cache):
                    k = tm_kernel.warmup(
                        out, descriptor(w2, [c["BLOCK_D"], 128], c["BLOCK_D"]),
                        descriptor(a2, [t, 128], c["BLOCK_T"]), sa, sw, t, D, 1, 1, 1,
                        1, 1, 1, 1, 1, 1, 1,
                        SA_KIND=1 if kind == "int32" else 0, SW_KIND=1 if kind == "int32" else 0,
                        SW_PER_ROW=False, BLOCK_T=c["BLOCK_T"], BLOCK_D=c["BLOCK_D"],
                        T_LOAD=min(t, c["BLOCK_T"]),
                        KB_PER=R // 128 // c["SPLIT_R"], STAGES=c["STAGES"], AHEAD=c["AHEAD"],
                        SPLIT_R=c["SPLIT_R"], USE_PDL=True, BATCH_SCALES=c.get("BATCH", True),
                        num_warps=c["num_warps"], grid=(1,),
                    )  # fmt: skip
                    if hasattr(k, "result"):
                        k = k.result()
                regs, spills = aot._resource_usage(k.asm["cubin"])
                print(
                    f"{name:34s} {kind:6s} regs={regs} spills={spills} shared={k.metadata.shared}", flush=True
                )
            except Exception as exc:  # noqa: BLE001
                msg = str(exc).strip().splitlines()
                print(
                    f"{name:34s} {kind:6s} FAILED {type(exc).__name__}: {msg[-1][:400] if msg else ''}",
                    flush=True,
                )
                if "-v" in sys.argv:
                    raise


if __name__ == "__main__":
    main()

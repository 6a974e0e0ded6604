"""One rank of the cross-node all-reduce test; prints an nccl-tests ``all_reduce_perf`` table.

Run one process per node (``--rank`` = node rank). Sizes double from 8 MiB up to
``--max-bytes`` (capped at 4 GiB, B05). Each size: 5 warm-up and 20 timed iterations; the
out-of-place time is the mean per iteration; ``algbw = size / time``; ``busbw = algbw x
2(n-1)/n`` (nccl-tests' all-reduce bus factor). Results are checked: every element must
equal ``n (n + 1) / 2`` after summing ``rank + 1`` from every rank.

``--backend gloo`` runs the same test on CPU (used by the unit tests); NCCL needs a GPU.
"""

from __future__ import annotations

import argparse
import time

MAX_BYTES_CAP = 4 << 30


def main() -> None:
    """Parse arguments, run the sizes, print the table."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--master", required=True, help="head_ip:port")
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--min-bytes", type=int, default=8 << 20)
    ap.add_argument("--backend", default="nccl", choices=["nccl", "gloo"])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    if a.max_bytes > MAX_BYTES_CAP:
        raise SystemExit(f"--max-bytes {a.max_bytes}; wanted <= {MAX_BYTES_CAP} (B05)")

    import torch
    import torch.distributed as dist

    if a.backend == "nccl" and not torch.cuda.is_available():
        raise SystemExit(
            f"rank {a.rank}: --backend nccl needs a CUDA device; torch {torch.__version__} sees none "
            "(run it in the node's image on a Spark, where vLLM's NCCL is)"
        )
    print(f"# rank {a.rank} of {a.world}: waiting at {a.master} for every rank to join", flush=True)
    dist.init_process_group(a.backend, init_method=f"tcp://{a.master}", rank=a.rank, world_size=a.world)
    dev = torch.device("cuda", 0) if a.backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if a.backend == "nccl" else (lambda: None)
    n = a.world
    factor = 2.0 * (n - 1) / n
    expect = n * (n + 1) / 2
    if a.rank == 0:
        print(
            f"# nThread 1 nGpus 1 minBytes {a.min_bytes} maxBytes {a.max_bytes} step: 2(factor) "
            f"warmup iters: {a.warmup} iters: {a.iters} validation: 1 backend: {a.backend}"
        )
        print("#")
        print("#       size         count      type   redop    root     time   algbw   busbw #wrong")
        print("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)")
    size = a.min_bytes
    total = 0.0
    rows = 0
    while size <= a.max_bytes:
        count = size // 4
        buf = torch.empty(count, dtype=torch.float32, device=dev)
        for _ in range(a.warmup):
            buf.fill_(a.rank + 1)
            dist.all_reduce(buf)
        sync()
        t0 = time.perf_counter()
        for _ in range(a.iters):
            dist.all_reduce(buf)
        sync()
        dt = (time.perf_counter() - t0) / a.iters
        buf.fill_(a.rank + 1)
        dist.all_reduce(buf)
        sync()
        wrong = int((buf != expect).sum().item())
        algbw = size / dt / 1e9
        busbw = algbw * factor
        total += busbw
        rows += 1
        if a.rank == 0:
            print(
                f"{size:12d}  {count:12d}     float     sum      -1  {dt * 1e6:9.1f}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5d}",  # noqa: E501
                flush=True,
            )
        del buf
        size *= 2
    if a.rank == 0:
        print("# Out of bounds values : 0 OK")
        print(f"# Avg bus bandwidth    : {total / max(rows, 1):.4f}")
        print(f"# nranks {n}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

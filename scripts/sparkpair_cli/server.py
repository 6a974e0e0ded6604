"""Start, watch and stop a real vLLM OpenAI server as a child process group.

Used by ``sparkpair demo`` and by the test suite's session fixture. The server runs
``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script looks up a
distribution named ``vllm``, which the CPU build is not; see ``shared/DESIGN.md``).

The child gets its own process session, so :meth:`VllmServer.stop` can end the API
server, the engine core and every worker together, on success, on failure and on
Ctrl-C alike.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType

import httpx
from sparkpair_serving.profile import Profile
from sparkpair_serving.waiting import PollTimeout, poll_until


class ServerStartError(RuntimeError):
    """The vLLM server exited or did not answer before its start timeout."""


def free_port(host: str = "127.0.0.1") -> int:
    """Return a TCP port that was free on ``host`` at the time of the call."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def cpu_server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for the vLLM CPU build.

    ``VLLM_CPU_KVCACHE_SPACE=1`` (GiB) keeps the KV cache small on a 24 GiB machine;
    ``VLLM_CPU_OMP_THREADS_BIND=nobind`` lets TP>1 ranks share the two cores (both from
    ``shared/DESIGN.md``).
    """
    env = dict(os.environ)
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("VLLM_NO_USAGE_STATS", "1")
    env.setdefault("DO_NOT_TRACK", "1")
    if extra:
        env.update(extra)
    return env


class VllmServer:
    """A vLLM OpenAI API server in its own process group.

    Args:
        model: model directory or id passed to ``--model``.
        served_model_name: the name clients use in ``model``.
        args: further server arguments (strings), appended after the fixed ones.
        host: bind address.
        port: TCP port; ``None`` picks a free one.
        env: extra environment (merged over :func:`cpu_server_env`).
        log_path: file that receives the server's stdout and stderr.

    Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        model: str | Path,
        served_model_name: str,
        args: Sequence[str] = (),
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.model = str(model)
        self.served_model_name = served_model_name
        self.args = list(args)
        self.host = host
        self.port = port or free_port(host)
        self.env = cpu_server_env(env)
        self.log_path = Path(log_path) if log_path else Path(f"/tmp/sparkpair-vllm-{self.port}.log")
        self.proc: subprocess.Popen[bytes] | None = None

    @classmethod
    def from_profile(
        cls,
        profile: Profile,
        model_dir: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
    ) -> VllmServer:
        """Build the server a profile describes, serving ``model_dir``.

        ``--max-model-len`` and ``--tensor-parallel-size`` come from ``profile.server``;
        ``profile.server.args`` and then ``extra_args`` follow.
        """
        spec = profile.server
        args = [
            "--max-model-len",
            str(spec.max_model_len),
            "--tensor-parallel-size",
            str(spec.tensor_parallel_size),
            *spec.serve_args(),
            *extra_args,
        ]
        merged = {**spec.env, **(env or {})}
        return cls(
            model_dir,
            profile.served_model_name,
            args,
            host=host,
            port=port,
            env=merged,
            log_path=log_path,
        )

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the server."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        """The full argv that starts the server."""
        return [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.args,
        ]

    def start(self) -> VllmServer:
        """Launch the server process (returns at once; see :meth:`wait_ready`)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            self.command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=self.env,
            start_new_session=True,
        )
        log.close()
        return self

    def alive(self) -> bool:
        """True while the API server process has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the server log."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def wait_ready(
        self,
        timeout_s: float = 300.0,
        on_tick: Callable[[float, str], None] | None = None,
    ) -> float:
        """Poll ``/health`` until it answers 200; return the seconds waited.

        This is only process readiness: the health suite's gate decides whether the
        server really decodes.

        Raises:
            ServerStartError: the process exited (with the log tail), or ``timeout_s``
                passed without a 200.
        """
        state = "not probed yet"

        def healthy() -> bool | None:
            nonlocal state
            if not self.alive():
                code = self.proc.returncode if self.proc else None
                raise ServerStartError(
                    f"vLLM server exited with code {code} before it was ready; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                r = httpx.get(self.base_url + "/health", timeout=2.0)
                if r.status_code == 200:
                    return True
                state = f"/health answered {r.status_code}"
            except httpx.HTTPError:
                state = "not listening yet"
            return None

        try:
            return poll_until(
                healthy,
                timeout_s=timeout_s,
                interval_s=1.0,
                on_wait=(lambda waited: on_tick(waited, state)) if on_tick else None,
            ).waited_s
        except PollTimeout:
            raise ServerStartError(
                f"vLLM server at {self.base_url} not ready after {timeout_s:.0f} s ({state}); "
                f"log {self.log_path}:\n{self.log_tail()}"
            ) from None

    def pids(self) -> list[int]:
        """PIDs of every live process in the server's process group (API server, engine, workers)."""
        if self.proc is None:
            return []
        pgid = self.proc.pid
        out: list[int] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    out.append(int(entry.name))
            except (ProcessLookupError, PermissionError):
                continue
        return sorted(out)

    def engine_core_pids(self) -> list[int]:
        """PIDs in the server's process group whose argv or title says EngineCore.

        vLLM 0.32 retitles its engine process ``VLLM::EngineCore`` (``/proc/PID/comm`` keeps
        its first 15 bytes) and names it in argv when spawned.
        """
        out = []
        for pid in self.pids():
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                comm = Path(f"/proc/{pid}/comm").read_text()
            except OSError:
                continue
            if "EngineCore" in argv or comm.startswith("VLLM::EngineCor"):
                out.append(pid)
        return out

    def stop(self, grace_s: float = 15.0) -> None:
        """Stop the server and every process it started.

        SIGTERM goes to the API server first, so it shuts its engine core and workers down
        in order (a group-wide SIGTERM kills the engine under the API server, which then
        logs ``EngineDeadError`` for a healthy server). What is still alive after
        ``grace_s`` gets SIGTERM group-wide, then SIGKILL after 5 s more.
        """
        if self.proc is None:
            return
        proc, pgid = self.proc, self.proc.pid

        def gone() -> bool | None:
            proc.poll()  # reap the child so its pid leaves /proc
            return True if not self.pids() else None

        steps = (
            (lambda: os.kill(pgid, signal.SIGTERM), grace_s),
            (lambda: os.killpg(pgid, signal.SIGTERM), 5.0),
            (lambda: os.killpg(pgid, signal.SIGKILL), 5.0),
        )
        for send, wait in steps:
            if not self.pids():
                break
            try:
                send()
            except ProcessLookupError:
                pass
            try:
                poll_until(gone, timeout_s=wait, interval_s=0.2)
            except PollTimeout:
                pass  # the next, harder signal
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

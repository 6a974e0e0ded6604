"""The API key a vLLM server was started with (``VLLM_API_KEY``), kept out of every output.

The key comes from a file (``--api-key-file PATH`` or ``SPARKPAIR_API_KEY_FILE``: a
Docker/compose secret, one line, surrounding whitespace stripped) or from the environment
(``SPARKPAIR_API_KEY``), never from the command line (argv is visible to every user of the
machine in ``ps``). It is never parsed (no JSON, no YAML) and never printed: it is held as a
:class:`pydantic.SecretStr` (``repr``/``str``/``model_dump_json`` print ``**********``), and
:func:`redact` -- the one redaction of the health package -- removes it from everything the
suite and the gateway print or write (a server or proxy may echo the ``Authorization``
header in an error body). Messages about the key name its *source* (:func:`api_key_source`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
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

_BEARER = re.compile(r"(?i)(bearer\s+)(?!<redacted-api-key>)[^\s\"'\\,;}\]<>]+")
"""``Bearer <token>`` as an echoed ``Authorization`` header shows it: the token is replaced
even when it is cut short (an error body truncated mid-key) or is another key than ours."""


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


def redact(obj: Any, key: SecretStr | None) -> Any:
    """Return ``obj`` (str, or nested dict/list/tuple of them, keys included) with the key removed.

    Replaced by ``<redacted-api-key>``: the key as is, the key as JSON escapes it (a body that
    quotes it), and every ``Bearer <token>`` (an echoed header, even one cut short). Applied
    whether or not a key is configured (``key=None`` still removes ``Bearer`` tokens). Other
    types are returned unchanged.
    """
    secret = key.get_secret_value() if key is not None else ""
    if isinstance(obj, str):
        if secret:
            obj = obj.replace(secret, REDACTED)
            escaped = json.dumps(secret)[1:-1]
            if escaped != secret:
                obj = obj.replace(escaped, REDACTED)
        return _BEARER.sub(lambda m: m.group(1) + REDACTED, obj)
    if isinstance(obj, dict):
        return {redact(k, key): redact(v, key) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, key) for v in obj)
    return obj

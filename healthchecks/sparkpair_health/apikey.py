"""The API key a vLLM server was started with (``--api-key``), kept out of every output.

The key comes from an explicit value, from ``SPARKPAIR_API_KEY``, or from a file named by
``SPARKPAIR_API_KEY_FILE`` (a Docker/compose secret: one line, surrounding whitespace
stripped). It is held as a :class:`pydantic.SecretStr` so ``repr``/``str`` and
``model_dump_json`` print ``**********``; :func:`redact` removes it from any text that is
about to be logged or written to a report (a server may echo the header in an error).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import SecretStr

ENV_KEY = "SPARKPAIR_API_KEY"
"""Environment variable holding the key itself."""
ENV_KEY_FILE = "SPARKPAIR_API_KEY_FILE"
"""Environment variable naming a file whose content is the key."""

REDACTED = "<redacted-api-key>"


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
        text = p.read_text().strip()
    except OSError as e:
        raise ApiKeyError(
            f"{setting}={p}: cannot read the key file ({e.strerror}); wanted a readable file"
        ) from None
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


def redact(obj: Any, key: SecretStr | None) -> Any:
    """Return ``obj`` (str, or nested dict/list/tuple of them) with every occurrence of the key
    replaced by ``<redacted-api-key>``."""
    if key is None:
        return obj
    secret = key.get_secret_value()
    if not secret:
        return obj
    if isinstance(obj, str):
        return obj.replace(secret, REDACTED)
    if isinstance(obj, dict):
        return {redact(k, key): redact(v, key) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact(v, key) for v in obj)
    return obj

"""The API key as ``echo_key`` makes the fault server (``health_fault_server.py``) repeat it:
every way a careless server can leak a key, so the suite's redaction is shown catching each.
"""

from __future__ import annotations

import base64
import json

ESCAPED_MARK = "\u00ab{}\u00bb"
"""Brackets (« ») around the copy of the key that ``echo_key`` writes in ``\\u`` escapes."""


def masked(key: str) -> str:
    """``key`` as a careful log masks it: its first 12 and last 4 characters around ``…****``."""
    return key[:12] + "\u2026****" + key[-4:]


def key_echo_pieces(key: str) -> list[str]:
    """The stream deltas of ``echo_key``'s echo (joined: the non-streamed echo): the key split in
    two at every offset, split into n equal-ish chunks for every n from 2 to its length, whole,
    masked, base64 of ``Authorization: Bearer <key>``, and once bracketed (the copy spelt in
    ``\\u`` escapes on the wire)."""
    out: list[str] = []
    for j in range(1, len(key)):
        out += [" " + key[:j], key[j:]]
    for n in range(2, len(key) + 1):
        cuts = [round(i * len(key) / n) for i in range(n + 1)]
        out += [" " + key[cuts[0] : cuts[1]], *(key[a:b] for a, b in zip(cuts[1:-1], cuts[2:], strict=True))]
    header = base64.b64encode(f"Authorization: Bearer {key}".encode()).decode()
    out += [" " + key, " " + masked(key), " " + header, " " + ESCAPED_MARK.format(key)]
    return out


def escape_key(text: str, key: str) -> str:
    """A JSON text with the bracketed copy of ``key`` written in ``\\u`` escapes (no run of the key left)."""
    spelt = "".join(f"\\u{ord(c):04x}" for c in key)
    return text.replace(
        json.dumps(ESCAPED_MARK.format(key), ensure_ascii=False)[1:-1], "\\u00ab" + spelt + "\\u00bb"
    )

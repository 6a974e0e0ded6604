"""The one redaction (:func:`sparkpair_serving.apikey.redact`) with
:class:`~sparkpair_serving.apikey.Private`: other tokens removed in every spelling as the key is,
private hosts in any case, absolute paths outside the run; the image's and the system's own paths
and the API's routes kept."""

from __future__ import annotations

import base64
import json

from pydantic import SecretStr
from sparkpair_serving.apikey import (
    OUTSIDE_PATH,
    PRIVATE_HOST,
    REDACTED,
    REDACTED_TOKEN,
    Private,
    redact,
    searchable,
)

TOKEN = "tok-Q7wE9rT2yU4iO6pA"
PRIV = Private(
    tokens=(SecretStr(TOKEN),), hosts=("spark-a", "10.0.0.7"), run_root="/srv/run/", strip_paths=True
)


def test_another_token_goes_in_every_spelling_and_cut_short() -> None:
    b64 = base64.b64encode(f"token {TOKEN}".encode()).decode()
    for text in (TOKEN, json.dumps({"t": TOKEN}), b64, TOKEN[:10], f"x{TOKEN[3:]}y"):
        out = redact(text, None, PRIV)
        assert REDACTED_TOKEN in out, (text, out)
        assert TOKEN[:8] not in out and TOKEN[-8:] not in out
    # Without it named, the token stays: the test above is not passing by accident.
    assert redact(TOKEN, None) == TOKEN


def test_the_key_and_a_token_in_one_string_are_both_removed_and_bearer_still_is() -> None:
    key = SecretStr("sk-key-Mn3Bv5Cx7Zl9")
    out = redact(f"a sk-key-Mn3Bv5Cx7Zl9 b {TOKEN} c Bearer someone-else", key, PRIV)
    assert out == f"a {REDACTED} b {REDACTED_TOKEN} c Bearer {REDACTED}"


def test_private_hosts_in_any_case_and_inside_urls() -> None:
    out = redact("http://SPARK-A:8000/v1 and 10.0.0.7 but not 10.0.0.70x", None, PRIV)
    assert "spark-a" not in out.lower() and "10.0.0.7 " not in out
    assert out.startswith(f"http://{PRIVATE_HOST}:8000/v1 and {PRIVATE_HOST} but")


def test_paths_outside_the_run_go_the_runs_own_and_public_ones_stay() -> None:
    text = ("/home/alice/models/x.json /srv/run/report-bench/result.json "
            "/var/lib/sparkpair/state/kernel-plan.json "
            "/proc/driver/nvidia/version GET /v1/models /health tok/s 1/2 http://h:8/v1/chat")  # fmt: skip
    out = redact(text, None, PRIV)
    assert out.split() == [OUTSIDE_PATH, "./report-bench/result.json",
                           "/var/lib/sparkpair/state/kernel-plan.json", "/proc/driver/nvidia/version", "GET",
                           "/v1/models", "/health", "tok/s", "1/2", "http://h:8/v1/chat"]  # fmt: skip
    # strip_paths off (the gateway's use): paths untouched.
    assert redact("/home/alice/x", None, Private()) == "/home/alice/x"


def test_nested_values_are_redacted_and_keys_never_are() -> None:
    out = redact({"spark-a": [TOKEN, ("/home/bob", 3)], "host": "spark-a"}, None, PRIV)
    assert out == {"spark-a": [REDACTED_TOKEN, (OUTSIDE_PATH, 3)], "host": PRIVATE_HOST}


def test_a_short_secret_is_removed_only_where_a_value_is_it_whole() -> None:
    # SPARKPAIR_API_KEY=on, HF_TOKEN=data / =1: searched for in text, they blanked "condition",
    # the "data" key and every digit of a timestamp.
    doc = {"data": {"condition": "on", "t": "2026-12-05T21:01:00", "n": "1", "msg": "data on 1 node"}}
    priv = Private(tokens=(SecretStr("data"), SecretStr("1")))
    out = redact(doc, SecretStr("on"), priv)
    assert out == {"data": {"condition": REDACTED, "t": "2026-12-05T21:01:00", "n": REDACTED_TOKEN,
                            "msg": "data on 1 node"}}  # fmt: skip
    assert redact(" on\n", SecretStr("on")) == REDACTED
    # the threshold: eight characters are searched for inside text
    assert searchable("12345678") and not searchable("1234567")
    assert redact("x 12345678 y", SecretStr("12345678")) == f"x {REDACTED} y"


def test_a_short_private_host_is_removed_only_as_a_whole_name() -> None:
    priv = Private(hosts=("a", "id"))
    out = redact({"id": "a", "data": "a GPU on id, data at spark-a.lan; valid ids"}, None, priv)
    h = PRIVATE_HOST
    assert out == {"id": h, "data": f"{h} GPU on {h}, data at spark-{h}.lan; valid ids"}
    # a private host as one part of a longer name is still removed
    assert redact("spark-a-head", None, Private(hosts=("SPARK-A",))) == f"{h}-head"


def test_a_urls_password_is_removed_whatever_it_is() -> None:
    text = "HF_ENDPOINT=https://me:hunter2@mirror.lan/hf and ssh://git@host kept"
    assert (
        redact(text, None)
        == "HF_ENDPOINT=https://me:<redacted-password>@mirror.lan/hf and ssh://git@host kept"
    )

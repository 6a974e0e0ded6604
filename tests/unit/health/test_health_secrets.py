"""No file, stream or endpoint of ``sparkpair health`` or ``sparkpair gateway`` contains the API key.

The server (tests/faults/health_fault_server.py) requires the key and, like a careless
proxy, quotes the request's ``Authorization`` header in every error body. The key starts
with ``{`` (it was once parsed as JSON and printed in the parse error) and holds a
backslash (JSON escapes it, so the echo carries it in another spelling). Both commands run
as the operator runs them, as processes; their stdout, stderr, report files and every
gateway endpoint are searched for the key.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "faults"))
from health_fault_server import FaultServer  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
KEY = '{"sk":"s3cr\\et-0042"}'
SPELLINGS = (KEY, json.dumps(KEY)[1:-1], "s3cr")
"""The key, as JSON escapes it, and a piece of it that no output has any other reason to hold."""


def cli(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # SPARKPAIR_PROFILE as the node env sets it (health and gateway have no default profile)
    full = {**os.environ, "SPARKPAIR_PROFILE": "tiny-demo", **env}
    full.update(PYTHONPATH=os.environ.get("PYTHONPATH", ""), COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "sparkpair_cli.main", *args],
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def key_file(tmp: Path, key: str = KEY) -> Path:
    p = tmp / "api_key"
    p.write_text(key + "\n")
    return p


def assert_no_key(where: str, text: str) -> None:
    for s in SPELLINGS:
        assert s not in text, f"{where} holds the key ({s!r}): ...{text[max(0, text.find(s) - 200) :][:400]}"


def test_the_health_command_never_prints_or_writes_the_key(tmp_path: Path) -> None:
    with FaultServer(api_key=KEY, faults={"echo_auth"}) as srv:
        r = cli(
            "health",
            "--base-url",
            srv.base_url,
            "--report-json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
            env={"SPARKPAIR_API_KEY_FILE": str(key_file(tmp_path))},
        )
    # 1: the stand-in does not grow usage with the prompt, so dsv4.long_context fails; fine here.
    assert r.returncode in (0, 1), r.stdout[-3000:] + r.stderr[-2000:]
    rep = (tmp_path / "r.json").read_text()
    assert {c["id"]: c["status"] for c in json.loads(rep)["checks"]}["long_prompt_rejected"] == "pass"
    assert "<redacted-api-key>" in rep, "the echo did reach the report (the over-long prompt's 400 body)"
    for where, text in (("stdout", r.stdout), ("stderr", r.stderr), ("report", rep)):
        assert_no_key(where, text)
    assert_no_key("junit", (tmp_path / "j.xml").read_text())


def test_an_echoed_key_in_failures_and_the_not_ready_cause_is_redacted(tmp_path: Path) -> None:
    with FaultServer(api_key=KEY, faults={"echo_auth", "chat_500"}) as srv:
        r = cli(
            "health",
            "--base-url",
            srv.base_url,
            "--ready-timeout",
            "3",
            "--report-json",
            str(tmp_path / "r.json"),
            "--junit",
            str(tmp_path / "j.xml"),
            env={"SPARKPAIR_API_KEY": KEY},
        )
    assert r.returncode == 2, r.stdout[-2000:]
    rep = json.loads((tmp_path / "r.json").read_text())
    assert "HTTP 500" in rep["ready"]["detail"] and "<redacted-api-key>" in rep["ready"]["detail"]
    for where, text in (
        ("stdout", r.stdout),
        ("stderr", r.stderr),
        ("junit", (tmp_path / "j.xml").read_text()),
    ):
        assert_no_key(where, text)
    assert_no_key("report", json.dumps(rep))


def test_a_refused_key_fails_at_once_naming_its_source_not_the_key(tmp_path: Path) -> None:
    kf = key_file(tmp_path)
    with FaultServer(api_key="the-right-key", faults={"echo_auth"}) as srv:
        t0 = time.monotonic()
        r = cli("health", "--base-url", srv.base_url, env={"SPARKPAIR_API_KEY_FILE": str(kf)})
        took = time.monotonic() - t0
    assert r.returncode == 2, r.stdout[-2000:]
    assert took < 60, f"a 401 must end the wait at once (ready timeout 600 s), took {took:.0f} s"
    out = " ".join(r.stdout.split())
    assert "HTTP 401" in out and f"SPARKPAIR_API_KEY_FILE={kf}" in out.replace("\u2026", ""), out[-1500:]
    assert_no_key("stdout", r.stdout)


def test_api_key_on_the_command_line_is_refused_without_echoing_it() -> None:
    r = cli("health", "--base-url", "http://127.0.0.1:9", "--api-key", KEY, env={})
    assert r.returncode == 3 and "--api-key-file" in r.stdout + r.stderr
    assert_no_key("output", r.stdout + r.stderr)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_endpoint_file_or_stream_of_the_gateway_holds_the_key(tmp_path: Path) -> None:
    port = free_port()
    env = {
        "SPARKPAIR_API_KEY_FILE": str(key_file(tmp_path)),
        "SPARKPAIR_PROFILE": "tiny-demo",
        "SPARKPAIR_PORT": str(port),
        "SPARKPAIR_DSV4_CHECKS": "false",
        "SPARKPAIR_CANARY_INTERVAL_S": "0.5",
        "SPARKPAIR_REPORT_JSON": str(tmp_path / "g.json"),
        "SPARKPAIR_JUNIT_XML": str(tmp_path / "g.xml"),
    }
    texts: dict[str, str] = {}
    with FaultServer(api_key=KEY, faults={"echo_auth"}) as srv:
        env["SPARKPAIR_BASE_URL"] = srv.base_url
        full = {**os.environ, **env}
        proc = subprocess.Popen(
            [sys.executable, "-m", "sparkpair_cli.main", "gateway"],
            env=full,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            t_end = time.monotonic() + 120
            while time.monotonic() < t_end:
                try:
                    if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                time.sleep(0.2)
            srv.faults.add("chat_500")  # the canary now fails with an echoing 500
            time.sleep(1.5)
            for path in ("/readyz", "/report", "/metrics", "/livez"):
                texts[path] = httpx.get(url + path, timeout=5).text
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=20)
    assert json.loads(texts["/report"])["passed"], texts["/report"][:2000]
    assert "HTTP 500" in texts["/readyz"] and "<redacted-api-key>" in texts["/readyz"], texts["/readyz"]
    texts.update(stdout=out, stderr=err)
    texts["report file"] = (tmp_path / "g.json").read_text()
    texts["junit file"] = (tmp_path / "g.xml").read_text()
    for where, text in texts.items():
        assert_no_key(where, text)


def test_the_gateway_exits_2_at_once_on_a_refused_key_and_names_the_source(tmp_path: Path) -> None:
    kf = key_file(tmp_path)
    with FaultServer(api_key="the-right-key", faults={"echo_auth"}) as srv:
        t0 = time.monotonic()
        r = cli(
            "gateway",
            env={
                "SPARKPAIR_BASE_URL": srv.base_url,
                "SPARKPAIR_PORT": str(free_port()),
                "SPARKPAIR_API_KEY_FILE": str(kf),
                "SPARKPAIR_DSV4_CHECKS": "false",
            },
            timeout=90,
        )
        took = time.monotonic() - t0
    assert r.returncode == 2, r.stderr[-2000:]
    assert took < 60
    assert "gave up: API key refused" in r.stderr and f"SPARKPAIR_API_KEY_FILE={kf}" in r.stderr, r.stderr
    assert_no_key("stderr", r.stderr + r.stdout)


def test_the_gateway_exits_2_when_the_server_is_never_ready(tmp_path: Path) -> None:
    r = cli(
        "gateway",
        env={
            "SPARKPAIR_BASE_URL": "http://127.0.0.1:9",
            "SPARKPAIR_PORT": str(free_port()),
            "SPARKPAIR_READY_TIMEOUT_S": "2",
            "SPARKPAIR_DSV4_CHECKS": "false",
        },
        timeout=90,
    )
    assert r.returncode == 2 and "gave up: not ready" in r.stderr and "after 2 s" in r.stderr, r.stderr

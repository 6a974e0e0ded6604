"""Nothing secret survives into ``sparkpair report``: an API key, the model-sync token, private
hostnames and this machine's paths planted in every source the report reads -- the node env files,
the container logs, the probe and plan files, the API's and the gateway's answers -- appear nowhere
in the page, in any spelling the shared redaction knows (:func:`sparkpair_serving.apikey.spellings`).

The API and the gateway here are a small HTTP server on 127.0.0.1 that answers with the planted
values: a real vLLM never echoes a sync token or a hostname on demand, and that is the leak this
test exists to catch.
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from sparkpair_cli.report.html import read_report_data
from sparkpair_serving.apikey import spellings
from typer.testing import CliRunner

TESTS = Path(__file__).resolve().parents[2]
HOSTS = TESTS / "fixtures" / "hosts"

KEY = "sk-planted-Zq8vR2mW4xT6yU1"
SYNC = "sync-planted-Hh3Jk9Lm2Nb7Vc5"
HOST = "spark-a"  # the recorded head's node name, as an owner's hostname would be
ADDR = "192.168.177.11"  # the recorded head's fabric address
OWN_PATH = "/home/alice/private-models/dsv4"
BEARER_B64 = base64.b64encode(f"Bearer {KEY}".encode()).decode()


def planted(text: str = "") -> str:
    """A line holding every planted value, several ways."""
    return (f"{text} key={KEY} auth=Bearer {KEY} b64={BEARER_B64} sync={SYNC} json={json.dumps(SYNC)} "
            f"host={HOST.upper()} addr={ADDR} url=http://{HOST}:8000/v1 "
            f"model={OWN_PATH}/config.json")  # fmt: skip


class Planted(BaseHTTPRequestHandler):
    """Answers /v1/models, /v1/chat/completions, /readyz and /report with the planted values."""

    def _send(self, code: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if self.path == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": "tiny", "object": "model", "root": OWN_PATH}]})
        elif self.path == "/readyz":
            self._send(503, {"ready": False, "reason": planted("readyz")})
        elif self.path == "/report":
            check = {
                "id": "stream",
                "status": "fail",
                "message": planted("check"),
                "evidence": {"body": planted()},
            }
            self._send(200, {"passed": False, "checks": [check], "base_url": f"http://{HOST}:8000"})
        else:
            self._send(404, {"error": planted("not found")})

    def do_POST(self) -> None:  # noqa: N802
        n = int(self.headers.get("Content-Length", "0"))
        self.rfile.read(n)
        if self.path == "/v1/chat/completions":
            msg = {"role": "assistant", "content": planted("answer")}
            self._send(200, {"choices": [{"index": 0, "message": msg, "finish_reason": "stop"}]})
        else:
            self._send(404, {"error": planted()})

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Planted)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def node(folder: Path, tree: str) -> Path:
    folder.mkdir(parents=True)
    for entry in (HOSTS / tree).iterdir():
        if entry.name != "node.env":
            (folder / entry.name).symlink_to(entry)
    env = (HOSTS / tree / "node.env").read_text()
    (folder / "node.env").write_text(env + f"SPARKPAIR_SYNC_TOKEN={SYNC}\nSPARKPAIR_API_KEY={KEY}\n"
                                     f"SPARKPAIR_HOME={OWN_PATH}\n")  # fmt: skip
    # lines the log scanner's catalogue reports (its samples carry them into the report)
    log = [planted(f"ERROR NCCL error: unhandled system error, line {i}") for i in range(5)]
    (folder / "container.log").write_text("\n".join(log) + "\n")
    files = folder / "files"
    (files / "var/lib/sparkpair/state").mkdir(parents=True)
    (files / "var/lib/sparkpair/state/kernel-plan.json").write_text(
        json.dumps({"schema": "x", "line": planted()})
    )
    (files / "tmp").mkdir()
    (files / "tmp/sparkpair-nccl-allreduce.log").write_text(planted("nccl") + "\n")
    return folder


def test_no_planted_secret_host_or_path_survives_into_the_report(
    server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = node(tmp_path / "nodes" / "head", "spark-head-good")
    worker = node(tmp_path / "nodes" / "worker", "spark-worker-good")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    monkeypatch.setenv("SPARKPAIR_API_KEY", KEY)
    args = ["report", "--recorded", f"head={head}", "--recorded", f"worker={worker}", "--base-url", server,
            "--gateway", server, "--private-host", HOST, "--private-host", ADDR, "--window", "0",
            "--out", str(out_dir / "report.html"), "--time-limit", "60"]  # fmt: skip
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    page = (out_dir / "report.html").read_text()

    leaks = [s for secret in (KEY, SYNC) for s in spellings(secret) if len(s) >= 8 and s in page]
    assert not leaks, f"secret spellings in the report: {leaks}"
    assert BEARER_B64 not in page
    low = page.lower()
    assert HOST not in low and ADDR not in page, "a private host is in the report"
    assert "/home/alice" not in page and str(tmp_path) not in page, "a path outside the run is in the report"
    # They were there to remove: the markers stand where they were, in every source that carries text
    # into the report (the NCCL section keeps only what its parser reads: numbers and transports).
    data = read_report_data(out_dir / "report.html")
    secs = {s["id"]: s for s in data["sections"]}
    for sid in ("accuracy", "health", "kernels", "stability"):
        text = json.dumps(secs[sid]["data"])
        for mark in ("<redacted-api-key>", "<redacted-token>", "<private-host>", "<path>"):
            assert mark in text, f"{mark} not in the {sid} section: the planted value never reached it"
    env = secs["env"]["data"]["nodes"]["head"]
    assert env["SPARKPAIR_SYNC_TOKEN"] == f"<set, {len(SYNC)} characters>"
    assert env["SPARKPAIR_API_KEY"] == f"<set, {len(KEY)} characters>"
    assert env["SPARKPAIR_HOME"] == "<path>"

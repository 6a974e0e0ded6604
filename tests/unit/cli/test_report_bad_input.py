"""``sparkpair report`` on bad input: options refused (exit 2, naming the option, the value and the
wanted form) before anything is gathered; node files of the wrong shape named in their section
while the page is still written; short secrets and short private hosts never touch the report's
structure; the embedded data stays inside its ``<script>`` and stays strict JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from sparkpair_cli.report.gather import build_report
from sparkpair_cli.report.html import read_report_data, render
from sparkpair_cli.report.model import Options
from sparkpair_cli.report.nodes import READ_MAX_BYTES, RecordedNode
from typer.testing import CliRunner

TESTS = Path(__file__).resolve().parents[2]
HOSTS = TESTS / "fixtures" / "hosts"
WHEN = "2026-01-02T03:04:05+00:00"


def recorded(folder: Path, tree: str, env_extra: str = "") -> Path:
    """A recorded node: the host tree, its node.env with ``env_extra`` appended, a small log."""
    folder.mkdir(parents=True)
    for entry in (HOSTS / tree).iterdir():
        if entry.name != "node.env":
            (folder / entry.name).symlink_to(entry)
    (folder / "node.env").write_text((HOSTS / tree / "node.env").read_text() + env_extra)
    (folder / "container.log").write_text("INFO started\nsparkpair overlay plan: router=x o_proj=y\n")
    return folder


def put(folder: Path, inner: str, content: object) -> None:
    p = folder / "files" / inner.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(content if isinstance(content, str) else json.dumps(content))


def cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["report", *args])
    return res.exit_code, " ".join(res.output.split())


def quick(head: Path, worker: Path, out: Path) -> list[str]:
    return ["--recorded", f"head={head}", "--recorded", f"worker={worker}", "--base-url", "", "--no-accuracy",
            "--window", "0", "--out", str(out)]  # fmt: skip


PROBE = "/var/cache/sparkpair/vllm/sparkpair-probe.json"
PLAN = "/var/lib/sparkpair/state/kernel-plan.json"


def test_short_secrets_and_short_private_hosts_leave_keys_and_timestamps_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Searched for as substrings these rewrote dict keys ("data", "id", "condition") and every
    # digit of the timestamps: KeyError tracebacks or a mangled page.
    extra = "SPARKPAIR_API_KEY=on\nHF_TOKEN=data\nSPARKPAIR_SYNC_TOKEN=1\n"
    head = recorded(tmp_path / "n" / "head", "spark-head-good", extra)
    worker = recorded(tmp_path / "n" / "worker", "spark-worker-good", extra)
    monkeypatch.setenv("SPARKPAIR_API_KEY", "on")
    out = tmp_path / "r.html"
    rc, said = cli(*quick(head, worker, out), "--private-host", "a", "--private-host", "id")
    assert rc == 0, said
    data = read_report_data(out)
    assert data["meta"]["generated_at"][:4].isdigit(), data["meta"]
    secs = {s["id"]: s for s in data["sections"]}
    assert set(secs["env"]["data"]["nodes"]) == {"head", "worker"}
    assert secs["env"]["data"]["nodes"]["head"]["HF_TOKEN"] == "<set, 4 characters>"
    # The owner is told which secrets could only be removed where a whole value is one.
    warned = " ".join(data["meta"]["warnings"])
    assert "head: HF_TOKEN" in warned and "head: SPARKPAIR_SYNC_TOKEN" in warned and "the API key" in warned
    assert "too short to be searched for in free text" in said
    assert any("HF_TOKEN" in w for w in secs["summary"]["why"])


@pytest.mark.parametrize(
    "bad_file, content, said",
    [
        ("probe", [1, 2], "could not read the probe file"),
        ("probe", "just text", "could not read the probe file"),
        ("probe", {"serve_paths": [{"candidate": "x"}]}, "'serve_paths'[0] has no 'path'"),
        ("probe", {"serve_paths": ["row"]}, "'serve_paths'[0] is a string; wanted an object"),
        ("probe", {"serve_choice": "triton"}, "'serve_choice' is a string; wanted an object"),
        ("probe", {"kernel_paths": {"a": 1}}, "'kernel_paths' is an object; wanted a list"),
        ("plan", ["x"], "could not read the plan file"),
        # valid JSON cut at the read limit once read as "not JSON (Unterminated string ...)"
        pytest.param(
            "probe",
            '{"pad": "' + "x" * READ_MAX_BYTES + '"}',
            f"{READ_MAX_BYTES} bytes or larger",
            id="huge-probe",
        ),
    ],
)
def test_a_node_file_of_the_wrong_shape_is_named_and_the_page_is_still_written(
    tmp_path: Path, bad_file: str, content: object, said: str
) -> None:
    head = recorded(tmp_path / "n" / "head", "spark-head-good")
    worker = recorded(tmp_path / "n" / "worker", "spark-worker-good")
    put(head, PROBE if bad_file == "probe" else PLAN, content)
    out = tmp_path / "r.html"
    rc, text = cli(*quick(head, worker, out))
    assert rc == 0, text
    secs = {s["id"]: s for s in read_report_data(out)["sections"]}
    why = [w for w in secs["kernels"]["why"] if said in w]
    assert why and why[0].startswith("head: could not read"), secs["kernels"]["why"]
    assert "head: head:" not in " ".join(secs["kernels"]["why"])
    assert secs["env"]["state"] == "filled" and secs["preflight"]["data"]["nodes"]


def test_a_broken_inspect_json_is_named_and_the_nodes_other_sections_stay(tmp_path: Path) -> None:
    head = recorded(tmp_path / "n" / "head", "spark-head-good")
    worker = recorded(tmp_path / "n" / "worker", "spark-worker-good")
    for bad in ("[1, 2]", "{not json"):
        (head / "inspect.json").write_text(bad)
        opts = Options(base_url=None, accuracy=False, window_s=0, run_root=str(tmp_path), node_timeout_s=60)
        data = build_report(
            [RecordedNode("head", head), RecordedNode("worker", worker)], opts, generated_at=WHEN
        )
        secs = {s["id"]: s for s in data["sections"]}
        assert any(w.startswith("head: could not read inspect.json") for w in secs["image"]["why"])
        assert "head" in secs["env"]["data"]["nodes"] and "head" in secs["preflight"]["data"]["nodes"]
        assert "head" in secs["stability"]["data"]["nodes"]
        render(data)


def test_a_recorded_command_of_the_wrong_shape_is_named(tmp_path: Path) -> None:
    head = recorded(tmp_path / "n" / "head", "spark-head-good")
    (head / "_cmd").unlink() if (head / "_cmd").is_symlink() else None
    (head / "_cmd").mkdir(exist_ok=True)
    (head / "_cmd" / "report-gpu.json").write_text("[]")
    (head / "_cmd" / "report-versions.json").write_text('{"stdout": "x"}')
    worker = recorded(tmp_path / "n" / "worker", "spark-worker-good")
    opts = Options(base_url=None, accuracy=False, window_s=0, run_root=str(tmp_path), node_timeout_s=60)
    data = build_report([RecordedNode("head", head), RecordedNode("worker", worker)], opts, generated_at=WHEN)
    secs = {s["id"]: s for s in data["sections"]}
    assert any("could not read _cmd/report-gpu.json" in w for w in secs["gpu"]["why"]), secs["gpu"]["why"]
    assert any("could not read _cmd/report-versions.json" in w for w in secs["image"]["why"])


def test_a_renderer_that_cannot_draw_names_it_and_the_page_is_still_written() -> None:
    report = {"schema": "sparkpair-report/1", "meta": {},
              "sections": [{"id": "kernels", "title": "Kernels", "state": "filled", "why": [],
                            "data": {"nodes": {"head": "not an object"}}}]}  # fmt: skip
    page = render(report)
    assert "could not draw this section" in page and "not an object" in page


def test_the_embedded_data_cannot_close_its_script_and_is_strict_json(tmp_path: Path) -> None:
    nasty = "</script><script>alert(1)</script><!-- \u2028 & >"
    report = {"schema": "sparkpair-report/1", "meta": {"generated_at": nasty},
              "sections": [{"id": "bench", "title": "B", "state": "filled", "why": [],
                            "data": {"x": float("nan"), "y": float("inf"), "s": nasty}}]}  # fmt: skip
    page = render(report)
    script = page[page.index('id="sparkpair-report-data">') :]
    script = script[: script.index("</script>")]
    for ch in ("<", "&", "\u2028"):
        assert ch not in script.split(">", 1)[1], ch
    assert "NaN" not in script and "Infinity" not in script
    (tmp_path / "p.html").write_text(page)
    back = read_report_data(tmp_path / "p.html")
    assert back["meta"]["generated_at"] == nasty
    assert back["sections"][0]["data"]["x"] is None and back["sections"][0]["data"]["y"] is None


def _fifo(tmp_path: Path) -> str:
    p = tmp_path / "fifo"
    os.mkfifo(p)
    return str(p)


@pytest.mark.parametrize(
    "make_args, said",
    [
        (
            lambda t: ["--private-host", "spark-a,192.168.1.1"],
            "--private-host 'spark-a,192.168.1.1'; wanted one hostname",
        ),
        (lambda t: ["--private-host", "https://spark-a:8000"], "--private-host 'https://spark-a:8000'"),
        (lambda t: ["--private-host", "me@spark-a"], "--private-host 'me@spark-a'"),
        (lambda t: ["--private-host", " "], "--private-host ' '"),
        (lambda t: ["--private-host", "."], "--private-host '.'"),
        (lambda t: ["--node-timeout", "inf"], "--node-timeout=inf; wanted seconds > 0 and <= 86400"),
        (lambda t: ["--window", "1e300"], "--window=1e+300; wanted seconds >= 0 and <= 86400"),
        (lambda t: ["--time-limit", "nan"], "--time-limit=nan; wanted seconds >= 10"),
        (lambda t: ["--time-limit", "1"], "--time-limit=1; wanted seconds >= 10 and <= 86400"),
        (lambda t: ["--base-url", "127.0.0.1:8000"], "--base-url '127.0.0.1:8000'; wanted http://host:port"),
        (lambda t: ["--node", "head=c@tcp://[::1"], "Docker URL 'tcp://[::1'"),
        (lambda t: ["--out", str(t)], "is a folder"),
        (lambda t: ["--out", "."], "--out '.'"),
        (lambda t: ["--out", ""], "--out"),
        (lambda t: ["--out", str(t / "f.txt" / "r.html")], "is a file, not a folder"),
        (lambda t: ["--out", str(t / "node.env")], "is not a sparkpair report"),
        (lambda t: ["--compare", "/dev/zero"], "--compare /dev/zero: not a regular file"),
        (lambda t: ["--compare", _fifo(t)], "not a regular file"),
        (lambda t: ["--nccl-log", _fifo(t)], "--nccl-log"),
        (lambda t: ["--compare", str(t / "list.json")], "wanted an object"),
        (lambda t: ["--compare", str(t / "nosections.json")], "'sections' is str; wanted a list"),
    ],
)
def test_bad_options_are_refused_before_gathering(tmp_path: Path, make_args, said: str) -> None:  # noqa: ANN001
    (tmp_path / "f.txt").write_text("x")
    (tmp_path / "node.env").write_text("SPARKPAIR_ROLE=head\n")
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "nosections.json").write_text('{"schema": "sparkpair-report/1", "sections": "x"}')
    # an unreachable node: were anything gathered, the run would name it (and take its time)
    rc, text = cli("--node", "head=nope-container@tcp://127.0.0.1:9", *make_args(tmp_path))
    assert rc == 2, text
    assert said in text, text
    assert "Traceback" not in text and "reading" not in text
    assert (tmp_path / "node.env").read_text() == "SPARKPAIR_ROLE=head\n"


def test_a_node_named_as_a_private_host_is_refused(tmp_path: Path) -> None:
    rc, text = cli("--node", "spark-a=c1", "--private-host", "SPARK-A")
    assert rc == 2 and "node name 'spark-a' holds the --private-host 'SPARK-A'" in text, text


def test_an_earlier_report_may_be_overwritten(tmp_path: Path) -> None:
    head = recorded(tmp_path / "n" / "head", "spark-head-good")
    worker = recorded(tmp_path / "n" / "worker", "spark-worker-good")
    out = tmp_path / "r.html"
    assert cli(*quick(head, worker, out))[0] == 0
    rc, text = cli(*quick(head, worker, out))
    assert rc == 0, text


def test_secret_names_are_any_with_a_key_token_secret_password_or_auth_part() -> None:
    from sparkpair_cli.report.model import SECRET_NAME

    for name in ("HF_TOKEN", "SPARKPAIR_SYNC_TOKEN", "AWS_SECRET_ACCESS_KEY", "OPENAI_APIKEY",
                 "MY_AUTH_HEADER", "DB_PASSWORD", "HF_TOKEN_2", "GH_TOKENS", "SPARKPAIR_API_KEY",
                 "hf_token"):  # fmt: skip
        assert SECRET_NAME.search(name), name
    for name in ("SPARKPAIR_API_KEY_FILE", "HF_HUB_DISABLE_IMPLICIT_TOKEN", "NCCL_IB_HCA", "MONKEY_BUSINESS",
                 "HF_ENDPOINT", "VLLM_KEYBOARD"):  # fmt: skip
        assert not SECRET_NAME.search(name), name

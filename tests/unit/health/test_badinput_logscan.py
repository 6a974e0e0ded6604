"""Bad input to ``sparkpair logscan``: binary/compressed/empty inputs and bad ``--json`` paths
are refused with exit 3 and a message naming the input; no traceback; no output overwritten."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from typer.testing import CliRunner


def logscan(*args: str, stdin: bytes | None = None, columns: int = 80) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["logscan", *args], input=stdin, env={"COLUMNS": str(columns)})
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    return res.exit_code, res.output.replace("\n", " ").replace("  ", " ")


FATAL = b"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"line\n\x00\x01\x02binary\n", "binary data (a NUL byte at offset 5)"),
        (gzip.compress(b"NCCL WARN whatever\n"), "gzip-compressed data"),
        (b"", "empty (0 bytes)"),
    ],
)
def test_file_that_is_not_a_text_log_exits_3(tmp_path: Path, content: bytes, fragment: str) -> None:
    f = tmp_path / "vllm.log"
    f.write_bytes(content)
    code, out = logscan(str(f))
    assert code == 3 and fragment in out and str(f) in out, out


def test_empty_stdin_exits_3() -> None:
    code, out = logscan("-", stdin=b"")
    assert code == 3 and "stdin: empty" in out, out


def test_binary_stdin_exits_3() -> None:
    code, out = logscan("-", stdin=b"\x00" * 64)
    assert code == 3 and "binary data" in out, out


def test_a_text_log_with_carriage_returns_still_scans(tmp_path: Path) -> None:
    f = tmp_path / "vllm.log"
    f.write_bytes(b"progress 1%\rprogress 2%\r\nok\n")
    code, out = logscan(str(f))
    assert code == 0 and "3 lines" in out, out


def test_json_path_that_is_a_folder_exits_3_before_scanning(tmp_path: Path) -> None:
    code, out = logscan("-", "--json", str(tmp_path), stdin=b"hello\n")
    assert code == 3 and "--json" in out and "is a folder" in out, out


def test_json_path_under_a_file_exits_3(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    code, out = logscan("-", "--json", str(tmp_path / "afile" / "f.json"), stdin=b"hello\n")
    assert code == 3 and "is a file, not a folder" in out, out


def test_two_logs_with_the_same_name_do_not_overwrite_each_others_json(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "vllm.log").write_bytes(b"all fine\n")
    (tmp_path / "b" / "vllm.log").write_bytes(FATAL)
    out_json = tmp_path / "out" / "f.json"
    code, out = logscan(
        str(tmp_path / "a" / "vllm.log"), str(tmp_path / "b" / "vllm.log"), "--json", str(out_json)
    )
    written = sorted((tmp_path / "out").glob("*.json"))
    assert len(written) == 2, (written, out)
    findings = [json.loads(p.read_text()) for p in written]
    assert findings[0] != findings[1]


@pytest.mark.parametrize(
    ("line", "shown"),
    [
        (b"EngineDeadError [/] boom\n", "EngineDeadError [/] boom"),
        (b"EngineDeadError [bold]x boom\n", "EngineDeadError [bold]x boom"),
    ],
)
def test_log_text_that_looks_like_rich_markup_is_printed_as_is(
    tmp_path: Path, line: bytes, shown: str
) -> None:
    """`[/]` in a line once crashed Rich (MarkupError, exit 1 = "fatal"); `[bold]` was swallowed."""
    f = tmp_path / "vllm.log"
    f.write_bytes(line)
    code, out = logscan(str(f), columns=400)
    assert code == 1 and "engine_dead" in out and shown in out, out


def test_a_file_name_that_looks_like_rich_markup_is_printed_as_is(tmp_path: Path) -> None:
    code, out = logscan(str(tmp_path / "no[/]such.log"))
    assert code == 3 and "no[/]such.log" in out, out


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_file_that_is_not_a_regular_file_is_refused_without_reading(tmp_path: Path, kind: str) -> None:
    """`/dev/zero` grew the scanner without bound; a FIFO with no writer blocked it forever."""
    if kind == "fifo":
        target = tmp_path / "log.fifo"
        os.mkfifo(target)
    else:
        target = Path("/dev/zero")
    code, out = logscan(str(target))
    assert code == 3 and "not a regular file" in out and str(target) in out, out


def test_an_over_long_line_is_cut_and_the_output_says_so(tmp_path: Path) -> None:
    """A line far over the cap is scanned up to the cap, the next line still scans, and a note
    (also in the JSON) says one line was cut; the scanner never holds the whole line."""
    from sparkpair_health.logscan import LINE_LIMIT_BYTES, bounded_lines

    f = tmp_path / "vllm.log"
    f.write_bytes(b"x" * (5 * LINE_LIMIT_BYTES + 7) + b"\n" + FATAL)
    with f.open("rb") as fh:
        stats: dict[str, int] = {}
        lines = list(bounded_lines(fh, stats))
    assert [len(b) for b in lines] == [LINE_LIMIT_BYTES + 1, len(FATAL)] and stats["truncated"] == 1
    out_json = tmp_path / "f.json"
    code, out = logscan(str(f), "--json", str(out_json))
    assert code == 1 and f"longer than {LINE_LIMIT_BYTES} bytes (first: line 1)" in out, out
    assert "longer than" in json.loads(out_json.read_text())["notes"][0]

"""Bad input to ``sparkpair logscan``: binary/compressed/empty inputs and bad ``--json`` paths
are refused with exit 3 and a message naming the input; no traceback; no output overwritten."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from sparkpair_cli.main import app
from typer.testing import CliRunner


def logscan(*args: str, stdin: bytes | None = None) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["logscan", *args], input=stdin)
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

"""Bad bench inputs get a clear error naming the file, what was seen and what was wanted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkpair_cli.bench.report import ResultFileError, load_result
from sparkpair_cli.bench.workload import WorkloadError, load_workload


def test_a_binary_workload_file_is_refused_as_not_utf8(tmp_path: Path) -> None:
    p = tmp_path / "bin.yaml"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(WorkloadError, match=r"not UTF-8 text \(byte 0xff at offset 0\)"):
        load_workload(str(p))


def test_a_result_file_holding_a_list_names_the_top_level_type(tmp_path: Path) -> None:
    p = tmp_path / "list.json"
    p.write_text(json.dumps([1, 2]))
    with pytest.raises(ResultFileError, match="top level is a JSON list; wanted an object with schema"):
        load_result(p)

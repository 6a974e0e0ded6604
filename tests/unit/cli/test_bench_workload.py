"""The bench workload schema: shipped workloads load, bad ones fail with the setting, value seen and value wanted."""
# ruff: noqa: E501

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from sparkpair_cli.bench.workload import (
    WORKLOADS_DIR,
    WorkloadError,
    known_workloads,
    load_workload,
    parse_workload,
)


def _base(**over: object) -> dict:
    data: dict = {
        "name": "t",
        "grid": {"context_tokens": [128], "output_tokens": [16], "concurrency": [1, 2]},
    }
    data.update(over)
    return data


def test_shipped_workloads_all_load_and_quick_fits_the_tiny_server() -> None:
    names = known_workloads()
    assert {"quick", "dsv4-pair", "dsv4-anchors"} <= set(names)
    for name in names:
        load_workload(name)
    for cell in load_workload("quick").cells():
        cell.check_fits(2048)  # the tiny-demo profile's max_model_len


def test_dsv4_pair_is_the_fields_grid_with_thinking_on_and_off() -> None:
    wl = load_workload("dsv4-pair")
    assert wl.grid.concurrency == [1, 2, 4, 6]
    assert wl.grid.context_tokens == [1024, 8192, 32768, 131072]
    assert wl.grid.thinking == ["off", "on"]
    assert wl.thinking_modes["on"].chat_template_kwargs == {"thinking": True}
    assert wl.thinking_modes["off"].chat_template_kwargs == {"thinking": False}
    assert len(wl.cells()) == 4 * 4 * 2


def test_unquoted_yaml_off_on_are_read_as_mode_names(tmp_path: Path) -> None:
    p = tmp_path / "w.yaml"
    p.write_text(
        "name: w\nthinking_modes:\n  off: {chat_template_kwargs: {thinking: false}}\n"
        "  on: {chat_template_kwargs: {thinking: true}}\n"
        "grid: {context_tokens: [8], output_tokens: [4], concurrency: [1], thinking: [off, on]}\n"
    )
    assert yaml.safe_load(p.read_text())["grid"]["thinking"] == [False, True]  # the YAML 1.1 trap
    wl = load_workload(p)
    assert [c.thinking for c in wl.cells()] == ["off", "on"]


def test_cells_are_the_cross_product_with_requests_scaled_by_concurrency() -> None:
    wl = parse_workload(_base(requests_per_user=3))
    cells = wl.cells()
    assert [c.id for c in cells] == ["ctx128-out16-c1-off", "ctx128-out16-c2-off"]
    assert [c.num_requests for c in cells] == [3, 6]


def test_seeds_are_reproducible_and_distinct_per_cell_and_phase() -> None:
    a = parse_workload(_base(seed=5)).cells()
    b = parse_workload(_base(seed=5)).cells()
    c = parse_workload(_base(seed=6)).cells()
    assert [x.seed("measured") for x in a] == [x.seed("measured") for x in b]
    seeds = {x.seed(p) for x in a for p in ("measured", "warmup")}
    assert len(seeds) == 4, "cells and phases must not share prompts (prefix cache)"
    assert a[0].seed("measured") != c[0].seed("measured")
    assert all(0 <= s < 2**31 for s in seeds)


@pytest.mark.parametrize(
    ("over", "fragment"),
    [
        ({"grid": {"context_tokens": [], "output_tokens": [1], "concurrency": [1]}}, "grid.context_tokens"),
        ({"grid": {"context_tokens": [0], "output_tokens": [1], "concurrency": [1]}}, "values [0] are outside [1,"),
        ({"grid": {"context_tokens": [8], "output_tokens": [1], "concurrency": [2, 2]}}, "lists [2] more than once"),
        ({"grid": {"context_tokens": [8], "output_tokens": [1], "concurrency": [1], "thinking": ["on"]}},
         "grid.thinking names ['on'], which are not keys of thinking_modes (known: ['off'])"),
        ({"requests_per_user": 0}, "requests_per_user: Input should be greater than or equal to 1 (seen 0)"),
        ({"warmup_requests": -1}, "warmup_requests"),
        ({"sampling": {"temperature": 3.0}}, "sampling.temperature"),
        ({"concurency": [1]}, "concurency: Extra inputs are not permitted"),
        ({"name": "has space"}, "name: String should match pattern"),
    ],
)  # fmt: skip
def test_schema_errors_name_the_setting_and_the_value(over: dict, fragment: str) -> None:
    with pytest.raises(WorkloadError) as e:
        parse_workload(_base(**over), "w.yaml")
    msg = str(e.value)
    assert msg.startswith("workload w.yaml: ")
    assert fragment in msg


def test_a_top_level_list_is_rejected() -> None:
    with pytest.raises(WorkloadError, match="top level is list; want a mapping"):
        parse_workload([1, 2], "w.yaml")


def test_missing_workload_lists_the_known_ones() -> None:
    with pytest.raises(WorkloadError) as e:
        load_workload("no-such-workload")
    assert "known workloads:" in str(e.value) and "quick" in str(e.value)
    assert str(WORKLOADS_DIR / "no-such-workload.yaml") in str(e.value)


def test_bad_yaml_is_reported(tmp_path: Path) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text("name: [unclosed\n")
    with pytest.raises(WorkloadError, match="not valid YAML"):
        load_workload(p)


def test_a_cell_too_long_for_the_server_names_cell_values_and_the_fix() -> None:
    wl = load_workload("dsv4-pair")
    big = [c for c in wl.cells() if c.context_tokens == 131072][0]
    with pytest.raises(WorkloadError) as e:
        big.check_fits(2048)
    msg = str(e.value)
    assert big.id in msg
    assert "context_tokens 131072 + output_tokens 256" in msg
    assert "max_model_len is 2048" in msg
    assert "--max-model-len >= 131392" in msg
    big.check_fits(131392)


def test_prompt_tags_are_unique_per_request_and_reproducible() -> None:
    from sparkpair_cli.bench.runner import prompt_tag

    cells = load_workload("dsv4-pair").cells()
    tags = [prompt_tag(c, ph, f"x-{i}") for c in cells for ph in ("measured", "warmup") for i in range(12)]
    assert len(set(tags)) == len(tags)
    assert all(t.startswith("#") and len(t) == 9 for t in tags)
    assert prompt_tag(cells[0], "measured", "x-0") == tags[0]

"""Plan JSON writing and probe-file reading in the plugin (no vLLM process needed)."""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path

import pytest
from sparkpair_overlay import plugin
from sparkpair_overlay.plan import KernelPlan, PlanError, ProbeResults, build_plan
from sparkpair_overlay.serve_matrix import Switches


def _plan():
    return build_plan(
        vllm_version="0.32.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
    )


def test_write_plan_is_atomic_and_repeatable(tmp_path):
    target = tmp_path / "sub" / "kernel-plan.json"
    plugin.write_plan(_plan(), str(target))
    first = target.read_bytes()
    plugin.write_plan(_plan(), str(target))  # a second process writes the same bytes
    assert target.read_bytes() == first
    assert json.loads(first)["o_proj"]["label"] == "triton(1,1,128)"
    assert [p.name for p in target.parent.iterdir()] == ["kernel-plan.json"]


def test_write_plan_to_an_unwritable_place_logs_and_does_not_raise(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with caplog.at_level(logging.ERROR):
        plugin.write_plan(_plan(), str(blocker / "plan.json"))
    assert "SPARKPAIR_PLAN_PATH" in caplog.text and str(blocker) in caplog.text


def test_empty_plan_path_writes_nothing(tmp_path):
    plugin.write_plan(_plan(), "")
    assert list(tmp_path.iterdir()) == []


def test_probe_file_problems_become_notes_not_crashes(tmp_path):
    probe, notes = plugin.load_probe_results(str(tmp_path / "missing.json"))
    assert probe is None and "does not exist" in notes[0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "nope"}')
    probe, notes = plugin.load_probe_results(str(bad))
    assert probe is None and 'schema="nope"' in notes[0]
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {
                "schema": "sparkpair-probe/2",
                "capability": [12, 1],
                "router": [],
                "o_proj": [{"backend": "triton", "recipe": [1, 128, 128], "t": 1, "ok": True, "us": 3.0,
                            "weight_layout": "w3-ue8m0-row", "act_layout": "a-fp32-tma"}],
            }
        )
    )
    probe, notes = plugin.load_probe_results(str(good))
    assert notes == [] and probe is not None and probe.o_proj[0].recipe == (1, 128, 128)


@pytest.mark.parametrize("env", [{"SPARKPAIR_ROUTER": "fast"}, {"SPARKPAIR_FAKE_CAPABILITY": "gb10"}])
def test_make_plan_refuses_bad_settings(env):
    from sparkpair_overlay.envs import EnvError

    with pytest.raises(EnvError):
        plugin.make_plan(env)


def _probed_plan():
    probe = ProbeResults.from_json(
        {
            "schema": "sparkpair-probe/2",
            "capability": [12, 1],
            "router": [
                {
                    "path": "triton-bf16-lowM",
                    "weight_dtype": "bfloat16",
                    "m": m,
                    "ok": True,
                    "us": 5.0 if m <= 64 else 50.0,
                    "shape": [256, 4096],
                    "layout": "x-bf16-rowmajor/w-bf16-rowmajor",
                }
                for m in (1, 64, 512)
            ]
            + [
                {
                    "path": "cublas",
                    "weight_dtype": "bfloat16",
                    "m": m,
                    "ok": True,
                    "us": 10.0,
                    "shape": [256, 4096],
                    "layout": "x-bf16-rowmajor/w-bf16-rowmajor",
                }
                for m in (1, 64, 512)
            ],
            "o_proj": [{"backend": "triton", "recipe": [1, 1, 128], "t": 1, "ok": True, "us": 3.0,
                        "weight_layout": "w3-ue8m0-row", "act_layout": "a-ue8m0-tma"}],
            "switches": Switches().to_json(),
        },
        "probe",
    )
    return build_plan(
        vllm_version="0.33.0",
        version_verified=True,
        allow_unverified=False,
        platform="cuda",
        capability=(12, 1),
        probe=probe,
        router_mode="auto",
        settings={"SPARKPAIR_ROUTER": "auto"},
        notes=["a note"],
    )


@pytest.mark.parametrize("make", [_plan, _probed_plan])
def test_a_plan_read_back_from_its_json_is_the_same_plan_and_decides_the_same(tmp_path, make):
    plan = make()
    f = tmp_path / "kernel-plan.json"
    plugin.write_plan(plan, str(f))
    back = KernelPlan.load(f)
    assert back == plan and back.dumps() == plan.dumps()
    assert back.probe == plan.probe
    assert back.router_decision("bfloat16", (256, 4096)) == plan.router_decision("bfloat16", (256, 4096))


def test_probe_results_round_trip_through_their_json():
    probe = _probed_plan().probe
    assert probe is not None and ProbeResults.from_json(probe.to_json()) == probe


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [
        (lambda d: d.pop("vllm_version"), "vllm_version is missing; wanted a string"),
        (lambda d: d.update(version_verified="yes"), 'version_verified="yes"; wanted true or false'),
        (lambda d: d["router"]["float32"].update(path="fast"), 'router.float32.path="fast"; wanted one of'),
        (
            lambda d: d["router"]["bfloat16"].update(max_m="32"),
            'router.bfloat16.max_m="32"; wanted an integer',
        ),
        (lambda d: d["o_proj"].update(recipe=[1, 128]), "o_proj.recipe=[1, 128]; wanted null or a list of 3"),
        (lambda d: d.update(notes="x"), 'notes="x"; wanted a list of strings'),
        (
            lambda d: d.update(
                probe={"schema": "sparkpair-probe/2", "capability": [12, 1], "router": [{"m": 1}]}
            ),
            "router[0].path is missing",
        ),
    ],
)
def test_a_bad_plan_file_names_the_file_the_key_the_value_and_what_was_wanted(tmp_path, edit, fragment):
    data = json.loads(_probed_plan().dumps())
    edit(data)
    f = tmp_path / "kernel-plan.json"
    f.write_text(json.dumps(data))
    with pytest.raises(PlanError) as e:
        KernelPlan.load(f)
    assert str(f) in str(e.value) and fragment in str(e.value), str(e.value)


def test_the_health_suite_fails_a_json_file_that_is_not_a_kernel_plan(tmp_path):
    from sparkpair_health.report import Report
    from sparkpair_health.suite import SuiteSettings, _load_plan

    f = tmp_path / "plan.json"
    f.write_text('{"schema": "sparkpair-kernel-plan/1", "router": "upstream"}')
    report = Report(base_url="http://127.0.0.1:9", served_model_name="m", profile="p")
    res = _load_plan(SuiteSettings(base_url="http://127.0.0.1:9", plan_file=f), report)
    assert res.status == "fail" and str(f) in res.message and 'router="upstream"' in res.message, res.message
    f.write_text(_plan().dumps())
    res = _load_plan(SuiteSettings(base_url="http://127.0.0.1:9", plan_file=f), report)
    assert res.status == "pass" and report.overlay_plan == _plan().to_json()


def test_the_old_probe_variable_is_refused_naming_the_new_one():
    from sparkpair_overlay import envs

    with pytest.raises(envs.EnvError, match="SPARKPAIR_PROBE_PLAN=.*wanted SPARKPAIR_PROBE_RESULTS"):
        envs.read_all({"SPARKPAIR_PROBE_PLAN": "/tmp/probe.json"})
    assert envs.read("SPARKPAIR_PROBE_RESULTS", {"SPARKPAIR_PROBE_RESULTS": "/x.json"}) == "/x.json"


def test_a_plan_file_that_is_a_device_a_fifo_huge_or_deeply_nested_is_named_not_read_whole(
    tmp_path: Path,
) -> None:
    import os

    from sparkpair_overlay.jsonio import MAX_JSON_BYTES
    from sparkpair_overlay.plan import KernelPlan, PlanError

    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    huge = tmp_path / "huge.json"
    huge.write_bytes(b" " * (MAX_JSON_BYTES + 1))
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    for path, why in (
        (tmp_path, "not a regular file"),  # a folder: once "IsADirectoryError: ... Is a directory: 3"
        ("/dev/zero", "not a regular file"),
        (fifo, "not a regular file"),
        (huge, f"larger than {MAX_JSON_BYTES} bytes"),
        (deep, "not readable JSON (RecursionError)"),
    ):
        with pytest.raises(PlanError, match=re.escape(why)):
            KernelPlan.load(path, "plan file")


def test_probe_results_with_two_rows_for_one_measurement_are_refused() -> None:
    """A failed row followed by a passing row of the same shape must not read as a pass."""
    row = {"path": "triton-bf16-lowM", "weight_dtype": "bfloat16", "m": 8, "us": 1.0, "shape": [256, 4096],
           "layout": "x-bf16-rowmajor/w-bf16-rowmajor"}
    data = {
        "schema": "sparkpair-probe/2",
        "capability": [12, 1],
        "router": [{**row, "ok": False}, {**row, "ok": True}],
        "o_proj": [],
    }
    with pytest.raises(PlanError, match=r"two rows for \('triton-bf16-lowM', 'bfloat16', 8, "):
        ProbeResults.from_json(data, "probe.json")
    data["router"] = [{**row, "m": -5, "ok": True}]
    with pytest.raises(PlanError, match="token counts >= 1"):
        ProbeResults.from_json(data, "probe.json")


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [
        ("capability", [-1, 1], "1 <= MAJOR <= 99"),
        ("capability", [12, -1], "0 <= MINOR <= 99"),
        ("capability", [1200, 1], "1 <= MAJOR <= 99"),
        ("margin", float("nan"), "a fraction in [0, 1)"),
        ("margin", -0.5, "a fraction in [0, 1)"),
        ("margin", 1.0, "a fraction in [0, 1)"),
    ],
)
def test_a_probe_file_with_an_impossible_capability_or_margin_is_refused(field, value, wanted) -> None:
    data = {"schema": "sparkpair-probe/2", "capability": [12, 1], "router": [], "o_proj": [], "margin": 0.08}
    assert ProbeResults.from_json(data, "probe.json").margin == 0.08
    data[field] = value
    with pytest.raises(PlanError) as e:
        ProbeResults.from_json(data, "probe.json")
    msg = str(e.value)
    assert "probe.json" in msg and field in msg and wanted in msg, msg

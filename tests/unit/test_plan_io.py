"""Plan JSON writing and probe-file reading in the plugin (no vLLM process needed)."""

from __future__ import annotations

import json
import logging

import pytest
from sparkpair_overlay import plugin
from sparkpair_overlay.plan import build_plan


def _plan():
    return build_plan(vllm_version="0.32.0", version_verified=True, allow_unverified=False,
                      platform="cuda", capability=(12, 1))


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
    probe, notes = plugin._load_probe(str(tmp_path / "missing.json"))
    assert probe is None and "does not exist" in notes[0]
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "nope"}')
    probe, notes = plugin._load_probe(str(bad))
    assert probe is None and "schema='nope'" in notes[0]
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"schema": "sparkpair-probe/1", "capability": [12, 1], "router": [],
                                "o_proj": [{"backend": "triton", "recipe": [1, 128, 128], "t": 1, "ok": True,
                                            "us": 3.0}]}))
    probe, notes = plugin._load_probe(str(good))
    assert notes == [] and probe is not None and probe.o_proj[0].recipe == (1, 128, 128)


@pytest.mark.parametrize("env", [{"SPARKPAIR_ROUTER": "fast"}, {"SPARKPAIR_FAKE_CAPABILITY": "gb10"}])
def test_make_plan_refuses_bad_settings(env):
    from sparkpair_overlay.envs import EnvError

    with pytest.raises(EnvError):
        plugin.make_plan(env)

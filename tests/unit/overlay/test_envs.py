"""The SPARKPAIR_* registry: defaults, parsing, and errors that name variable, value and wants."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sparkpair_overlay import envs

OVERLAY = Path(__file__).resolve().parents[3] / "overlay" / "sparkpair_overlay"


def test_defaults_when_nothing_is_set():
    v = envs.read_all({})
    assert v["SPARKPAIR_ROUTER"] == "auto"
    assert v["SPARKPAIR_O_PROJ"] == "auto"
    assert v["SPARKPAIR_ROUTER_MAX_M"] is None
    assert v["SPARKPAIR_O_PROJ_RECIPE"] is None
    assert v["SPARKPAIR_PLAN_PATH"] == "/tmp/sparkpair/kernel-plan.json"
    assert v["SPARKPAIR_PROBE_RESULTS"] == ""
    assert v["SPARKPAIR_ALLOW_UNVERIFIED_VLLM"] is False
    assert v["SPARKPAIR_FAKE_CAPABILITY"] == ""


@pytest.mark.parametrize(
    "name,raw,want",
    [
        ("SPARKPAIR_ROUTER", "Triton", "triton"),
        ("SPARKPAIR_ROUTER", " upstream ", "upstream"),
        ("SPARKPAIR_O_PROJ", "deepgemm", "deepgemm"),
        ("SPARKPAIR_O_PROJ", "", "auto"),
        ("SPARKPAIR_ROUTER_MAX_M", "16", 16),
        ("SPARKPAIR_O_PROJ_RECIPE", "1,128,128", (1, 128, 128)),
        ("SPARKPAIR_O_PROJ_RECIPE", "(1, 1, 128)", (1, 1, 128)),
        ("SPARKPAIR_ALLOW_UNVERIFIED_VLLM", "1", True),
        ("SPARKPAIR_ALLOW_UNVERIFIED_VLLM", "false", False),
        ("SPARKPAIR_FAKE_CAPABILITY", "12.1", (12, 1)),
        ("SPARKPAIR_FAKE_CAPABILITY", "cpu", None),
        ("SPARKPAIR_PLAN_PATH", "", ""),
    ],
)
def test_values_parse(name, raw, want):
    assert envs.read(name, {name: raw}) == want


@pytest.mark.parametrize(
    "name,raw",
    [
        ("SPARKPAIR_ROUTER", "cutlass"),
        ("SPARKPAIR_O_PROJ", "b12x"),
        ("SPARKPAIR_ROUTER_MAX_M", "0"),
        ("SPARKPAIR_ROUTER_MAX_M", "lots"),
        ("SPARKPAIR_O_PROJ_RECIPE", "1,1,32"),
        ("SPARKPAIR_ALLOW_UNVERIFIED_VLLM", "maybe"),
        ("SPARKPAIR_FAKE_CAPABILITY", "sm_121"),
        ("SPARKPAIR_FAKE_CAPABILITY", "12"),
    ],
)
def test_bad_values_raise_naming_variable_value_and_wants(name, raw):
    with pytest.raises(envs.EnvError) as e:
        envs.read(name, {name: raw})
    msg = str(e.value)
    assert name in msg and repr(raw) in msg and "wanted" in msg
    assert envs.REGISTRY[name].wanted in msg


def test_unknown_name_is_a_key_error():
    with pytest.raises(KeyError):
        envs.read("SPARKPAIR_NOPE", {})


def test_every_sparkpair_variable_in_the_overlay_is_registered():
    """No module reads a SPARKPAIR_* name that the registry does not define."""
    used: set[str] = set()
    for path in OVERLAY.rglob("*.py"):
        # settings_registry.py is the table of every setting sparkpair has (it reads none of them).
        if "kernels" in path.parts or path.name == "settings_registry.py":
            continue
        used |= set(re.findall(r"SPARKPAIR_[A-Z0-9_]+", path.read_text()))
    assert used, "the scan found nothing: the test would pass vacuously"
    known = set(envs.REGISTRY) | set(envs.RENAMED)  # a renamed one is named only to refuse it
    assert used <= known, sorted(used - known)


def test_only_envs_reads_os_environ_for_sparkpair_settings():
    for path in OVERLAY.rglob("*.py"):
        if "kernels" in path.parts or path.name == "envs.py":
            continue
        text = path.read_text()
        assert not re.search(r"environ(\.get)?\(?\[?[\"']SPARKPAIR_", text), path

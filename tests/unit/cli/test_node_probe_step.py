"""``sparkpair node``'s probe step stops the node before vLLM starts (exit 3, the message naming the
cause and the way out) on an unverified vLLM on family 120 and on switches the overlay would refuse to
build DeepSeek-V4 with; it starts vLLM otherwise. The probe JSON is what ``sparkpair probe`` writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from sparkpair_cli import cmd_node
from sparkpair_cli.deploy.nodeenv import load_node_env_file
from sparkpair_overlay.serve_matrix import Switches
from sparkpair_serving.profile import load_profile

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures/hosts/spark-head-good/node.env"


@pytest.fixture(autouse=True)
def _vendored_deepgemm(monkeypatch):
    """The image's vLLM vendors DeepGEMM (this venv's has none)."""
    import sparkpair_overlay.deepgemm as dg

    found = ("vendored", "vllm.third_party.deep_gemm 2.8.1")
    monkeypatch.setattr(dg, "deepgemm_found", lambda *a, **k: found)


def _probe_file(tmp_path: Path, *, cap=(12, 1), vllm="0.33.0", linear="auto", decision=None) -> Path:
    rows = [
        {
            "backend": "triton",
            "recipe": [1, 1, 128],
            "t": t,
            "ok": True,
            "us": 5.0,
            "weight_layout": "w3-ue8m0-row" if linear == "auto" else "w2-e8m0-block",
            "act_layout": "a-ue8m0-tma",
        }
        for t in (1, 36)
    ]
    p = tmp_path / "probe.json"
    p.write_text(
        json.dumps(
            {
                "schema": "sparkpair-probe/2",
                "capability": list(cap),
                "vllm": vllm,
                "switches": Switches(linear_backend=linear).to_json(),
                "o_proj": rows,
                "o_proj_decision": decision,
                "serve_choice": None,
            }
        )
    )
    return p


def _run(tmp_path: Path, probe: Path, base_env: dict[str, str] | None = None, args: list[str] | None = None):
    profile = load_profile("deepseek-v4-flash")
    if args is not None:
        server = profile.server.model_copy(update={"args": [*profile.server.args, *args]})
        profile = profile.model_copy(update={"server": server})
    return cmd_node._apply_probe(load_node_env_file(FIXTURE), profile, probe, dict(base_env or {}))


def test_an_unverified_vllm_on_gb10_stops_the_node_naming_version_and_override(tmp_path, capsys):
    with pytest.raises(typer.Exit) as e:
        _run(tmp_path, _probe_file(tmp_path, vllm="0.35.0"))
    assert e.value.exit_code == cmd_node.EXIT_PREFLIGHT
    err = " ".join(capsys.readouterr().err.split())
    assert "vLLM 0.35.0 is not a verified version" in err and "SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1" in err
    assert "not starting" in err


def test_the_override_or_another_gpu_lets_it_start(tmp_path):
    env, _ = _run(tmp_path, _probe_file(tmp_path, vllm="0.35.0"), {"SPARKPAIR_ALLOW_UNVERIFIED_VLLM": "1"})
    assert env["SPARKPAIR_PROBE_RESULTS"].endswith("probe.json")
    _run(tmp_path, _probe_file(tmp_path, vllm="0.35.0", cap=(9, 0)))  # off family 120: a no-op overlay


def test_switches_the_overlay_would_refuse_stop_the_node_before_vllm(tmp_path, capsys):
    with pytest.raises(typer.Exit) as e:
        _run(tmp_path, _probe_file(tmp_path), {"VLLM_USE_DEEP_GEMM": "0"})
    assert e.value.exit_code == cmd_node.EXIT_PREFLIGHT
    assert "VLLM_USE_DEEP_GEMM=0 with --linear-backend auto" in " ".join(capsys.readouterr().err.split())
    # the probe decided on the 2-D layout (--linear-backend triton), the profile says deep_gemm: refused
    dec = {"backend": "triton", "recipe": [1, 1, 128], "weight_layout": "w2-e8m0-block", "reason": "t"}
    with pytest.raises(typer.Exit):
        _run(
            tmp_path,
            _probe_file(tmp_path, linear="triton", decision=dec),
            args=["--linear-backend", "deep_gemm"],
        )
    assert "was not proven on these operands" in " ".join(capsys.readouterr().err.split())
    # with the probe's own switches it starts
    _run(tmp_path, _probe_file(tmp_path, linear="triton", decision=dec), args=["--linear-backend", "triton"])


def test_a_probe_file_the_node_cannot_read_stops_it_naming_the_file(tmp_path, capsys):
    p = tmp_path / "probe.json"
    p.write_text('{"schema": "sparkpair-probe/1", "capability": null}')
    with pytest.raises(typer.Exit) as e:
        _run(tmp_path, p)
    assert e.value.exit_code == cmd_node.EXIT_PREFLIGHT
    err = " ".join(capsys.readouterr().err.split())
    assert f"probe JSON={p}" in err and "run sparkpair probe again" in err and "not starting" in err


def test_a_probe_file_without_a_capability_starts_vllm_with_the_profiles_args(tmp_path):
    p = tmp_path / "probe.json"
    p.write_text('{"schema": "sparkpair-probe/2", "capability": null, "vllm": null, "serve_choice": null}')
    env, profile = _run(tmp_path, p)
    assert env["SPARKPAIR_PROBE_RESULTS"] == str(p)
    assert list(profile.server.args) == list(load_profile("deepseek-v4-flash").server.args)


def test_a_probe_value_that_reads_as_console_markup_is_shown_as_written(tmp_path, capsys):
    # The probe file's text reaches the message verbatim: "[/red]" once raised rich's MarkupError
    # (a traceback instead of the stop) and "[bold]" vanished from the value seen.
    for vllm in ("0.35[/red]", "[bold]0.35"):
        with pytest.raises(typer.Exit) as e:
            _run(tmp_path, _probe_file(tmp_path, vllm=vllm))
        assert e.value.exit_code == cmd_node.EXIT_PREFLIGHT
        err = " ".join(capsys.readouterr().err.split())
        assert f"vLLM {vllm} is not a verified version" in err and "not starting" in err

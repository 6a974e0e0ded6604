# ruff: noqa: E501
"""The all-reduce log parser and verdict, on recorded real NCCL output and on a real
two-process run of the test script (gloo on CPU; NCCL needs GPUs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sparkpair_cli.preflight import nccl

LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "nccl-logs"


def test_ib_init_lines_give_the_transport_and_devices() -> None:
    log = nccl.parse_log((LOGS / "horovod-2node-ib.log").read_text())
    assert log.networks == {"IB"}
    assert log.via == {"NET/IB": 8}
    assert log.ib_devices == ["mlx4_0"]
    assert log.nranks == 2


def test_the_allreduce_table_is_read_and_its_busbw_arithmetic_holds() -> None:
    log = nccl.parse_log((LOGS / "kubeflow-a800-24rank-allreduce.log").read_text())
    assert log.nranks == 24
    assert [r.size for r in log.rows] == [536870912, 1073741824, 2147483648]
    assert log.rows[-1].busbw == 42.31 and log.avg_busbw == pytest.approx(41.6967)
    for r in log.rows:  # busbw = algbw x 2(n-1)/n, as nccl-tests computes it
        assert r.algbw * nccl.bus_factor(24) == pytest.approx(r.busbw, abs=0.02)


def test_an_ib_log_with_its_table_passes_and_a_floor_above_it_fails() -> None:
    text = (LOGS / "horovod-2node-ib.log").read_text() + (
        LOGS / "kubeflow-a800-24rank-allreduce.log"
    ).read_text()
    log = nccl.parse_log(text)
    log.nranks = 24  # the table's run; the init lines are from a 2-rank run
    ok = nccl.judge(log, floor_gbps=15.0, want_hcas=["mlx4_0"])
    assert ok.ok, ok.message
    bad = nccl.judge(log, floor_gbps=50.0)
    assert not bad.ok and "busbw at 2147483648 B = 42.31 GB/s; wanted >= 50.00 GB/s" in bad.message


def test_a_socket_run_is_refused() -> None:
    v = nccl.judge(nccl.parse_log((LOGS / "v100-2node-socket-broadcast.log").read_text()), floor_gbps=15.0)
    assert not v.ok and "wanted channels via NET/IB" in v.message
    fake_socket = "h:1:2 [0] NCCL INFO NET/Socket : Using [0]enP7s7:10.0.0.1<0>\nh:1:2 [0] NCCL INFO Using network Socket\n"  # noqa: E501
    v = nccl.judge(nccl.parse_log(fake_socket), floor_gbps=15.0)
    assert not v.ok and "wanted none via NET/Socket" in v.message


def test_a_missing_twin_hca_is_named() -> None:
    v = nccl.judge(
        nccl.parse_log(
            (LOGS / "horovod-2node-ib.log").read_text()
            + (LOGS / "kubeflow-a800-24rank-allreduce.log").read_text()
        ),
        floor_gbps=1.0,
        want_hcas=["mlx4_0", "mlx4_1"],
    )
    assert not v.ok and "missing ['mlx4_1']" in v.message


def test_a_table_whose_busbw_disagrees_with_algbw_is_refused() -> None:
    text = (LOGS / "kubeflow-a800-24rank-allreduce.log").read_text().replace("42.31", "52.31", 1)
    v = nccl.judge(nccl.parse_log(text), floor_gbps=1.0, transport="IB")
    assert "wanted algbw 22.08 x 2(n-1)/n (n=24) = 42.32" in v.message


@pytest.mark.parametrize(("text", "ok"), [("1G", 1 << 30), ("256M", 256 << 20), ("4G", 4 << 30)])
def test_sizes_parse(text: str, ok: int) -> None:
    assert nccl.parse_size(text) == ok


def test_buffers_above_the_cap_are_refused() -> None:
    with pytest.raises(ValueError, match="16 GB run froze"):
        nccl.parse_size("16G")


@pytest.mark.slow
def test_the_test_script_runs_two_real_ranks_and_its_table_parses(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    argv = [
        sys.executable,
        "-m",
        "sparkpair_cli.preflight.allreduce",
        "--world",
        "2",
        "--master",
        f"127.0.0.1:{port}",
        "--backend",
        "gloo",
        "--min-bytes",
        str(1 << 20),
        "--max-bytes",
        str(4 << 20),
        "--iters",
        "3",
        "--warmup",
        "1",
    ]
    procs = [
        subprocess.Popen(
            [*argv, "--rank", str(r)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        for r in (0, 1)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    log = nccl.parse_log(outs[0])
    assert log.nranks == 2 and [r.size for r in log.rows] == [1 << 20, 2 << 20, 4 << 20]
    assert all(r.wrong == 0 for r in log.rows)
    for r in log.rows:
        assert r.busbw == pytest.approx(r.algbw * nccl.bus_factor(2), abs=0.011)
    v = nccl.judge(log, floor_gbps=0.0, transport="IB")
    assert not v.ok and "NET/IB" in v.message  # gloo has no NCCL data path: never a pass


def test_the_cli_parses_a_recorded_log_and_exits_by_the_verdict(tmp_path: Path) -> None:
    import typer
    from sparkpair_cli import cmd_preflight
    from typer.testing import CliRunner

    app = typer.Typer()
    cmd_preflight.register(app)
    log = tmp_path / "run.log"
    log.write_text(
        (LOGS / "horovod-2node-ib.log").read_text()
        + (LOGS / "kubeflow-a800-24rank-allreduce.log").read_text()
    )
    ok = CliRunner().invoke(
        app, ["nccl-allreduce", "--parse", str(log), "--floor-gbps", "15", "--hcas", "mlx4_0"]
    )
    assert ok.exit_code == 0 and "via NET/IB" in ok.output
    bad = CliRunner().invoke(app, ["nccl-allreduce", "--parse", str(log), "--hcas", "mlx4_0,mlx4_1"])
    assert bad.exit_code == 1 and "missing ['mlx4_1']" in bad.output


def test_the_cli_says_it_waits_and_a_cpu_only_torch_is_named_not_waited_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sparkpair_cli.main import app
    from typer.testing import CliRunner

    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    env_file = Path(__file__).resolve().parents[3] / "configs" / "node.env.example"
    r = CliRunner().invoke(app, ["nccl-allreduce", "--env-file", str(env_file)])
    out = " ".join(r.output.split())
    assert r.exit_code == 1, r.output
    assert "waiting for the other node at 192.168.177.11:29599" in out, r.output
    assert "--backend nccl needs a CUDA device" in out, r.output
    log = (tmp_path / "sparkpair-nccl-allreduce.log").read_text()
    assert "--backend nccl needs a CUDA device" in log, log


def test_a_rank_that_never_finishes_is_stopped_at_the_timeout_with_a_line_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sparkpair_cli.deploy.nodeenv import load_node_env_file

    env = load_node_env_file(Path(__file__).resolve().parents[3] / "configs" / "node.env.example")
    # Fault: a rank whose peer never joins (the real rank needs a second node and NCCL).
    monkeypatch.setattr(
        nccl, "allreduce_argv", lambda *a, **k: [sys.executable, "-c", "import time; time.sleep(60)"]
    )
    monkeypatch.setenv("SPARKPAIR_NCCL_TIMEOUT_S", "1")
    log = nccl.run_allreduce(env, port=29599, max_bytes=1 << 20, environ={})
    assert "no result within SPARKPAIR_NCCL_TIMEOUT_S=1 s" in log, log

"""The all-reduce check against a real two-rank run of our own test script (2x H200, NCCL 2.28.9).

The run forced NCCL's network transport (NCCL_P2P_DISABLE=1, NCCL_SHM_DISABLE=1); that host
has no RDMA device, so NCCL fell back to sockets. The log is exactly what a Spark pair
with a broken RoCE setup prints, so the preflight must refuse it and say why.
"""

from __future__ import annotations

from pathlib import Path

from sparkpair_cli.preflight.nccl import bus_factor, judge, parse_log

LOG = Path(__file__).resolve().parents[2] / "fixtures/hosts/nccl-logs/h200x2-socket-allreduce-rank0.log"


def test_the_real_h200_run_parses_with_its_transport_table_and_bus_factor() -> None:
    log = parse_log(LOG.read_text())
    assert log.via.get("NET/Socket", 0) >= 2 and not log.via.get("NET/IB")
    assert "Socket" in log.networks
    assert [r.size for r in log.rows] == [8 << 20 << i for i in range(6)]
    assert all(r.wrong == 0 for r in log.rows)
    # two ranks: bus factor 2(n-1)/n = 1, so busbw == algbw in every row
    assert bus_factor(2) == 1.0
    assert all(abs(r.busbw - r.algbw) < 0.011 for r in log.rows)
    assert log.avg_busbw is not None and 3.0 < log.avg_busbw < 5.0


def test_a_socket_data_path_fails_the_preflight_naming_the_transport() -> None:
    log = parse_log(LOG.read_text())
    if not log.nranks:
        log.nranks = 2
    verdict = judge(log, floor_gbps=1.0, node="h200x2")
    assert not verdict.ok
    assert "NET/Socket" in verdict.message and "wanted channels via NET/IB" in verdict.message


def test_the_same_run_passes_when_sockets_are_what_was_asked_for_and_fails_a_higher_floor() -> None:
    log = parse_log(LOG.read_text())
    assert judge(log, floor_gbps=1.0, transport="Socket", node="h200x2").ok
    slow = judge(log, floor_gbps=20.0, transport="Socket", node="h200x2")
    assert not slow.ok and "wanted >= 20.00 GB/s" in slow.message

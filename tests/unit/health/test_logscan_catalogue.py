# ruff: noqa: E501  (log lines are quoted whole)
"""The log-scan catalogue: every pattern matches its field report's wording, and only that.

Lines marked "field" are the fragments field-bugs.md quotes for the scanner (§2, §4); lines
marked "vllm" were captured from vLLM 0.32's CPU server (tests/vllm_real covers real logs).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sparkpair_health.logscan import CATALOGUE, Pattern, scan_lines, scan_text

SAMPLES = {
    "ptxas_arch": "triton.runtime.errors.PTXASError: PTXAS error: Internal Triton PTX codegen error: "
    "ptxas fatal   : Value 'sm_121a' is not defined for option 'gpu-name'",
    "e8m0_keyerror": "(EngineCore_DP0 pid=41) ERROR KeyError: 'float8_e8m0fnu'",
    "nccl_system_error": "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error",
    "ibv_reg_mr_enomem": "NCCL WARN Call to ibv_reg_mr_iova2 failed with error Cannot allocate memory",
    # NCCL 2.28.9's own line (tests/fixtures/hosts/nccl-logs/h200x2-socket-allreduce-rank0.log)
    "nccl_socket_transport": "vm:565:565 [0] NCCL INFO Using network Socket",
    "engine_dead": "(APIServer pid=8579) WARNING 11-29 22:58:57 [core_client.py:817] [shutdown] MPClient: "
    "engine core exited unexpectedly; starting cleanup",
    "engine_start_failed": "RuntimeError: Engine core initialization failed. See root cause above.",
    "ray_channel_timeout": "ray.exceptions.RayChannelTimeoutError: System error: Timed out waiting for object",
    "sample_tokens_timeout": "TimeoutError: RPC call to sample_tokens timed out.",
    "illegal_memory_access": "torch.AcceleratorError: CUDA error: an illegal memory access was encountered",
    "nccl_watchdog_timeout": "[Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE)",
    "nvrm_no_memory": "kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: NV_ERR_NO_MEMORY",
    "nvrm_xid": "kernel: NVRM: Xid (PCI:000f:01:00): 13, pid=1234, Graphics SM Warp Exception",
    "shm_segment": "NCCL WARN Error while creating shared memory segment /dev/shm/nccl-abc (size 9637888)",
    "cuda_oom": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "engine_traceback": "(EngineCore_DP0 pid=9067) Traceback (most recent call last):",
    "semlock_missing": "FileNotFoundError: [Errno 2] No such file or directory: '/dev/shm/sem.mp-abc'",
    "shm_broadcast_starved": "(EngineCore_DP0 pid=77) INFO shm_broadcast.py:466 No available shared memory broadcast "
    "block found in 60 seconds. This typically happens when some processes are hanging.",
    "placement_group_wait": "INFO ray_utils.py:340 Waiting for creating a placement group of specs for 50 seconds.",
    "startup_memory_check": "ValueError: Free memory on device cuda:0 (98.2/121.7 GiB) on startup is less than "
    "desired GPU memory utilization (0.85, 103.4 GiB).",
    "jit_during_inference": "WARNING jit_monitor.py:88 Triton kernel JIT compilation during inference: _fwd_kernel",
    "tool_args_decode": "(APIServer pid=8579) ERROR 11-29 22:53:26 [hermes_tool_parser.py:190] Error in extracting "
    "tool call from response.",
    # DeepGEMM lines: its DGException text is "<name> error (<file>:<line>): <message>"
    # (tests/unit/health/test_logscan_deepgemm.py has the near misses; tests/stack shows the texts exist).
    "deepgemm_sf_transform": "(EngineCore_DP0 pid=52) RuntimeError: Assertion error (csrc/apis/layout.hpp:118): "
    "Unknown SF transformation",
    "deepgemm_arch": "RuntimeError: Assertion error (csrc/apis/gemm.hpp:201): Unsupported architecture or scaling "
    "factor types",
    "deepgemm_host_assert": "(Worker_TP1 pid=77) RuntimeError: Assertion error (csrc/apis/layout.hpp:64): "
    "sf.stride(-1) % 4 == 0",
    "deepgemm_device_assert": "Assertion failed: /root/.cache/vllm/deep_gemm/cache/kernel.sm120_fp8_fp4_gemm_1d1d/"
    "kernel.cu:212, condition: num_former_iters >= 0",
    "deepgemm_scale_dtype": "AssertionError: Expected tensor scales dtype to be torch.float32 or "
    "torch.float8_e8m0fnu or torch.uint8, got torch.bfloat16 instead",
    "deepgemm_unavailable": "RuntimeError: DeepGEMM backend is unavailable in the current vLLM environment, or the "
    "available DeepGEMM package does not provide the required APIs for these kernels.",
    "deepgemm_import_failed": "(EngineCore_DP0 pid=52) WARNING 12-01 17:02:11 [deep_gemm.py:215] Failed to import "
    "vendored deep_gemm: Could not load this library: /usr/local/lib/python3.12/dist-packages/vllm/third_party/"
    "deep_gemm/_C_extension.abi3.so",
}

HEALTHY = [
    "(APIServer pid=8579) INFO 11-29 22:52:35 [api_server.py:1000] Starting vLLM API server 0 on http://127.0.0.1:18123",
    '(APIServer pid=8579) INFO:     127.0.0.1:42338 - "GET /health HTTP/1.1" 200 OK',
    "(EngineCore pid=9067) INFO 11-29 22:52:35 [utils.py:347] Using LBHNC KV cache layout.",
    "(Worker pid=9120) INFO 11-29 22:52:35 [cpu_model_runner.py:87] Warming up model for the compilation...",
    "(APIServer pid=8579) INFO 11-29 22:58:04 [loggers.py:335] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    "(APIServer pid=1) ERROR [serving.py:1] Traceback (most recent call last):",
    "sparkpair overlay plan: router=upstream o_proj=upstream",
]


def test_every_pattern_has_a_sample_and_every_sample_matches_only_its_pattern() -> None:
    assert set(SAMPLES) == {p.id for p in CATALOGUE}
    for pid, line in SAMPLES.items():
        ids = scan_lines([line]).ids()
        assert pid in ids, (pid, ids)
        extra = set(ids) - {pid}
        # An engine-death line may also be the start of an engine traceback; nothing else overlaps.
        assert extra <= {"engine_traceback", "engine_dead"}, (pid, extra)


def test_ordinary_server_lines_match_nothing() -> None:
    assert scan_lines(HEALTHY).findings == []


def test_the_catalogue_covers_every_log_visible_field_bug() -> None:
    covered = {b.strip().split(" ")[0] for p in CATALOGUE for b in p.bug.split(",")}
    assert {"B01", "B02", "B04", "B06", "B08", "B10", "B13", "B14", "B17", "B18"} <= covered


def test_entries_are_complete() -> None:
    for p in CATALOGUE:
        assert p.meaning and p.fix and p.bug and re.compile(p.regex)
    assert len({p.id for p in CATALOGUE}) == len(CATALOGUE)
    with pytest.raises(ValueError, match="threshold"):
        Pattern("x", "x", "fatal-if-repeated", "general", "m", "f", threshold=1)


@pytest.mark.parametrize("pid", ["shm_broadcast_starved", "placement_group_wait", "startup_memory_check"])
def test_fatal_if_repeated_is_a_warning_once_and_fatal_at_its_threshold(pid: str) -> None:
    p = next(x for x in CATALOGUE if x.id == pid)
    once = scan_lines([SAMPLES[pid]])
    assert once.get(pid).severity == "warning" and not once.fatal  # type: ignore[union-attr]
    many = scan_lines([SAMPLES[pid]] * p.threshold)
    assert many.get(pid).severity == "fatal" and many.fatal  # type: ignore[union-attr]
    assert many.get(pid).count == p.threshold  # type: ignore[union-attr]


def test_warnings_alone_are_never_fatal() -> None:
    r = scan_lines([SAMPLES["jit_during_inference"], SAMPLES["tool_args_decode"]] * 5)
    assert not r.fatal and {f.severity for f in r.findings} == {"warning"}


def test_broadcast_starvation_without_a_semlock_error_notes_a_dead_peer() -> None:
    assert "peer" in scan_text(SAMPLES["shm_broadcast_starved"]).notes[0]
    both = scan_text(SAMPLES["shm_broadcast_starved"] + "\n" + SAMPLES["semlock_missing"])
    assert both.notes == [] and both.fatal


def test_fatal_findings_come_first_and_json_round_trips() -> None:
    import json

    r = scan_lines([SAMPLES["jit_during_inference"], SAMPLES["engine_dead"]])
    assert [f.severity for f in r.findings] == ["fatal", "warning"]
    d = json.loads(r.to_json())
    assert d["fatal"] is True and d["findings"][0]["pattern"]["id"] == "engine_dead"


NCCL_LOGS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts" / "nccl-logs"

SPARK_ROCE = [
    # The shape of NCCL's lines on a Spark pair over RoCE (device and interface names of a Spark's
    # ConnectX-7; the wording is NCCL's, as in the recorded InfiniBand log).
    "spark-a:81:81 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:10.0.0.1<0>",
    "spark-a:81:81 [0] NCCL INFO Using network IB",
    "spark-a:81:204 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/0",
    "spark-a:81:204 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/1",
    # NCCL's bootstrap always connects over a TCP socket; that is not the data path.
    "spark-a:81:81 [0] NCCL INFO Bootstrap : Using enp1s0f1np1:10.0.0.1<0>",
]


def test_nccl_on_sockets_is_a_warning_on_the_recorded_socket_log() -> None:
    """A real NCCL 2.28.9 run whose RDMA plugin found no device (it still prints a NET/IB line)."""
    r = scan_text((NCCL_LOGS / "h200x2-socket-allreduce-rank0.log").read_text())
    f = r.get("nccl_socket_transport")
    assert f is not None and f.severity == "warning" and not r.fatal, r.ids()
    assert f.count >= 3  # the plugin chosen, the assignment, and every channel's `via NET/Socket`
    assert "NCCL_IB_HCA" in f.pattern.fix and "NCCL_SOCKET_IFNAME" in f.pattern.fix
    assert "RoCEv2" in f.pattern.fix


@pytest.mark.parametrize(
    "lines",
    [
        (NCCL_LOGS / "horovod-2node-ib.log").read_text().splitlines(),
        SPARK_ROCE,
        # sparkpair's own verdict quoting the transport is not NCCL's line
        [
            "nccl-allreduce on spark-a: data path: 4 channels via NET/Socket, networks ['Socket']; wanted none via NET/Socket (B05)"
        ],
    ],
    ids=["recorded-infiniband", "spark-roce", "preflight-message"],
)
def test_nccl_on_rdma_does_not_fire_the_socket_warning(lines: list[str]) -> None:
    assert "nccl_socket_transport" not in scan_lines(lines).ids()

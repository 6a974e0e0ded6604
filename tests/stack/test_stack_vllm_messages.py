"""Every vLLM message the health client, the gateway and ``logscan`` match on still exists in the
vLLM 0.33.0 this venv installs (the image's), so a reworded upstream message cannot silently
turn a fatal finding into a pass.

The evidence is the installed package's own ``.py`` text (``vllm/``, vendored third-party code
excluded): for each marker, the source fragment(s) that print it. A marker whose evidence is
gone fails, naming the marker and its consumer. Every logscan catalogue entry is classified here
as vLLM's (with evidence) or another program's (NCCL, the kernel, Ray, PyTorch, Python), so a new
catalogue entry fails until it is classified.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from sparkpair_health import client, logscan

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

#: consumer, marker as consumed -> regexes that must each match somewhere in vLLM's source.
VLLM_MARKERS: dict[tuple[str, str], tuple[str, ...]] = {
    # healthchecks/sparkpair_health/client.py ENGINE_DEAD_MARKERS (HTTP error bodies)
    ("client", "EngineDeadError"): (r"class EngineDeadError\b",),
    ("client", "EngineCore encountered"): (r"EngineCore encountered an issue",),
    ("client", "engine core"): (r"engine core",),
    ("client", "died unexpectedly"): (r"died unexpectedly",),
    # healthchecks/sparkpair_health/logscan.py CATALOGUE, by pattern id
    ("logscan", "engine_dead"): (r"class EngineDeadError\b", r"died unexpectedly",
                                 r"engine core exited unexpectedly", r"EngineCore encountered an issue"),
    ("logscan", "engine_start_failed"): (r"Engine core initialization failed", r"EngineCore failed to start"),
    ("logscan", "e8m0_keyerror"): (r"Worker failed with error",),
    # f"RPC call to {method} timed out." with method "sample_tokens" (multiproc_executor.py)
    ("logscan", "sample_tokens_timeout"): (r"RPC call to \{method\} timed out", r"\"sample_tokens\""),
    ("logscan", "shm_broadcast_starved"): (r"No available shared memory broadcast block",),
    ("logscan", "startup_memory_check"): (r"Free memory on device", r"is less than desired"),
    # "%s %s during inference" % ("Triton", "kernel JIT compilation", ...) (utils/jit_monitor.py)
    ("logscan", "jit_during_inference"): (r"%s %s during inference", r"backend=\"Triton\"",
                                          r"event=\"kernel JIT compilation\""),
    ("logscan", "tool_args_decode"): (r"Error in extracting tool call",
                                      r"Error trying to handle streaming tool call"),
    # the process prefix "(EngineCore_DP0 pid=1) " / "(Worker_TP1 pid=2) " of vLLM's log format
    ("logscan", "engine_traceback"): (r"\(%\(vllm_process_name\)s \"\s*\"pid=%\(process\)d\)",
                                      r"f\"EngineCore_DP\{dp_rank\}\"", r"process_name = \"Worker\""),
    # vLLM's own DeepGEMM wrappers (utils/deep_gemm.py, the sparse indexer)
    ("logscan", "deepgemm_unavailable"): (r"DeepGEMM backend is unavailable in the current vLLM environment",
                                          r"Sparse Attention Indexer CUDA op requires DeepGEMM"),
    ("logscan", "deepgemm_import_failed"): (r"Failed to import vendored deep_gemm",),
    ("logscan", "deepgemm_scale_dtype"): (r"Expected tensor scales dtype to be",),
    # logscan's timestamp reader (_VLLM_TIME): "LEVEL MM-DD HH:MM:SS"
    ("logscan", "vLLM log time"): (r"%\(levelname\)s %\(asctime\)s", r"_DATE_FORMAT = \"%m-%d %H:%M:%S\""),
}

#: logscan catalogue entries that match another program's messages, and whose.
NOT_VLLM = {
    "ptxas_arch": "Triton / ptxas",
    "nccl_system_error": "NCCL",
    "nccl_socket_transport": "NCCL",
    "ibv_reg_mr_enomem": "rdma-core / NCCL",
    "ray_channel_timeout": "Ray",
    "illegal_memory_access": "the CUDA runtime",
    "nccl_watchdog_timeout": "PyTorch c10d",
    "nvrm_no_memory": "the NVIDIA kernel driver",
    "nvrm_xid": "the NVIDIA kernel driver",
    "shm_segment": "NCCL / PyTorch",
    "cuda_oom": "PyTorch",
    "semlock_missing": "Python multiprocessing",
    "placement_group_wait": "Ray",
    # DeepGEMM's own messages (vendored as vllm/third_party/deep_gemm, which vllm_source() skips);
    # their text in the installed packages: tests/stack/test_deepgemm_logscan_texts.py
    "deepgemm_sf_transform": "DeepGEMM",
    "deepgemm_arch": "DeepGEMM",
    "deepgemm_host_assert": "DeepGEMM",
    "deepgemm_device_assert": "DeepGEMM",

}


def vllm_source() -> str:
    """All of the installed vLLM's ``.py`` text, vendored third-party code excluded."""
    spec = importlib.util.find_spec("vllm")
    assert spec is not None and spec.submodule_search_locations
    root = Path(next(iter(spec.submodule_search_locations)))
    return "\n".join(p.read_text(errors="replace") for p in sorted(root.rglob("*.py"))
                     if "third_party" not in p.relative_to(root).parts)


@pytest.fixture(scope="module")
def source() -> str:
    return vllm_source()


def missing_markers(source: str, table: dict[tuple[str, str], tuple[str, ...]]) -> list[str]:
    """``consumer 'marker': evidence /regex/ not found`` for every regex that matches nothing."""
    return [f"{who} {marker!r}: evidence /{rx}/ not found in vLLM's source"
            for (who, marker), rxs in table.items() for rx in rxs if not re.search(rx, source)]


def test_every_marker_still_exists_in_vllm_0_33(source):
    gone = missing_markers(source, VLLM_MARKERS)
    assert not gone, "vLLM 0.33.0 no longer prints:\n" + "\n".join(gone)


def test_a_reworded_message_is_named(source):
    """The check can fail: vLLM's source with one message reworded loses exactly that marker."""
    reworded = source.replace("EngineCore failed to start", "EngineCore could not start")
    assert missing_markers(reworded, VLLM_MARKERS) == [
        "logscan 'engine_start_failed': evidence /EngineCore failed to start/ not found in vLLM's source"]


def test_every_client_marker_is_in_the_table():
    listed = {m for (who, m) in VLLM_MARKERS if who == "client"}
    assert set(client.ENGINE_DEAD_MARKERS) == listed, (
        f"client.ENGINE_DEAD_MARKERS {client.ENGINE_DEAD_MARKERS}; this test checks {sorted(listed)}")


def test_the_gateway_matches_the_clients_markers_only():
    """The canary's engine-dead check uses client.ENGINE_DEAD_MARKERS (checked above), no list of its own."""
    text = (Path(logscan.__file__).parent / "gateway" / "canary.py").read_text()
    assert len(re.findall(r"any\(m in \w+ for m in ENGINE_DEAD_MARKERS\)", text)) == 1, (
        "gateway/canary.py: the canary's engine-dead check no longer uses client.ENGINE_DEAD_MARKERS")
    assert not re.search(r"\"EngineDeadError\"", text), (
        "gateway/canary.py lists engine-dead markers of its own"
    )


def test_every_logscan_entry_is_classified():
    ids = [p.id for p in logscan.CATALOGUE]
    vllm_ids = {m for (who, m) in VLLM_MARKERS if who == "logscan"}
    unclassified = [i for i in ids if i not in vllm_ids and i not in NOT_VLLM]
    assert not unclassified, (
        f"logscan entries {unclassified} are neither vLLM's (VLLM_MARKERS, with the source fragments "
        "that print them) nor listed in NOT_VLLM in tests/stack/test_stack_vllm_messages.py")
    stale = sorted((vllm_ids - {"vLLM log time"} | set(NOT_VLLM)) - set(ids))
    assert not stale, f"classified here but no longer in logscan.CATALOGUE: {stale}"

"""Kernel-log and verdict rules of the stability check, through recorded command outputs."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from pydantic import ValidationError
from sparkpair_cli.deploy.nodeenv_values import NODE_NAME_RE
from sparkpair_health.node_access import CommandResult, read_kernel_log, ssh_runner
from sparkpair_health.stability import StabilityMonitor, StabilityNode, StabilitySettings

CLEAN_PREV = """2026-11-28T10:00:00+0000 spark-a kernel: Linux version 6.11.0-1016-nvidia
2026-11-28T22:00:00+0000 spark-a kernel: reboot: Restarting system
"""
CRASHED_PREV = """2026-11-28T10:00:00+0000 spark-a kernel: Linux version 6.11.0-1016-nvidia
2026-11-28T21:59:58+0000 spark-a kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: NV_ERR_NO_MEMORY
2026-11-28T21:59:59+0000 spark-a kernel: NVRM: nvAssertOkFailedNoLog: Assertion failed: NV_ERR_NO_MEMORY
"""
CURRENT_OK = "2026-11-29T08:00:00+0000 spark-a kernel: Linux version 6.11.0-1016-nvidia\n"
CURRENT_XID = (
    CURRENT_OK + "2026-11-29T09:00:00+0000 spark-a kernel: NVRM: Xid (PCI:000f:01:00): 13, pid=4242\n"
)


class Recorded:
    """A command runner answering from recorded outputs keyed by the command's first words."""

    def __init__(self, answers: dict[str, CommandResult]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> CommandResult:
        self.calls.append(list(argv))
        joined = " ".join(argv)
        for key, res in self.answers.items():
            if joined.startswith(key):
                return res
        return CommandResult(127, "", f"{argv[0]}: not found")


def journal(current: str, previous: str | None) -> Recorded:
    prev = (
        CommandResult(0, previous)
        if previous is not None
        else CommandResult(
            1, "", "Specifying boot ID or boot offset has no effect, no persistent journal was found."
        )
    )
    return Recorded({"journalctl -k -b -1": prev, "journalctl -k -b 0": CommandResult(0, current)})


def monitor(*runners: Recorded) -> StabilityMonitor:
    nodes = [StabilityNode(name=n, kernel_log="local") for n in ("head", "worker")][: len(runners)]
    return StabilityMonitor(
        StabilitySettings(nodes=nodes), runners={n.name: r for n, r in zip(nodes, runners, strict=True)}
    )


def test_clean_kernel_logs_on_both_nodes_pass() -> None:
    rep = monitor(journal(CURRENT_OK, CLEAN_PREV), journal(CURRENT_OK, CLEAN_PREV)).check()
    assert rep.status == "pass", rep.to_dict()
    assert any(s.startswith("worker:kernel-previous-boot (journalctl -k -b -1") for s in rep.sources)


def test_xid_in_the_current_kernel_log_fails_naming_the_node() -> None:
    rep = monitor(journal(CURRENT_OK, CLEAN_PREV), journal(CURRENT_XID, CLEAN_PREV)).check()
    assert rep.status == "fail"
    f = rep.findings[0]
    assert (f.node, f.source, f.id, f.severity) == ("worker", "kernel", "nvrm_xid", "fatal")
    assert rep.message().startswith("worker kernel: the GPU reported an Xid error")


def test_previous_boot_that_died_after_nv_err_no_memory_is_flagged_once_as_history() -> None:
    head = journal(CURRENT_OK, CRASHED_PREV)
    m = monitor(head)
    rep = m.check()
    ids = {(f.id, f.severity, f.source) for f in rep.findings}
    assert ("nvrm_no_memory", "warning", "kernel-previous-boot") in ids
    assert ("previous_boot_unclean", "warning", "kernel-previous-boot") in ids
    assert rep.status == "pass", "history must be reported, not block readiness"
    assert "2 matches" in next(f for f in rep.findings if f.id == "nvrm_no_memory").message
    rep2 = m.check()
    assert not any(f.source == "kernel-previous-boot" for f in rep2.findings), (
        "previous boot read only at start"
    )
    assert sum(1 for c in head.calls if c[:4] == ["journalctl", "-k", "-b", "-1"]) == 1


def test_no_persistent_journal_is_noted_not_failed() -> None:
    rep = monitor(journal(CURRENT_OK, None)).check()
    assert rep.status == "pass"
    assert any("kernel-previous-boot (none:" in s and "no persistent journal" in s for s in rep.sources)


def test_repeated_warning_escalates_at_the_catalogue_threshold() -> None:
    once = CURRENT_OK + "kernel: No available shared memory broadcast block found in 60 seconds\n"
    rep = monitor(journal(once, CLEAN_PREV)).check()
    f = next(f for f in rep.findings if f.id == "shm_broadcast_starved")
    assert f.severity == "warning" and rep.status == "pass"
    twice = once + "kernel: No available shared memory broadcast block found in 60 seconds\n"
    rep = monitor(journal(twice, CLEAN_PREV)).check()
    f = next(f for f in rep.findings if f.id == "shm_broadcast_starved")
    assert f.severity == "fatal" and rep.status == "fail" and "escalated" in f.message


def test_journalctl_missing_falls_back_to_dmesg() -> None:
    r = Recorded({"dmesg --ctime": CommandResult(0, CURRENT_XID)})
    text, how = read_kernel_log(r, previous_boot=False)
    assert text == CURRENT_XID and how == "dmesg --ctime"
    assert r.calls[0][0] == "journalctl"


def test_unreadable_kernel_log_is_a_suite_error_naming_what_was_tried() -> None:
    r = Recorded(
        {
            "journalctl": CommandResult(1, "", "Failed to open journal"),
            "dmesg": CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted"),
        }
    )
    rep = monitor(r).check()
    assert rep.status == "error"
    assert "Operation not permitted" in rep.message() and "CAP_SYSLOG" in rep.message()


def test_ssh_runner_wraps_the_command_for_the_remote_node() -> None:
    seen: list[list[str]] = []

    def base(argv: Sequence[str], timeout_s: float) -> CommandResult:
        seen.append(list(argv))
        return CommandResult(0, "")

    ssh_runner("admin@127.0.0.1", base)(["journalctl", "-k", "--since", "10 min ago"], 5.0)
    assert seen[0][:6] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "admin@127.0.0.1"]
    assert seen[0][6] == "journalctl -k --since '10 min ago'"


def test_unreachable_docker_engine_is_a_suite_error() -> None:
    s = StabilitySettings(
        nodes=[StabilityNode(name="worker", docker_url="tcp://127.0.0.1:9", containers=["sparkpair-worker"])],
        docker_timeout_s=3,
    )
    rep = StabilityMonitor(s).check()
    assert rep.status == "error"
    assert rep.message().startswith("worker: ") and "tcp://127.0.0.1:9" in rep.message()


def test_a_node_name_is_checked_as_every_other_node_name_is() -> None:
    """The stability monitor's node names follow SPARKPAIR_NODE_NAME's one pattern: what the node
    env refuses, a stability node refuses too, with the value and what is wanted."""
    assert StabilityNode(name="spark-1.lab_a").name == "spark-1.lab_a"
    for bad in ("", "-head", "head node", "a" * 64, "héad"):
        assert not NODE_NAME_RE.match(bad), bad
        with pytest.raises(ValidationError) as exc:
            StabilityNode(name=bad)
        assert f"node name {bad!r} is not a node name" in str(exc.value), str(exc.value)
        assert "at most 63 characters" in str(exc.value)
    assert NODE_NAME_RE.match("a" * 63) and StabilityNode(name="a" * 63)

"""The stability check against a real Docker engine: a container that keeps crashing and
restarting, one that is OOM-killed, and a healthy one whose log carries a repeated warning.

Containers run from the scratch ``sh`` image of the docker tier's conftest (the host's ``dash``
and libc): no registry needed.
"""

from __future__ import annotations

import time
import uuid

import pytest
from sparkpair_health.stability import StabilityMonitor, StabilityNode, StabilitySettings

pytestmark = pytest.mark.docker


def wait(pred, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    t_end = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < t_end, f"{what} not within {timeout_s} s"
        time.sleep(0.3)


def test_restart_loop_oom_kill_and_log_lines_seen_through_the_docker_sdk(  # type: ignore[no-untyped-def]
    client, sh_image, containers, oom_container
) -> None:
    tag = uuid.uuid4().hex[:8]
    healthy = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "echo 'No available shared memory broadcast block found in 60 second'; read x"],
        detach=True,
        stdin_open=True,
        name=f"sp-head-{tag}",  # 'read' blocks on the open stdin: no CPU
    )
    containers.append(healthy)
    # The line is in the container's log before the monitor reads it (on a loaded machine the
    # shell may not have run its echo yet when ``run`` returns).
    wait(lambda: b"No available shared memory" in healthy.logs(), 60, "the warning in the head's log")
    mon = StabilityMonitor(
        StabilitySettings(
            nodes=[
                StabilityNode(name="head", containers=[healthy.name]),
            ]
        )
    )
    rep = mon.check()
    assert rep.status == "pass", rep.to_dict()
    assert rep.containers[0].running and rep.containers[0].restart_count == 0
    assert [f.id for f in rep.findings] == ["shm_broadcast_starved"] and rep.findings[0].severity == "warning"

    crash = client.containers.run(
        sh_image,
        [
            "/bin/sh",
            "-c",
            "echo '(EngineCore_DP0 pid=1) ERROR vllm.v1.engine.exceptions.EngineDeadError: "
            "EngineCore encountered an issue'; exit 3",
        ],
        detach=True,
        name=f"sp-worker-{tag}",
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 2},
    )
    containers.append(crash)
    mon2 = StabilityMonitor(
        StabilitySettings(
            nodes=[
                StabilityNode(name="head", containers=[healthy.name]),
                StabilityNode(name="worker", docker_url=None, containers=[crash.name, f"sp-missing-{tag}"]),
            ]
        )
    )
    first = mon2.check()  # baseline taken while the worker container is still young
    base = first.containers[1].restart_count

    def settled() -> bool:
        crash.reload()
        return crash.attrs["RestartCount"] >= 2 and crash.attrs["State"]["Status"] == "exited"

    wait(settled, 60, "two restarts then exit")
    rep = mon2.check()
    assert rep.status == "fail"
    ids = {(f.node, f.id) for f in rep.findings if f.severity == "fatal"}
    assert (
        ("worker", "not_running") in ids and ("worker", "missing") in ids and ("worker", "engine_dead") in ids
    )
    if base < 2:
        r = next(f for f in rep.findings if f.id == "restarted" and f.severity == "fatal")
        assert f"RestartCount {base} -> 2" in r.message
    dead = next(f for f in rep.findings if f.id == "engine_dead")
    assert dead.count == 3, "the three runs of one container share one log"

    oom = oom_container("sp-oom")
    rep = StabilityMonitor(
        StabilitySettings(nodes=[StabilityNode(name="head", containers=[oom.name])])
    ).check()
    f = next(f for f in rep.findings if f.id == "oom_killed")
    assert f.severity == "fatal" and "OOM-killed" in f.message and rep.status == "fail"


def test_a_new_epoch_forgets_the_restarts_and_log_lines_before_it_and_sees_the_ones_after(  # type: ignore[no-untyped-def]
    client, sh_image, containers
) -> None:
    """What wedge recovery relies on once the pair it restarted serves again: the restart it
    made and the dead engine's log lines are not fatal any more; a new death after it is."""
    tag = uuid.uuid4().hex[:8]
    dead = (
        "(EngineCore_DP0 pid=1) ERROR vllm.v1.engine.exceptions.EngineDeadError: "
        "EngineCore encountered an issue"
    )
    c = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", f"if [ -e /again ]; then read x; else echo '{dead}'; : > /again; exit 3; fi"],
        detach=True,
        stdin_open=True,
        name=f"sp-epoch-{tag}",
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 1},
    )
    containers.append(c)
    mon = StabilityMonitor(StabilitySettings(nodes=[StabilityNode(name="head", containers=[c.name])]))
    mon.baseline = {("head", c.name): 0}  # the baseline taken before the engine died

    def restarted_and_running() -> bool:
        c.reload()
        return c.attrs["RestartCount"] == 1 and c.attrs["State"]["Running"]

    wait(restarted_and_running, 60, "one restart, then running")
    before = mon.check()
    assert before.status == "fail", before.to_dict()
    assert {f.id for f in before.findings if f.severity == "fatal"} == {"restarted", "engine_dead"}

    time.sleep(1.1)  # docker's `since` has one-second resolution
    mon.new_epoch()
    after = mon.check()
    assert after.status == "pass", after.to_dict()
    assert [f.id for f in after.findings] == ["restarted"] and after.findings[0].severity == "warning"

    # A dead engine's line written after the epoch is fatal again.
    r = c.exec_run(["/bin/sh", "-c", f"echo '{dead}' > /proc/1/fd/1"])
    assert r.exit_code == 0, r.output
    rep = mon.check()
    assert rep.status == "fail" and {f.id for f in rep.findings if f.severity == "fatal"} == {"engine_dead"}

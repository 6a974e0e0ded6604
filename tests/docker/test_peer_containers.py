"""A peer whose container is down is named, with how, from the Docker evidence: a container
paused, frozen (SIGSTOP), OOM-killed, restarting, or died and restarted by its policy, against a
real engine (the head-log and TCP evidence: tests/unit/health/test_gateway_peers.py).

Containers run from the scratch ``sh`` image of the docker tier's conftest.
"""

from __future__ import annotations

import os
import signal
import time
import uuid
from typing import Any

import pytest
from sparkpair_health.peers import PeerSettings, PeerWatch

pytestmark = pytest.mark.docker


def test_a_peer_container_that_died_and_was_restarted_is_named_through_the_docker_sdk(
    client,
    sh_image,
    containers,
) -> None:  # type: ignore[no-untyped-def]
    # As in the two-container simulation: the killed worker is back "running" within a
    # second under its restart policy, so "not running" alone would never name it.
    name = f"sp-peer-{uuid.uuid4().hex[:8]}"
    c = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "read x"],
        detach=True,
        stdin_open=True,
        name=name,
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 3},
    )
    containers.append(c)
    peers = [{"name": "spark-b", "address": "10.0.0.2", "container": name}]
    w = PeerWatch(PeerSettings(peers=peers, head_log=None))
    assert w.look(canary_ok=True) is None and w.look() is None, "a running, unrestarted peer is alive"
    c.reload()
    os.kill(int(c.attrs["State"]["Pid"]), signal.SIGKILL)  # the node dies: exit 137, a failure
    t_end = time.monotonic() + 30
    while True:
        c.reload()
        if c.attrs["RestartCount"] >= 1 and c.attrs["State"]["Running"]:
            break
        assert time.monotonic() < t_end, c.attrs["State"]
        time.sleep(0.2)
    dead = w.look()
    assert dead is not None and dead.source == "docker" and dead.name == "spark-b", dead
    # Running again: "died and was restarted (RestartCount 0 -> 1"; this scratch container's
    # restarted `read` finds its stdin closed and exits, so it may be caught "restarting".
    assert "died and was restarted (RestartCount 0 -> " in dead.evidence or (
        f"container {name} is restarting (exit code" in dead.evidence
    ), dead.evidence
    c.remove(force=True)
    dead = w.look()
    assert dead is not None and f"no container '{name}'" in dead.evidence, dead


def stop_all(c: Any, sig: int) -> list[int]:
    """Send ``sig`` to every process of container ``c`` (host PIDs, from ``docker top``)."""
    top = c.top(ps_args="-eo pid")
    pids = [int(p[0]) for p in top["Processes"]]
    for pid in pids:
        os.kill(pid, sig)
    return pids


def test_a_paused_frozen_or_oom_killed_peer_container_is_named_as_such_and_clears_when_it_runs_again(
    client,
    sh_image,
    containers,
    oom_container,
) -> None:  # type: ignore[no-untyped-def]
    name = f"sp-peer-{uuid.uuid4().hex[:8]}"
    c = client.containers.run(sh_image, ["/bin/sh", "-c", "read x"], detach=True, stdin_open=True, name=name)
    containers.append(c)
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": name}], head_log=None)
    )
    assert w.look(canary_ok=True) is None and w.look() is None, "a running peer is not named"

    c.pause()  # docker pause: State.Running stays true, State.Paused turns true
    down = w.look()
    assert down is not None and (down.state, down.source) == ("paused", "docker"), down
    assert down.cause().startswith("peer node 'spark-b' (10.0.0.2) is paused: docker: container ")
    c.unpause()
    assert w.look(canary_ok=True) is None and w.look() is None, "unpaused: running, not restarted"

    pids = stop_all(c, signal.SIGSTOP)  # frozen: the processes stopped, the container "running"
    try:
        c.reload()
        assert c.attrs["State"]["Running"] and not c.attrs["State"]["Paused"]
        down = w.look()
        assert down is not None and down.state == "frozen", down
        assert f"{len(pids)} of its {len(pids)} processes are stopped (SIGSTOP" in down.evidence, down
    finally:
        stop_all(c, signal.SIGCONT)
    assert w.look() is None, "running again, unrestarted"

    oom = oom_container("sp-peer-oom")
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": oom.name}], head_log=None)
    )
    down = w.look()
    assert down is not None and down.state == "oom-killed" and "State.OOMKilled" in down.evidence, down


def test_a_peer_container_that_is_restarting_or_was_oom_killed_and_restarted_is_named_so(
    client,
    sh_image,
    containers,
    oom_container,
) -> None:  # type: ignore[no-untyped-def]
    # OOM-killed, then brought back by its restart policy: the engine's oom event names it.
    # (The kernel kills the allocating subshell; the shell then fails, so the policy restarts it.)
    oom = oom_container(
        "sp-peer-oomr",
        "read x; {allocate} || exit 137; echo done",
        wait=False,
        stdin_open=True,
        restart_policy={"Name": "on-failure", "MaximumRetryCount": 1},
    )
    w = PeerWatch(
        PeerSettings(peers=[{"name": "spark-b", "address": "10.0.0.2", "container": oom.name}], head_log=None)
    )
    assert w.look(canary_ok=True) is None
    sock = oom.attach_socket(params={"stdin": 1, "stream": 1})
    sock._sock.sendall(b"go\n")  # the shell reads its line, then allocates past its limit
    sock.close()
    t_end = time.monotonic() + 60
    while True:
        oom.reload()
        if oom.attrs["RestartCount"] >= 1:
            break
        assert time.monotonic() < t_end, oom.attrs["State"]
        time.sleep(0.2)
    down = w.look()
    assert down is not None and down.state == "oom-killed", down

    # A container that fails at once under `restart: always` spends more and more of its time
    # restarting (Docker's back-off doubles): seen "restarting".
    loop = client.containers.run(
        sh_image,
        ["/bin/sh", "-c", "exit 3"],
        detach=True,
        name=f"sp-peer-loop-{uuid.uuid4().hex[:8]}",
        restart_policy={"Name": "always"},
    )
    containers.append(loop)
    w = PeerWatch(
        PeerSettings(
            peers=[{"name": "spark-b", "address": "10.0.0.2", "container": loop.name}], head_log=None
        )
    )
    t_end = time.monotonic() + 60
    seen = []
    while True:
        down = w.look()
        seen.append(None if down is None else down.state)
        if down is not None and down.state == "restarting":
            break
        assert time.monotonic() < t_end, seen
        time.sleep(0.1)
    assert "is restarting (exit code 3)" in down.evidence, down

"""Wedge recovery's restart against a real Docker engine: a frozen (``docker pause``) head and a
running worker are restarted in order (head stopped, worker restarted, head started), and a
container that is gone stops the restart with an error naming the node and the container.

Uses the scratch ``sh`` image and the engine fixtures of the docker tier's conftest.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sparkpair_health.recovery import restart_pair
from sparkpair_health.stability import StabilityNode

pytestmark = pytest.mark.docker


def state(c: Any) -> dict[str, Any]:
    c.reload()
    return dict(c.attrs["State"])


def ns(stamp: str) -> tuple[str, int]:
    """Docker's RFC 3339 time (Go drops trailing zeros of the nanoseconds) as a sortable pair."""
    whole, _, frac = stamp.rstrip("Z").partition(".")
    return whole, int(frac.ljust(9, "0")) if frac else 0


def test_a_frozen_head_and_its_worker_are_restarted_in_order(client, sh_image, containers) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    run = dict(detach=True, stdin_open=True)  # 'read' blocks on the open stdin: no CPU
    head = client.containers.run(sh_image, ["/bin/sh", "-c", "read x"], name=f"sp-rh-{tag}", **run)
    worker = client.containers.run(sh_image, ["/bin/sh", "-c", "read x"], name=f"sp-rw-{tag}", **run)
    containers.extend([head, worker])
    head.pause()
    assert state(head)["Paused"]
    worker_started = state(worker)["StartedAt"]

    done = restart_pair(
        [
            StabilityNode(name="head", containers=[head.name]),
            StabilityNode(name="worker", containers=[worker.name]),
        ],
        timeout_s=1,
    )
    assert done == [f"stop head/{head.name}", f"restart worker/{worker.name}", f"start head/{head.name}"]
    h, w = state(head), state(worker)
    assert h["Running"] and not h["Paused"] and w["Running"], (h, w)
    assert w["StartedAt"] != worker_started, "the worker was not restarted"
    # Order: the head stopped before the worker came back, and started after it.
    assert ns(h["FinishedAt"]) < ns(w["StartedAt"]) < ns(h["StartedAt"]), (h, w)


def test_a_container_that_is_gone_stops_the_restart_naming_node_and_container(client) -> None:  # type: ignore[no-untyped-def]
    missing = f"sp-gone-{uuid.uuid4().hex[:8]}"
    with pytest.raises(RuntimeError) as e:
        restart_pair([StabilityNode(name="head", containers=[missing])], timeout_s=1)
    assert str(e.value).startswith("head: docker stop on the local Docker engine failed: NotFound")
    assert missing in str(e.value)

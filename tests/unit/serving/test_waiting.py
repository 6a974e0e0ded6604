"""``poll_until``: the one wait loop, and the node's TCP wait built on it (real sockets)."""

from __future__ import annotations

import time

import pytest
from sparkpair_serving.waiting import PollTimeout, poll_until


def test_poll_until_returns_the_first_answer_and_the_seconds_waited() -> None:
    answers = iter([None, None, "ready"])
    ticks: list[float] = []
    got = poll_until(lambda: next(answers), timeout_s=5.0, interval_s=0.01, on_wait=ticks.append)
    assert got.value == "ready"
    assert len(ticks) == 2
    assert 0.02 <= got.waited_s < 5.0


def test_poll_until_raises_at_the_deadline_after_a_last_probe() -> None:
    t0 = time.monotonic()
    with pytest.raises(PollTimeout) as e:
        poll_until(lambda: None, timeout_s=0.2, interval_s=0.05)
    took = time.monotonic() - t0
    assert isinstance(e.value, TimeoutError)
    assert 0.2 <= e.value.waited_s <= took < 5.0
    assert e.value.probes >= 2


def test_poll_until_with_no_time_probes_once() -> None:
    calls: list[int] = []
    with pytest.raises(PollTimeout) as e:
        poll_until(lambda: calls.append(1), timeout_s=0, interval_s=1.0)
    assert calls == [1] and e.value.probes == 1


def test_poll_until_backs_off_up_to_the_cap_and_never_sleeps_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Record the pauses poll_until asks for (then really sleep them): wall-clock gaps on a
    # loaded machine say more about the machine than about the loop.
    pauses: list[float] = []
    real_sleep = time.sleep

    def sleep(s: float) -> None:
        pauses.append(s)
        real_sleep(s)

    monkeypatch.setattr(time, "sleep", sleep)
    with pytest.raises(PollTimeout) as e:
        poll_until(lambda: None, timeout_s=0.3, interval_s=0.02, backoff=2.0, max_interval_s=0.08)
    assert pauses[:4] == pytest.approx([0.02, 0.04, 0.08, 0.08])
    assert all(p <= 0.08 for p in pauses)
    assert sum(pauses) <= 0.3 + 1e-9  # the last pause is cut to the time left
    assert e.value.waited_s >= 0.3


def test_an_error_inside_the_probe_ends_the_wait_at_once() -> None:
    def probe() -> None:
        raise RuntimeError("server exited with code 1")

    with pytest.raises(RuntimeError, match="exited"):
        poll_until(probe, timeout_s=60.0)


@pytest.mark.parametrize(
    "kw", [{"timeout_s": -1.0}, {"timeout_s": 1.0, "interval_s": 0.0}, {"timeout_s": 1.0, "backoff": 0.5}]
)
def test_poll_until_refuses_settings_that_cannot_wait(kw: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="wanted timeout_s >= 0"):
        poll_until(lambda: None, **kw)

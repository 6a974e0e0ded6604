"""``poll_until``: the one wait loop, and the node's TCP wait built on it (real sockets)."""

from __future__ import annotations

import time

import pytest
from sparkpair_serving import waiting
from sparkpair_serving.waiting import PollTimeout, poll_until


def test_poll_until_returns_the_first_answer_and_the_seconds_waited() -> None:
    answers = iter([None, None, "ready"])
    ticks: list[float] = []
    got = poll_until(lambda: next(answers), timeout_s=60.0, interval_s=0.01, on_wait=ticks.append)
    assert got.value == "ready"
    assert len(ticks) == 2
    assert 0.02 <= got.waited_s < 60.0


def test_poll_until_raises_at_the_deadline_after_a_last_probe() -> None:
    t0 = time.monotonic()
    with pytest.raises(PollTimeout) as e:
        poll_until(lambda: None, timeout_s=0.2, interval_s=0.05)
    took = time.monotonic() - t0
    assert isinstance(e.value, TimeoutError)
    assert 0.2 <= e.value.waited_s <= took < 60.0
    assert e.value.probes >= 2


def test_poll_until_with_no_time_probes_once() -> None:
    calls: list[int] = []
    with pytest.raises(PollTimeout) as e:
        poll_until(lambda: calls.append(1), timeout_s=0, interval_s=1.0)
    assert calls == [1] and e.value.probes == 1


class VirtualClock:
    """``time.monotonic``/``time.sleep`` on a clock that moves only when slept: the pauses the loop
    asks for, with none of the machine's own (a CI run on a loaded machine overslept a 0.08 s pause
    enough to leave one pause fewer before a 0.3 s deadline). Its seconds start at 0, and the
    tests use binary fractions, so every sum is exact."""

    def __init__(self) -> None:
        self.now = 0.0
        self.pauses: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.pauses.append(s)
        self.now += s


def test_poll_until_backs_off_up_to_the_cap_and_never_sleeps_past_the_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = VirtualClock()
    monkeypatch.setattr(waiting, "time", clock)
    probes: list[float] = []
    with pytest.raises(PollTimeout) as e:
        poll_until(
            lambda: probes.append(clock.now),
            timeout_s=1.75,
            interval_s=0.125,
            backoff=2.0,
            max_interval_s=0.5,
        )
    assert clock.pauses == [0.125, 0.25, 0.5, 0.5, 0.375]  # capped at 0.5, the last cut to the time left
    assert probes == [0.0, 0.125, 0.375, 0.875, 1.375, 1.75]
    assert e.value.probes == 6 and e.value.waited_s == 1.75


def test_the_last_pause_is_cut_to_the_time_left(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = VirtualClock()
    monkeypatch.setattr(waiting, "time", clock)
    with pytest.raises(PollTimeout):
        poll_until(lambda: None, timeout_s=0.625, interval_s=0.25)
    assert clock.pauses == [0.25, 0.25, 0.125]


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

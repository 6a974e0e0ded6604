"""``DockerNode.run`` tells output docker-py lost from a command that printed nothing.

docker-py's ``exec_run`` can return exit 0 with the output gone when the command ends before the
output stream is attached (https://github.com/docker/docker-py/issues/2042); a loaded docker-tier
run read the pair's plan file as empty that way. The real engine cannot be made to lose output on
demand, so a stand-in container injects it here; the same path against the real engine is the
docker tier's report test (tests/docker/test_sim_pair.py).
"""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

from sparkpair_cli.report.nodes import EXEC_END, EXEC_TRIES, DockerNode


class LosingContainer:
    """Runs the wrapped command with the local shell; the first ``lose`` runs lose their output."""

    def __init__(self, lose: int) -> None:
        self.lose = lose
        self.runs = 0

    def exec_run(self, cmd: list[str], demux: bool) -> Any:
        assert demux
        self.runs += 1
        p = subprocess.run(cmd, capture_output=True, timeout=30)
        if self.runs <= self.lose:
            return SimpleNamespace(exit_code=p.returncode, output=(None, None))
        return SimpleNamespace(exit_code=p.returncode, output=(p.stdout or None, p.stderr or None))


def node(c: LosingContainer) -> DockerNode:
    n = DockerNode("head", "sim-head")
    n._container = lambda: c  # type: ignore[method-assign]
    return n


def test_lost_output_is_read_again_and_the_command_s_own_output_is_unchanged(tmp_path) -> None:
    f = tmp_path / "plan.json"
    f.write_text('{"schema": "x"}')  # no newline at the end: kept exactly
    c = LosingContainer(lose=1)
    assert node(c).read(str(f)) == '{"schema": "x"}' and c.runs == 2
    c = LosingContainer(lose=0)
    r = node(c).run(["sh", "-c", "printf 'a\\n'; echo e >&2; exit 3"], 5)
    assert (r.rc, r.stdout, r.stderr, c.runs) == (3, "a\n", "e\n", 1)
    assert EXEC_END not in r.stdout


def test_an_empty_file_is_empty_and_output_lost_every_time_is_not_retried_forever(tmp_path) -> None:
    (tmp_path / "empty").write_text("")
    c = LosingContainer(lose=0)
    assert node(c).read(str(tmp_path / "empty")) == "" and c.runs == 1  # printed nothing: no retry
    c = LosingContainer(lose=99)
    assert node(c).read(str(tmp_path / "empty")) == "" and c.runs == EXEC_TRIES
    c = LosingContainer(lose=0)
    assert node(c).read(str(tmp_path / "missing")) is None and c.runs == 1

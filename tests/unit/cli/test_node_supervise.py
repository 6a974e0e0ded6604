"""``sparkpair node run`` supervises vLLM: a child that stops serving on its own (vLLM exits
0 when its engine dies with a peer) makes the node exit non-zero, naming the peer, so
compose's ``restart: on-failure`` restarts it; a requested stop still exits 0.

Every test runs real child processes (a Python one-liner standing in for vLLM's exit);
tests/vllm_real/test_api_key_server.py does the same with the real vLLM server.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import typer
from sparkpair_cli import cmd_node
from sparkpair_cli.deploy import launch, liveness
from sparkpair_cli.deploy.nodeenv import load_node_env, parse_env_file
from sparkpair_cli.deploy.supervise import EXIT_PEER_LOST, ChildExit, exit_status, last_line, run_child

REPO = Path(__file__).resolve().parents[3]
PY = sys.executable


def example(**over: str):  # type: ignore[no-untyped-def]
    return load_node_env(parse_env_file(REPO / "configs" / "node.env.example") | over)


def child(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


@pytest.mark.parametrize(
    ("code", "want"),
    [
        ("import sys; sys.exit(0)", EXIT_PEER_LOST),  # vLLM's "engine stopped" status
        ("import sys; sys.exit(3)", 3),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", 128 + 9),
    ],
)
def test_a_child_that_ends_on_its_own_never_exits_zero(code: str, want: int) -> None:
    c = run_child(child(code), os.environ, tick_s=0.2)
    assert c.stop_signal is None
    assert exit_status(c) == want


def test_the_mapping_table() -> None:
    assert exit_status(ChildExit(0, None, 1.0)) == EXIT_PEER_LOST != 0
    assert exit_status(ChildExit(0, signal.SIGTERM, 1.0)) == 0
    assert exit_status(ChildExit(-signal.SIGTERM, signal.SIGTERM, 1.0)) == 0
    assert exit_status(ChildExit(143, signal.SIGTERM, 1.0)) == 0
    assert exit_status(ChildExit(1, signal.SIGTERM, 1.0)) == 1
    assert exit_status(ChildExit(-signal.SIGKILL, signal.SIGTERM, 1.0)) == 137


SUPERVISOR = """
import sys
from sparkpair_cli.deploy.supervise import run_child, exit_status, last_line
c = run_child(sys.argv[1:], __import__("os").environ, tick_s=0.2)
print(last_line(c, node="spark-a", role="head", peers="p"), flush=True)
sys.exit(exit_status(c))
"""

GRACEFUL_CHILD = """
import signal, sys, time, pathlib
def stop(signum, frame):
    pathlib.Path(sys.argv[1]).write_text(str(signum))
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
pathlib.Path(sys.argv[1]).write_text("up")
while True:
    time.sleep(0.1)
"""


def test_sigterm_reaches_the_child_and_a_requested_stop_exits_zero(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    sup = subprocess.Popen(
        [PY, "-c", SUPERVISOR, PY, "-c", GRACEFUL_CHILD, str(marker)],
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ,
    )
    t0 = time.monotonic()
    while (marker.read_text() if marker.exists() else "") != "up":
        assert time.monotonic() - t0 < 30, "the child did not start"
        time.sleep(0.05)
    sup.send_signal(signal.SIGTERM)
    out, _ = sup.communicate(timeout=30)
    assert marker.read_text() == str(int(signal.SIGTERM)), "the child never got SIGTERM"
    assert sup.returncode == 0, out
    assert "stopped on SIGTERM; vLLM exited 0" in out


def _serve(env, argv: list[str], capsys: pytest.CaptureFixture[str], secret: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    plan = launch.LaunchPlan(env.role, "mp", dict(os.environ), argv)
    with pytest.raises(typer.Exit) as e:
        cmd_node._serve(env, plan, secret or {})
    err = " ".join(capsys.readouterr().err.split())
    return e.value.exit_code, err


def test_the_head_names_its_workers_when_vllm_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _serve(example(), child("import sys; sys.exit(0)"), capsys)
    assert code == EXIT_PEER_LOST
    last = err.split("sparkpair node spark-a (head):")[-1]
    assert "node spark-a (head): vLLM exited 0 after" in last, err
    assert "without a stop request" in last and "a peer of the pair dies" in last
    assert "peer: worker(s) (rank 1); none was seen connected to 192.168.177.11:29501" in last
    assert f"exit {EXIT_PEER_LOST} so compose's restart policy restarts this node" in last


def test_the_worker_names_the_head_and_whether_it_answers(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    env = example(
        SPARKPAIR_NODE_NAME="spark-b", SPARKPAIR_NODE_RANK="1", VLLM_HOST_IP="192.168.177.12"
    ).model_copy(update={"SPARKPAIR_MASTER_PORT": port})
    env = env.model_copy(update={"SPARKPAIR_HEAD_ADDR": __import__("ipaddress").IPv4Address("127.0.0.1")})
    code, err = _serve(env, child("import sys; sys.exit(0)"), capsys)
    assert code == EXIT_PEER_LOST
    assert f"peer: the head (rank 0) at 127.0.0.1:{port}, which does not accept connections" in err, err


def test_the_key_reaches_vllm_in_its_environment_never_in_argv(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-unit-test-key-5f2c"
    out = tmp_path / "seen"
    code = f"""
    import os, sys, pathlib
    pathlib.Path({str(out)!r}).write_text(repr((os.environ.get("VLLM_API_KEY"), " ".join(sys.argv))))
    sys.exit(0)
    """
    _serve(example(), child(code), capsys, {"VLLM_API_KEY": key})
    env_key, argv = eval(out.read_text())  # noqa: S307 - our own repr
    assert env_key == key and key not in argv


def test_api_key_env_reads_the_file_and_never_shows_it(tmp_path: Path) -> None:
    from sparkpair_serving.apikey import ApiKeyError

    f = tmp_path / "api-key"
    f.write_text("  sk-file-key-91 \n")
    assert cmd_node.api_key_env(example(SPARKPAIR_API_KEY_FILE=str(f))) == {"VLLM_API_KEY": "sk-file-key-91"}
    assert cmd_node.api_key_env(example(SPARKPAIR_API_KEY="sk-env-key")) == {"VLLM_API_KEY": "sk-env-key"}
    assert cmd_node.api_key_env(example()) == {}
    f.write_text("sk-one\nsk-two\n")
    with pytest.raises(ApiKeyError) as e:
        cmd_node.api_key_env(example(SPARKPAIR_API_KEY_FILE=str(f)))
    assert "sk-one" not in str(e.value) and str(f) in str(e.value)


def test_children_never_inherit_the_key_settings() -> None:
    base = cmd_node.child_base_env({"SPARKPAIR_API_KEY": "k", "VLLM_API_KEY": "k", "PATH": "/bin"})
    assert base == {"PATH": "/bin"}


def test_a_bind_address_this_host_does_not_have_is_refused() -> None:
    assert cmd_node.bind_problem(example(SPARKPAIR_API_HOST="127.0.0.1")) is None
    assert cmd_node.bind_problem(example()) is None  # 0.0.0.0
    why = cmd_node.bind_problem(example(SPARKPAIR_API_HOST="198.51.100.7"))  # TEST-NET-2
    assert why is not None
    assert why.startswith("node spark-a: SPARKPAIR_API_HOST=198.51.100.7 cannot be bound on this host")
    assert "wanted 0.0.0.0, ::, 127.0.0.1 or an address this host has" in why


def test_the_head_sees_which_workers_hold_its_rendezvous_port() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        try:
            u.connect(("192.0.2.1", 9))  # no packet is sent: this only picks the source address
            ips = [u.getsockname()[0]]
        except OSError:
            ips = []
    if not ips or ips[0].startswith("127."):
        pytest.skip("this host has no non-loopback IPv4 address")
    with socket.socket() as srv:
        srv.bind(("0.0.0.0", 0))
        srv.listen()
        port = srv.getsockname()[1]
        with socket.create_connection((ips[0], port)) as _c:
            conn, _ = srv.accept()
            with conn:
                assert liveness.clients_of_port(port) == [ips[0]]
    assert liveness.clients_of_port(port) == []


def test_last_line_for_a_requested_stop_and_a_crash() -> None:
    assert last_line(ChildExit(0, signal.SIGTERM, 3.0), node="n", role="worker", peers="p") == (
        "node n (worker): stopped on SIGTERM; vLLM exited 0 after 3 s; exit 0"
    )
    line = last_line(ChildExit(-9, None, 3.0), node="n", role="worker", peers="the head")
    assert "vLLM was killed by signal 9" in line and "(peer: the head); exit 137" in line

"""What ``sparkpair node run`` starts, per role and executor, built from the env and profile."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from sparkpair_cli import cmd_node
from sparkpair_cli.deploy import launch, liveness
from sparkpair_cli.deploy.nodeenv import load_node_env, parse_env_file
from sparkpair_serving.profile import load_profile
from typer.testing import CliRunner

REPO = Path(__file__).resolve().parents[3]
BASE = parse_env_file(REPO / "configs" / "node.env.example")
WORKER = BASE | {
    "SPARKPAIR_NODE_NAME": "spark-b",
    "SPARKPAIR_NODE_RANK": "1",
    "VLLM_HOST_IP": "192.168.177.12",
}


def plan(values: dict[str, str], role: str, gid: int | None = 3) -> launch.LaunchPlan:
    return launch.plan(
        load_node_env(values),
        load_profile("deepseek-v4-flash"),
        role,  # type: ignore[arg-type]
        base_env={"PATH": "/usr/bin", "NCCL_IB_GID_INDEX": "auto"},
        gid_index=gid,
        python="py",
    )


def test_dsv4_head_serves_the_profile_with_vllm_mp_executor_across_two_nodes() -> None:
    p = plan(BASE, "head")
    assert p.executor == "mp"
    s = p.serve
    model = "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert s[:5] == ["py", "-m", "sparkpair_cli.deploy.vllm_main", "serve", model]
    assert (
        s[s.index("--tensor-parallel-size") + 1] == "2"
        and s[s.index("--distributed-executor-backend") + 1] == "mp"
    )
    assert s[s.index("--kv-cache-dtype") + 1] == "fp8_ds_mla"
    assert s[s.index("--default-chat-template-kwargs") + 1] == '{"thinking": false}'
    assert (
        s[s.index("--tool-call-parser") + 1] == "deepseek_v4"
        and s[s.index("--reasoning-parser") + 1] == "deepseek_v4"
    )
    assert s[s.index("--nnodes") + 1] == "2" and s[s.index("--node-rank") + 1] == "0"
    assert s[-4:] == ["--host", "0.0.0.0", "--port", "8000"] and "--headless" not in s


def test_dsv4_worker_runs_a_headless_mp_engine_as_node_rank_1() -> None:
    p = plan(WORKER, "worker")
    s = p.serve
    assert p.executor == "mp" and s[s.index("--distributed-executor-backend") + 1] == "mp"
    assert s[s.index("--nnodes") + 1] == "2" and s[s.index("--node-rank") + 1] == "1"
    assert s[-1] == "--headless" and "--port" not in s and "--host" not in s


def test_mp_uses_vllm_multi_node_flags_from_the_env() -> None:
    head = plan(BASE, "head").serve
    worker = plan(WORKER, "worker").serve
    for argv, rank in ((head, "0"), (worker, "1")):
        i = argv.index("--nnodes")
        assert argv[i : i + 8] == [
            "--nnodes",
            "2",
            "--node-rank",
            rank,
            "--master-addr",
            "192.168.177.11",
            "--master-port",
            "29501",
        ]


def test_a_profile_that_asks_for_ray_is_refused_naming_the_setting() -> None:
    prof = load_profile("deepseek-v4-flash")
    prof.server.env["SPARKPAIR_EXECUTOR"] = "ray"
    with pytest.raises(
        launch.LaunchError, match=r"server.env.SPARKPAIR_EXECUTOR='ray'; wanted it unset or 'mp'"
    ):
        launch.plan(load_node_env(BASE), prof, "head", base_env={}, gid_index=None)


def test_the_child_env_carries_fabric_names_and_the_resolved_gid() -> None:
    env = plan(BASE, "head", gid=5).env
    assert env["NCCL_IB_GID_INDEX"] == "5"
    assert env["NCCL_SOCKET_IFNAME"] == env["GLOO_SOCKET_IFNAME"] == env["TP_SOCKET_IFNAME"] == "enp1s0f1np1"
    assert env["VLLM_HOST_IP"] == "192.168.177.11"
    assert not [k for k in env if k.startswith("RAY_")]
    assert env["VLLM_ENGINE_READY_TIMEOUT_S"] == "3600"
    assert "NCCL_IB_GID_INDEX" not in plan(BASE, "head", gid=None).env  # never pass 'auto' to NCCL


def test_the_head_also_writes_its_server_output_to_the_state_volume_log() -> None:
    base = {"PATH": "/usr/bin", launch.HEAD_LOG_ENV: "/var/lib/sparkpair/state/head.log"}
    head = launch.plan(load_node_env(BASE), load_profile("deepseek-v4-flash"), "head", base_env=base,
                       gid_index=3, python="py")  # fmt: skip
    worker = launch.plan(load_node_env(WORKER), load_profile("deepseek-v4-flash"), "worker", base_env=base,
                         gid_index=3, python="py")  # fmt: skip
    assert head.serve[:2] == ["bash", "-c"] and head.serve[4] == "/var/lib/sparkpair/state/head.log"
    assert head.serve[5:] == plan(BASE, "head").serve
    assert worker.serve == plan(WORKER, "worker").serve


def test_tee_argv_copies_stdout_and_stderr_to_the_log_and_keeps_the_exit_code(tmp_path: Path) -> None:
    log = tmp_path / "head.log"
    log.write_text("a previous start\n")
    code = "import sys; print('to stdout', flush=True); print('to stderr', file=sys.stderr); sys.exit(3)"
    r = subprocess.run(
        launch.tee_argv([sys.executable, "-c", code], str(log)), capture_output=True, text=True
    )
    assert r.returncode == 3
    assert "to stdout" in r.stdout and "to stderr" in r.stdout
    assert log.read_text().splitlines() == ["to stdout", "to stderr"]


def test_the_wrong_service_for_the_rank_is_refused() -> None:
    with pytest.raises(
        launch.LaunchError, match=r"compose service 'worker' started with SPARKPAIR_NODE_RANK=0"
    ):
        plan(BASE, "worker")


def test_a_profile_whose_tp_does_not_match_the_cluster_is_refused() -> None:
    with pytest.raises(
        launch.LaunchError, match=r"= 2; wanted SPARKPAIR_NNODES x SPARKPAIR_GPUS_PER_NODE = 4 x 1 = 4"
    ):
        plan(BASE | {"SPARKPAIR_NNODES": "4"}, "head")


def test_a_profile_that_sets_node_owned_flags_is_refused() -> None:
    prof = load_profile("deepseek-v4-flash")
    prof.server.args.append("--nnodes=2")
    with pytest.raises(launch.LaunchError, match=r"server.args contains '--nnodes=2'"):
        launch.check_shape(load_node_env(BASE), prof)


def test_shipped_kernels_seed_the_cache_volume_once(tmp_path: Path) -> None:
    shipped, cache = tmp_path / "aot", tmp_path / "cache"
    (shipped / "abc").mkdir(parents=True)
    (shipped / "abc" / "k.cubin").write_bytes(b"\x7fELF")
    assert launch.seed_triton_cache(shipped, cache) == 1
    assert (cache / "abc" / "k.cubin").read_bytes() == b"\x7fELF"
    assert launch.seed_triton_cache(shipped, cache) == 0


def test_a_seeder_losing_the_race_for_an_entry_keeps_the_winners_copy(tmp_path: Path, monkeypatch) -> None:
    """Two containers sharing the cache volume seed it at once (the simulated pair on one host):
    the entry another copier placed while this one was copying stays, whole, and this one's
    temporary copy is dropped (the check-then-copy that preceded it raised FileExistsError)."""
    shipped, cache = tmp_path / "aot", tmp_path / "cache"
    (shipped / "abc").mkdir(parents=True)
    (shipped / "abc" / "k.cubin").write_bytes(b"\x7fELF")
    real = shutil.copytree

    def racing(src, dst, **kw):  # noqa: ANN001, ANN003, ANN202 - shutil.copytree's signature
        if not (cache / "abc").exists():
            real(src, cache / "abc")  # the other container wins the race
        return real(src, dst, **kw)

    monkeypatch.setattr(launch.shutil, "copytree", racing)
    assert launch.seed_triton_cache(shipped, cache) == 0
    assert [p.name for p in cache.iterdir()] == ["abc"], "no temporary copy is left behind"
    assert (cache / "abc" / "k.cubin").read_bytes() == b"\x7fELF"


def test_a_cache_folder_that_cannot_take_the_shipped_kernels_is_named_not_a_traceback(tmp_path: Path) -> None:
    """TRITON_CACHE_DIR naming a file, or a shipped entry that cannot be copied (here a dangling
    link; on a node, a full or read-only volume): LaunchError naming the setting and the entry, which
    ``node run`` prints before exiting 2 (an OSError used to escape as a traceback)."""
    shipped = tmp_path / "aot"
    (shipped / "abc").mkdir(parents=True)
    (shipped / "abc" / "k.cubin").write_bytes(b"\x7fELF")
    a_file = tmp_path / "cache-file"
    a_file.write_text("x")
    want = rf"TRITON_CACHE_DIR='{a_file}': cannot make .*wanted a writable"
    with pytest.raises(launch.LaunchError, match=want):
        launch.seed_triton_cache(shipped, a_file)
    (shipped / "zzz").symlink_to(tmp_path / "gone")
    cache = tmp_path / "cache"
    with pytest.raises(launch.LaunchError, match=rf"cannot place the shipped kernel {shipped / 'zzz'} there"):
        launch.seed_triton_cache(shipped, cache)
    assert sorted(p.name for p in cache.iterdir()) == ["abc"], "no temporary copy is left behind"


def test_worker_liveness_needs_the_process_and_a_connection_to_the_head() -> None:
    """Real process and real sockets on loopback, read from this machine's /proc."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", "--headless"])
    try:
        time.sleep(0.3)
        r = liveness.worker_alive("spark-b", "127.0.0.1", port)
        assert not r.ok and f"wanted one to 127.0.0.1:{port}" in r.message
        cli = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        r = liveness.worker_alive("spark-b", "127.0.0.1", port)
        assert r.ok, r.message
        assert str(proc.pid) in r.message or "pid" in r.message
        cli.close()
        conn.close()
    finally:
        proc.kill()
        proc.wait()
        srv.close()


def test_proc_net_tcp_addresses_decode() -> None:
    assert liveness._decode_addr("0B00A8C0:7345") == ("192.168.0.11", 29509)
    assert liveness._decode_addr("0000000000000000FFFF00000100007F:1F90") == ("127.0.0.1", 8080)


def _cli(args: list[str], env: dict[str, str]):  # type: ignore[no-untyped-def]
    app = typer.Typer()
    cmd_node.register(app)
    app.command("_")(lambda: None)
    return CliRunner().invoke(app, args, env=env)


def test_node_validate_lists_every_problem_and_exits_2(tmp_path: Path) -> None:
    p = tmp_path / "node.env"
    p.write_text(
        (REPO / "configs" / "node.env.example")
        .read_text()
        .replace("VLLM_HOST_IP=192.168.177.11", "VLLM_HOST_IP=10.9.9.9")
    )
    r = _cli(["node", "validate", "--env-file", str(p)], {})
    assert r.exit_code == 2 and "VLLM_HOST_IP='10.9.9.9'" in r.output
    p.write_text(
        (REPO / "configs" / "node.env.example")
        .read_text()
        .replace("SPARKPAIR_MODEL_CACHE=/srv/sparkpair/models", f"SPARKPAIR_MODEL_CACHE={tmp_path}")
    )
    r = _cli(["node", "validate", "--env-file", str(p)], {})
    assert r.exit_code == 0, r.output
    assert "rank 0/2 (head), executor mp" in r.output


def test_node_check_head_probes_the_bound_address_with_http() -> None:
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class H(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a: object) -> None:
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    port = str(srv.server_address[1])
    env = dict(os.environ) | BASE | {"SPARKPAIR_API_PORT": port}
    try:
        r = _cli(["node", "check", "--role", "head"], env)
        assert r.exit_code == 0 and f"GET http://127.0.0.1:{port}/health: HTTP 200" in r.output
        r = _cli(
            ["node", "check", "--role", "health"],
            env | {"SPARKPAIR_GATEWAY_PORT": port, "SPARKPAIR_API_PORT": "8000"},
        )
        assert r.exit_code == 1 and "/readyz: HTTP 404; wanted HTTP 200" in r.output
    finally:
        srv.shutdown()

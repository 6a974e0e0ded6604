"""The real vLLM CPU server started by ``sparkpair node run --role head`` -- the container
entrypoint's own code path -- with the API key in a file (as compose's secret provides it):

- ``/v1/models`` without the key is 401, with it 200; ``/health`` stays open;
- the key is in no process's command line and not in the node's log;
- the API binds ``SPARKPAIR_API_HOST=127.0.0.1`` only: the host's other address refuses;
- when vLLM's engine dies, vLLM exits 0 (docs/reference/node-env.md) and the node exits 5
  with a last line saying vLLM stopped without a stop request.

Preflight runs as on a node; the checks this CPU machine cannot pass (no RDMA, GPU, ...)
are found by a first preflight run and waived, each by its id, so the test is about the
key and the exit, not about this host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = [pytest.mark.vllm_real, pytest.mark.slow]

KEY = "sk-node-real-3b9f0c"
REPO = Path(__file__).resolve().parents[2]


def host_address() -> tuple[str, str] | None:
    """``(ifname, ipv4)`` of the interface holding this host's default-route address."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
        try:
            u.connect(("192.0.2.1", 9))  # no packet is sent
            ip = u.getsockname()[0]
        except OSError:
            return None
    if ip.startswith("127."):
        return None
    try:
        out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    for line in out.splitlines():
        f = line.split()
        if len(f) > 3 and f[3].split("/")[0] == ip:
            return f[1], ip
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_core_pids(pgid: int) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if os.getpgid(int(d.name)) != pgid:
                continue
            argv = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            comm = (d / "comm").read_text().strip()
        except (OSError, ProcessLookupError):
            continue
        if "EngineCore" in argv or comm.startswith("VLLM::EngineCor"):
            out.append(int(d.name))
    return out


def cmdlines(pgid: int) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.getpgid(int(d.name)) == pgid:
                    out.append((d / "cmdline").read_bytes().decode(errors="replace"))
            except (OSError, ProcessLookupError):
                pass
    return out


def test_the_node_serves_with_the_key_from_a_file_and_exits_5_when_its_engine_dies(
    tiny_model: Path, tmp_path: Path
) -> None:
    pytest.importorskip("vllm", reason="the vLLM CPU build is not installed")
    from sparkpair_cli.preflight.ids import CHECK_IDS
    from sparkpair_cli.server import cpu_server_env

    addr = host_address()
    if addr is None:
        pytest.skip("no non-loopback IPv4 address on this host to stand in for the fabric")
    ifname, ip = addr
    key_file = tmp_path / "api-key"
    key_file.write_text(KEY + "\n")
    api_port = free_port()
    values = {
        "SPARKPAIR_NODE_NAME": "real-head",
        "SPARKPAIR_NNODES": "1",
        "SPARKPAIR_NODE_RANK": "0",
        "SPARKPAIR_HEAD_ADDR": ip,
        "VLLM_HOST_IP": ip,
        "SPARKPAIR_FABRIC_CIDR": f"{ip.rsplit('.', 1)[0]}.0/24",
        "SPARKPAIR_FABRIC_IFNAME": ifname,
        "NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1",
        "SPARKPAIR_MASTER_PORT": str(free_port()),
        "SPARKPAIR_API_HOST": "127.0.0.1",
        "SPARKPAIR_API_PORT": str(api_port),
        "SPARKPAIR_GATEWAY_PORT": str(free_port()),
        "SPARKPAIR_PROFILE": "tiny-demo",
        "SPARKPAIR_MODEL": str(tiny_model),
        "SPARKPAIR_EXECUTOR": "mp",
        "SPARKPAIR_API_KEY_FILE": str(key_file),
        "SPARKPAIR_JOIN_TIMEOUT_S": "60",
    }
    env = cpu_server_env(values)
    for k in ("TRITON_CACHE_DIR", "SPARKPAIR_API_KEY", "VLLM_API_KEY"):
        env.pop(k, None)
    env["HF_HOME"] = str(tmp_path / "hf")
    env["SPARKPAIR_PROBE_OUT"] = str(tmp_path / "probe.json")
    cli = [sys.executable, "-m", "sparkpair_cli.main"]

    # 1. What this host fails (no RDMA, GPU, ...): waive exactly those ids.
    facts = tmp_path / "preflight.json"
    subprocess.run([*cli, "preflight", "--facts-out", str(facts)], env=env, capture_output=True, timeout=300)
    failed = sorted({r["id"] for r in json.loads(facts.read_text())["results"] if r["status"] == "fail"})
    if any(x not in CHECK_IDS for x in failed):
        pytest.skip(f"a preflight check crashed here (ids {failed}); not this test's subject")
    env["SPARKPAIR_PREFLIGHT_WAIVE"] = ",".join([*failed, "probe"])

    # 2. The container entrypoint, as compose runs it.
    log = tmp_path / "node.log"
    with log.open("wb") as fh:
        node = subprocess.Popen(
            [*cli, "node", "run", "--role", "head"],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{api_port}"
    try:
        deadline = time.monotonic() + float(os.environ.get("SPARKPAIR_TEST_SERVER_TIMEOUT", "600"))
        while True:
            assert node.poll() is None, f"node exited {node.returncode}:\n{log.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no /health in time:\n{log.read_text()[-4000:]}"
            try:
                if httpx.get(f"{base}/health", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(2)

        assert httpx.get(f"{base}/v1/models", timeout=30).status_code == 401
        bad = httpx.get(f"{base}/v1/models", headers={"Authorization": "Bearer nope"}, timeout=30)
        assert bad.status_code == 401
        ok = httpx.get(f"{base}/v1/models", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
        assert ok.status_code == 200 and ok.json()["data"][0]["id"] == "tiny", ok.text

        # The key travelled in the environment only.
        assert all(KEY not in c for c in cmdlines(node.pid))
        assert KEY not in log.read_text()
        # Bound to loopback only: the host's other address does not answer.
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"http://{ip}:{api_port}/health", timeout=5)

        # 3. The engine dies (what a lost peer leads to): vLLM exits 0, the node exits 5.
        pids = engine_core_pids(node.pid)
        assert pids, "no EngineCore process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        rc = node.wait(timeout=180)
        text = log.read_text()
        last = [x for x in text.splitlines() if x.strip()][-3:]
        print("node log tail:", *last, f"exit status {rc}", sep="\n")  # shown with -s / on failure
        assert rc == 5, f"node exited {rc}; log tail:\n" + "\n".join(last)
        joined = " ".join(" ".join(last).split())
        assert "node real-head (head): vLLM exited 0 after" in joined, joined
        assert "without a stop request" in joined and "exit 5" in joined, joined
        assert KEY not in text
    finally:
        if node.poll() is None:
            os.killpg(node.pid, signal.SIGTERM)
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
        try:
            os.killpg(node.pid, signal.SIGKILL)  # anything the node left behind
        except ProcessLookupError:
            pass

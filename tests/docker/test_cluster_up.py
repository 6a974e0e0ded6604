# ruff: noqa: E501  (docker/compose command lines read better unwrapped)
"""``sparkpair up | status | logs | down`` driving two Docker engines from one machine.

The head node's engine is this machine's socket (``unix://``); the worker node's engine is
reached over ``ssh://`` through a real sshd (a container holding the engine's socket), so
the Docker SDK and ``docker compose`` really go through ssh and ``docker system dial-stdio``,
as they do to a second Spark. Both "engines" are the one dockerd here, so the two nodes'
containers can share the simulation's bridge "fabric" (tests/docker/compose.sim.yaml).
One ``sparkpair up`` brings the pair to a passing verdict, ``status`` shows both nodes,
``down`` leaves no container. A node whose engine does not answer is refused first.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerlib import FABRIC_PREFIX, REPO, sh
from test_sim_pair import engine_limit, write_env

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(2400)]

NET, SIM_NET = FABRIC_PREFIX["test_cluster_up"], FABRIC_PREFIX["test_sim_pair"]
SUBNET, HEAD_IP, WORKER_IP, HEALTH_IP = NET + "0/24", NET + "11", NET + "12", NET + "13"
"""A subnet of its own (dockerlib.FABRIC_PREFIX)."""


def _sshd_image(standin: str) -> str:
    ctx = REPO / "tests" / "docker" / "sshd"
    docker_cli = shutil.which("docker")
    assert docker_cli, "no docker CLI on this machine"
    h = hashlib.sha256((ctx / "Dockerfile").read_bytes() + standin.encode()).hexdigest()[:10]
    tag = f"sparkpair-test-sshd:{h}"
    if sh("docker", "image", "inspect", tag, check=False).returncode != 0:
        build = Path(os.environ.get("TMPDIR", "/tmp")) / f"sparkpair-sshd-{uuid.uuid4().hex[:6]}"
        build.mkdir()
        shutil.copy2(ctx / "Dockerfile", build / "Dockerfile")
        shutil.copy2(docker_cli, build / "docker")
        try:
            sh("docker", "build", "-q", "-t", tag, "--build-arg", f"BASE={standin}", str(build), timeout=600)
        finally:
            shutil.rmtree(build, ignore_errors=True)
    return tag


@pytest.fixture(scope="module")
def ssh_engine(
    standin_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, dict[str, str]]]:
    """``(ssh://root@127.0.0.1:PORT, environ)``: an sshd in front of this machine's engine, and
    the environment in which ``ssh`` logs in with a generated key and a recorded host key (a
    ``ssh`` on PATH that adds ``-F <config>``: the operator's ~/.ssh/config on a real box)."""
    d = tmp_path_factory.mktemp("ssh")
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "id"))
    (d / "authorized_keys").write_text((d / "id.pub").read_text())
    (d / "authorized_keys").chmod(0o644)
    name = f"wt-ops-sshd-{uuid.uuid4().hex[:6]}"
    sh("docker", "run", "-d", "--name", name, "-p", "127.0.0.1::22",
       "-v", "/var/run/docker.sock:/var/run/docker.sock",
       "-v", f"{d / 'authorized_keys'}:/etc/ssh/sparkpair_keys:ro",
       _sshd_image(standin_image), "sh", "-c",
       "ssh-keygen -A && exec /usr/sbin/sshd -D -e -o AuthorizedKeysFile=/etc/ssh/sparkpair_keys "
       "-o PermitRootLogin=prohibit-password -o StrictModes=no")  # fmt: skip
    try:
        port = sh("docker", "port", name, "22").stdout.split()[0].rsplit(":", 1)[1]
        for _ in range(30):
            keys = sh("ssh-keyscan", "-p", port, "127.0.0.1", check=False).stdout
            if keys.strip():
                break
            time.sleep(1)
        (d / "known_hosts").write_text(keys)
        (d / "config").write_text(
            f"Host 127.0.0.1\n  IdentityFile {d / 'id'}\n  IdentitiesOnly yes\n  BatchMode yes\n"
            f"  UserKnownHostsFile {d / 'known_hosts'}\n  StrictHostKeyChecking yes\n"
        )
        (d / "bin").mkdir()
        shim = d / "bin" / "ssh"
        shim.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {d / "config"} "$@"\n')
        shim.chmod(0o755)
        env = dict(os.environ)
        env["PATH"] = f"{d / 'bin'}:{env['PATH']}"
        yield f"ssh://root@127.0.0.1:{port}", env
    finally:
        sh("docker", "rm", "-f", name, check=False)


def _env(path: Path, *, name: str, rank: int, ip: str, image: str, cache: Path, subnet: str = SUBNET) -> Path:
    """A node env: test_sim_pair's (on its subnet, validated there), moved to
    ``subnet`` (a /24 whose first three octets replace the sim pair's), validated again."""
    from sparkpair_cli.deploy.nodeenv import load_node_env_file

    prefix = subnet.rsplit(".", 1)[0] + "."
    write_env(path, name=name, rank=rank, ip=SIM_NET + ip.rsplit(".", 1)[1], image=image, cache=cache)
    path.write_text(path.read_text().replace(SIM_NET, prefix))
    load_node_env_file(path)
    return path


def _cli(env: dict[str, str], *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "sparkpair_cli.main", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, cwd=REPO)  # fmt: skip


def test_up_brings_both_engines_to_a_passing_verdict_status_shows_both_and_down_leaves_nothing(
    ssh_engine: tuple[str, dict[str, str]], sparkpair_image: str, model_cache: Path, tmp_path: Path
) -> None:
    ssh_url, env = ssh_engine
    head = _env(
        tmp_path / "head.env", name="sim-head", rank=0, ip=HEAD_IP, image=sparkpair_image, cache=model_cache
    )
    worker = _env(
        tmp_path / "worker.env",
        name="sim-worker",
        rank=1,
        ip=WORKER_IP,
        image=sparkpair_image,
        cache=model_cache,
    )
    project = f"wt-ops-cl{uuid.uuid4().hex[:6]}"
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        f"project: {project}\nproject_directory: {REPO}\n"
        "compose_files: [compose.yaml, tests/docker/compose.sim.yaml]\nverdict_timeout_s: 1500\n"
        "nodes:\n"
        f"  sim-worker: {{env_file: {worker}, docker: '{ssh_url}'}}\n"
        f"  sim-head: {{env_file: {head}, docker: 'unix:///var/run/docker.sock'}}\n"
    )
    env |= {
        "SIM_SUBNET": SUBNET,
        "SIM_HEAD_IP": HEAD_IP, "SIM_WORKER_IP": WORKER_IP, "SIM_HEALTH_IP": HEALTH_IP,
        "SIM_MEMLOCK": str(engine_limit("Max locked memory")), "SIM_NOFILE": str(engine_limit("Max open files")),
        "COLUMNS": "200",
    }  # fmt: skip
    try:
        # A worker engine that does not answer: refused, naming the node, before anything starts.
        dead = tmp_path / "dead.yaml"
        dead.write_text(cluster.read_text().replace(ssh_url, "ssh://root@127.0.0.1:9"))
        r = _cli(env, "up", "-c", str(dead), timeout=120)
        assert r.returncode == 3, r.stdout + r.stderr
        assert "node sim-worker: docker=ssh://root@127.0.0.1:9; unreachable" in r.stderr, r.stderr
        assert "nothing was started" in r.stderr
        assert (
            sh(
                "docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"
            ).stdout.strip()
            == ""
        )

        r = _cli(env, "up", "-c", str(cluster))
        assert r.returncode == 0, (r.stdout + r.stderr)[-6000:]
        assert "ready" in r.stdout
        # The worker node's containers were created through the ssh engine, the head's locally:
        # both nodes' services exist, each under the one compose project.
        ps = sh(
            "docker",
            "ps",
            "--format",
            "{{.Names}}",
            "--filter",
            f"label=com.docker.compose.project={project}",
        ).stdout.split()
        assert sorted(ps) == sorted(f"{project}-{s}-1" for s in ("head", "worker", "health")), ps

        r = _cli(env, "status", "-c", str(cluster), timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        for needle in ("sim-head", "sim-worker", ssh_url, f"{project}-worker-1", f"{project}-head-1",
                       "verdict", "ready", "canary:", "kernel plan:", "sparkpair-kernel-plan/1"):  # fmt: skip
            assert needle in r.stdout, (needle, r.stdout)

        r = _cli(env, "logs", "-c", str(cluster), "--tail", "50", timeout=120)
        assert r.returncode == 0, r.stderr
        assert "sim-worker/worker | " in r.stdout and "sim-head/head | " in r.stdout
    finally:
        r = _cli(env, "down", "-c", str(cluster), "--volumes", timeout=600)
        left = sh(
            "docker", "ps", "-aq", "--filter", f"label=com.docker.compose.project={project}"
        ).stdout.split()
        if left:
            sh("docker", "rm", "-f", *left, check=False)
        sh("docker", "network", "rm", f"{project}_fabric", check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert left == [], f"containers left after `sparkpair down`: {left}"


def test_a_node_whose_image_differs_or_is_missing_is_refused_before_anything_starts(
    ssh_engine: tuple[str, dict[str, str]], standin_image: str, model_cache: Path, tmp_path: Path
) -> None:
    from sparkpair_cli.cluster import ops
    from sparkpair_cli.cluster.spec import load_cluster

    ssh_url, env = ssh_engine
    other = _sshd_image(standin_image)  # a second image that exists on the engine
    head = _env(
        tmp_path / "head.env", name="sim-head", rank=0, ip=HEAD_IP, image=standin_image, cache=model_cache
    )
    worker = _env(
        tmp_path / "worker.env",
        name="sim-worker",
        rank=1,
        ip=WORKER_IP,
        image=standin_image,
        cache=model_cache,
    )
    cluster = tmp_path / "cluster.yaml"
    cluster.write_text(
        "nodes:\n"
        f"  sim-worker: {{env_file: {worker}, docker: '{ssh_url}'}}\n"
        f"  sim-head: {{env_file: {head}, docker: 'unix:///var/run/docker.sock'}}\n"
    )
    old_path = os.environ["PATH"]
    os.environ["PATH"] = env["PATH"]  # the ssh shim, for the SDK's ssh program
    try:
        _clients, problems = ops.refusals(load_cluster(cluster))
        assert problems == []  # the same image on both engines passes

        # An image the engines do not have: refused, naming the node and its engine. (Two ids
        # for one name need two engines with their own stores: tests/unit/cli/test_cluster_spec.py.)
        tag = f"wt-ops-cluster-img:{uuid.uuid4().hex[:6]}"
        sh("docker", "tag", other, tag)
        try:
            for p in (head, worker):
                p.write_text(
                    p.read_text().replace(f"SPARKPAIR_IMAGE={standin_image}", f"SPARKPAIR_IMAGE={tag}")
                )
            c = load_cluster(cluster)
            _clients, problems = ops.refusals(c)
            assert problems == [], problems
            sh("docker", "rmi", tag)
            _clients, problems = ops.refusals(c)
            assert any(
                f"node sim-worker: SPARKPAIR_IMAGE='{tag}' is not on the node's engine ({ssh_url})" in p
                for p in problems
            ), problems
        finally:
            sh("docker", "rmi", tag, check=False)
    finally:
        os.environ["PATH"] = old_path

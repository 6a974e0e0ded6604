"""Preflight run on the host: it reads the same env file as ``node validate`` by default, says
which checks judged the host's packages rather than the image's, and prints the command that
runs those inside the image on this node (a command Compose accepts)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

from sparkpair_cli.main import app
from typer.testing import CliRunner

HOSTS = Path(__file__).resolve().parents[2] / "fixtures" / "hosts"
REPO = Path(__file__).resolve().parents[3]


def run(args: list[str], env: dict[str, str | None]) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["preflight", *args], env={"COLUMNS": "300", **env})
    return r.exit_code, r.output


def node_env(tmp_path: Path) -> Path:
    p = tmp_path / "node-spark-b.env"
    text = (HOSTS / "spark-worker-good" / "node.env").read_text()
    p.write_text(text + f"SPARKPAIR_MODEL_CACHE={tmp_path}\n")
    return p


def test_on_the_host_the_image_checks_are_named_with_the_command_that_runs_them_there(tmp_path: Path) -> None:
    env_file = node_env(tmp_path)
    code, out = run(
        ["--env-file", str(env_file), "--only", "rdma,ptxas,flashinfer"], {"SPARKPAIR_NODE_NAME": None}
    )
    assert (
        "node spark-b: run on the host, these checks judged this host's packages and paths, not the image's:"
        in out
    )
    assert "ptxas: the ptxas Triton uses; flashinfer: FlashInfer's DSv4 decode table." in out
    cmd = next(x for x in out.splitlines() if x.strip().startswith("cd "))
    assert (
        f"--env-file {env_file} --profile worker run --rm --no-deps worker preflight --only ptxas,flashinfer"
        in cmd
    )
    # Compose takes that command line: the same program, file, profile and service render
    argv = shlex.split(cmd.split("&&", 1)[1])
    cut = argv.index("run")
    r = subprocess.run([*argv[:cut], "config", "--services"], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0 and r.stdout.split() == ["worker"], r.stderr


def test_preflight_reads_the_env_file_node_validate_reads_by_default(tmp_path: Path) -> None:
    env_file = node_env(tmp_path)
    code, out = run(["--only", "rdma", "--root", str(HOSTS / "spark-worker-good")],
                    {"SPARKPAIR_NODE_ENV": str(env_file), "SPARKPAIR_NODE_NAME": None})  # fmt: skip
    assert "node spark-b:" in out and code == 0, out
    code, out = run(["--env-file", str(tmp_path / "other.env"), "--only", "rdma"],
                    {"SPARKPAIR_NODE_ENV": str(env_file), "SPARKPAIR_NODE_NAME": None})  # fmt: skip
    assert code == 2 and "name two different node env files" in " ".join(out.split())

"""A build context as ``docker build`` makes it, and the settings files planted in a checkout to
check that none of them is sent (test-only: tests/unit/repo/test_build_context.py and
tests/docker/test_image_context.py import it)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from docker.utils.build import exclude_paths

NODE_ENV = "SPARKPAIR_NODE_NAME=spark-b\nVLLM_HOST_IP=192.168.177.12\nSPARKPAIR_API_KEY={marker}\n"
CLUSTER = "nodes:\n  spark-b: {{env_file: node-spark-b.env, docker: 'ssh://me@spark-b'}}  # {marker}\n"

PLANTED = {
    ".env": NODE_ENV,
    "node.env": NODE_ENV,
    "configs/node.env": NODE_ENV,
    "configs/node-spark-b.env": NODE_ENV,
    "configs/spark-b": NODE_ENV,
    "configs/spark-b.settings": NODE_ENV,
    "configs/cluster.yaml": CLUSTER,
    "configs/my-pair.yml": CLUSTER,
    "configs/bench/node.env": NODE_ENV,
    "configs/profiles/node-spark-b.env": NODE_ENV,
    "overlay/node.env": NODE_ENV,
    "healthchecks/api-key": "{marker}\n",
    "scripts/spark-b.env": NODE_ENV,
    "scripts/sparkpair_cli/cluster.yaml": CLUSTER,
    "scripts/sparkpair_cli/node-spark-b.env": NODE_ENV,
    "overlay/sparkpair_overlay/.env": NODE_ENV,
}
"""Where an operator (or a tool) leaves a node's settings: the names configs/cluster.yaml.example
uses, the compose default, and names nobody would put on a deny-list."""

SETTINGS_SHAPE = re.compile(
    r"^\s*(export\s+)?(SPARKPAIR_NODE_NAME|VLLM_HOST_IP|SPARKPAIR_API_KEY|NCCL_IB_HCA)\s*=", re.M
)
CLUSTER_SHAPE = re.compile(r"^nodes:\s*$(?:\n\s+.*)*?\benv_file\b", re.M)


def dockerignore(root: Path) -> list[str]:
    """``.dockerignore`` as ``docker.api.build.BuildApiMixin.build`` reads it (docker 7.1)."""
    lines = (root / ".dockerignore").read_text().splitlines()
    return [x for x in (line.strip() for line in lines) if x and not x.startswith("#")]


def context_files(root: Path) -> set[str]:
    """The files ``docker build root`` sends (relative paths)."""
    return {p for p in exclude_paths(str(root), dockerignore(root)) if (root / p).is_file()}


def held_secret(path: Path, markers: list[str]) -> str | None:
    text = path.read_text(errors="replace")
    if any(m in text for m in markers):
        return "a planted key"
    if SETTINGS_SHAPE.search(text):
        return "node settings (KEY=VALUE lines of a node env file)"
    if CLUSTER_SHAPE.search(text):
        return "a cluster file (nodes with env files)"
    return None


def planted_checkout(repo: Path, root: Path) -> list[str]:
    """Copy ``repo``'s tracked files to ``root`` and write :data:`PLANTED` there, each with its
    own marker key; return the markers."""
    files = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True, check=True).stdout
    for f in files.split():
        if (repo / f).is_file():
            (root / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(repo / f, root / f)
    markers = []
    for i, (rel, text) in enumerate(PLANTED.items()):
        markers.append(f"sk-planted-{i:02d}-{rel.replace('/', '-')}")
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text.format(marker=markers[-1]))
    return markers

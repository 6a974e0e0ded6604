"""No node env file, cluster file or key reaches the image's build context or git.

The context is built as ``docker build`` builds it: the Docker SDK's own ``.dockerignore``
matching (``docker.utils.build.exclude_paths``, what ``APIClient.build`` sends; the docker
tier checks the engine agrees, tests/docker/test_image_context.py), over a copy of the
checkout where files holding a key and a node's addresses were written under the names and
folders an operator uses, and under names no deny-list would guess.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from build_context import PLANTED, context_files, held_secret, planted_checkout

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def checkout(tmp_path: Path) -> tuple[Path, list[str]]:
    """The tracked files of this checkout copied to a folder, plus the planted files."""
    root = tmp_path / "checkout"
    return root, planted_checkout(REPO, root)


def test_no_file_holding_a_key_or_an_address_is_sent_to_the_engine(
    checkout: tuple[Path, list[str]],
) -> None:
    root, markers = checkout
    sent = context_files(root)
    leaked = {p: why for p in sorted(sent) if (why := held_secret(root / p, markers))}
    assert leaked == {}, leaked
    assert not set(PLANTED) & sent


def test_the_context_still_holds_what_the_image_is_built_from(checkout: tuple[Path, list[str]]) -> None:
    root, _ = checkout
    sent = context_files(root)
    for need in ("pyproject.toml", "README.md", "Dockerfile", "overlay/PATCHES.md",
                 "configs/profiles/deepseek-v4-flash.yaml", "configs/bench/quick.yaml",
                 "scripts/sparkpair_cli/main.py", "healthchecks/sparkpair_health/gateway/core.py",
                 "healthchecks/sparkpair_serving/profile.py",
                 "overlay/sparkpair_overlay/__init__.py"):  # fmt: skip
        assert need in sent, need
    # only the shipped examples' folder neighbours: no example, key stand-in or env file of configs/
    assert not {
        p
        for p in sent
        if p.startswith("configs/") and not p.startswith(("configs/profiles/", "configs/bench/"))
    }


def test_the_check_would_catch_a_deny_list(checkout: tuple[Path, list[str]], tmp_path: Path) -> None:
    """Against the old deny-list (.dockerignore naming node.env and *.node.env), the planted
    settings are sent and named: the check can fail."""
    root, markers = checkout
    (root / ".dockerignore").write_text(
        "*\n!pyproject.toml\n!README.md\n!overlay/\n!healthchecks/\n!scripts/\n!configs/\n"
        "**/__pycache__\nconfigs/node.env\nconfigs/*.node.env\n"
    )
    sent = context_files(root)
    leaked = {p for p in sent if held_secret(root / p, markers)}
    assert {"configs/node-spark-b.env", "configs/cluster.yaml", "configs/spark-b"} <= leaked


def test_git_versions_no_node_env_or_cluster_file_but_the_examples_and_fixtures() -> None:
    def ignored(path: str) -> bool:
        r = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
        return r.returncode == 0

    for rel in PLANTED:
        if rel.startswith(("configs/", ".env", "node.env")) or rel.endswith((".env", "cluster.yaml")):
            assert ignored(rel), f"git would version {rel}"
    for rel in ("configs/node.env.example", "configs/cluster.yaml.example", "configs/no-api-key",
                "configs/profiles/deepseek-v4-flash.yaml", "configs/bench/quick.yaml",
                "tests/fixtures/hosts/spark-head-good/node.env", "compose.yaml"):  # fmt: skip
        assert not ignored(rel), f"git would not version {rel}"

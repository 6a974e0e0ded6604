"""compose.yaml's API key secret and restart policy, rendered by
the real Compose v2 binary from configs/node.env.example."""

from __future__ import annotations

from pathlib import Path

import compose_rules as cr
import pytest

REPO = Path(__file__).resolve().parents[3]
SECRET = "/run/secrets/sparkpair_api_key"


def render(tmp_path: Path, key_file: str, profiles: tuple[str, ...] = ("head", "worker")) -> dict:
    text = (REPO / "configs" / "node.env.example").read_text()
    (tmp_path / "models").mkdir(exist_ok=True)
    text = text.replace(
        "SPARKPAIR_MODEL_CACHE=/srv/sparkpair/models", f"SPARKPAIR_MODEL_CACHE={tmp_path / 'models'}"
    )
    assert "\nSPARKPAIR_API_KEY_FILE=\n" in text
    text = text.replace("\nSPARKPAIR_API_KEY_FILE=\n", f"\nSPARKPAIR_API_KEY_FILE={key_file}\n")
    env = tmp_path / "node.env"
    env.write_text(text)
    return cr.render(REPO, env_file=env, profiles=profiles)


def test_a_key_file_on_the_host_becomes_the_heads_secret(tmp_path: Path) -> None:
    key = tmp_path / "api-key"
    key.write_text("sk-compose\n")
    cfg = render(tmp_path, str(key))
    assert cfg["secrets"]["sparkpair_api_key"]["file"] == str(key)
    head = cfg["services"]["head"]
    assert {"source": "sparkpair_api_key", "target": SECRET} in head["secrets"]
    assert head["environment"]["SPARKPAIR_API_KEY_FILE"] == SECRET
    # the key is in no rendered value: only the path is
    assert "sk-compose" not in str(cfg)


def test_no_key_file_means_no_key_in_the_containers(tmp_path: Path) -> None:
    cfg = render(tmp_path, "")
    assert cfg["services"]["head"]["environment"]["SPARKPAIR_API_KEY_FILE"] == ""
    assert cfg["secrets"]["sparkpair_api_key"]["file"] == str(REPO / "configs" / "no-api-key")


@pytest.mark.parametrize("svc", ["head", "worker"])
def test_both_nodes_restart_on_failure_within_the_bound(tmp_path: Path, svc: str) -> None:
    cfg = render(tmp_path, "")
    restart = cfg["services"][svc]["restart"]
    assert restart.startswith("on-failure:"), restart
    assert 1 <= int(restart.split(":")[1]) <= cr.MAX_RESTARTS
    assert cr.check_config(cfg) == []


def test_the_docs_name_the_secret_compose_declares() -> None:
    compose = (REPO / "compose.yaml").read_text()
    docs = (REPO / "docs" / "deploy.md").read_text()
    assert "sparkpair_api_key:" in compose
    assert "sparkpair_api_key" in docs and "SPARKPAIR_API_KEY_FILE" in docs

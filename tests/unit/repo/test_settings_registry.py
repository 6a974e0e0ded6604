"""One settings surface: the registry (``sparkpair_overlay.settings_registry``) names every
``SPARKPAIR_*`` setting the code, compose file, Dockerfile and scripts use; the schemas that parse
them agree with it on names and defaults; docs/reference/settings.md is what it generates."""

from __future__ import annotations

import re
from pathlib import Path

from sparkpair_overlay import envs
from sparkpair_overlay import settings_registry as sr

ROOT = Path(__file__).resolve().parents[3]
NAME = re.compile(r"SPARKPAIR_[A-Z0-9_]*[A-Z0-9]")
#: Where a setting can be read or set: the three packages, the deploy files, the developer scripts.
SOURCES = ("overlay", "healthchecks", "scripts", "configs", "compose.yaml", "Dockerfile")
SCHEMA_READERS = {"node", "overlay", "gateway", "compose", "cli"}


def names_used(root: Path) -> dict[str, str]:
    """Every ``SPARKPAIR_*`` name in the text files under ``SOURCES`` of ``root``, with one place."""
    seen: dict[str, str] = {}
    for top in SOURCES:
        base = root / top
        files = [base] if base.is_file() else sorted(p for p in base.rglob("*") if p.is_file())
        for path in files:
            if "__pycache__" in path.parts:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for n, line in enumerate(text.splitlines(), 1):
                for name in NAME.findall(line):
                    seen.setdefault(name, f"{path.relative_to(root)}:{n}")
    return seen


def unregistered(used: dict[str, str]) -> list[str]:
    known = {s.name for s in sr.SETTINGS} | set(envs.RENAMED)
    return [f"{name} ({where})" for name, where in sorted(used.items()) if name not in known]


def _env_text(value: object) -> str:
    """A schema default as an env file writes it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    secret = getattr(value, "get_secret_value", None)
    return str(secret() if secret else value)


def test_every_sparkpair_name_in_the_code_is_registered() -> None:
    assert unregistered(names_used(ROOT)) == []


def test_the_scan_fails_on_a_name_the_registry_lacks(tmp_path: Path) -> None:
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "x.py").write_text('os.environ.get("SPARKPAIR_NEW_KNOB")\nSPARKPAIR_ROUTER\n')
    assert unregistered(names_used(tmp_path)) == ["SPARKPAIR_NEW_KNOB (scripts/x.py:1)"]


def test_the_overlay_schema_is_the_registrys_overlay_rows() -> None:
    rows = {s.name: s for s in sr.read_by("overlay") if s.name.startswith("SPARKPAIR_")}
    assert set(rows) == set(envs.REGISTRY)
    assert {n: v.default for n, v in envs.REGISTRY.items()} == {n: s.default for n, s in rows.items()}


def test_the_node_env_schema_is_the_registrys_node_rows() -> None:
    from sparkpair_cli.deploy.nodeenv import NodeEnv

    rows = {s.name: s for s in sr.read_by("node")}
    assert set(NodeEnv.model_fields) == set(rows)
    for name, field in NodeEnv.model_fields.items():
        want = sr.REQUIRED if field.is_required() else _env_text(field.default)
        assert rows[name].default == want, name


def test_the_gateway_schema_is_the_registrys_gateway_rows() -> None:
    from sparkpair_health.gateway.settings import ENV_PREFIX, GatewaySettings

    rows = {s.name: s for s in sr.read_by("gateway")}
    fields = {ENV_PREFIX + f.upper(): f for f in GatewaySettings.model_fields}
    assert set(fields) <= set(rows)
    # A gateway row that is not a field is read by the settings module itself (a default's source).
    source = (ROOT / "healthchecks" / "sparkpair_health" / "gateway" / "settings.py").read_text()
    assert all(name in source for name in set(rows) - set(fields)), sorted(set(rows) - set(fields))
    for name, f in fields.items():
        field = GatewaySettings.model_fields[f]
        if field.default_factory is not None:
            continue  # computed (from the profile or the environment): the row says where from
        want = sr.READER_DEFAULTS.get(("gateway", name), rows[name].default)
        assert _env_text(field.default) == want, name


def test_the_env_file_key_check_knows_exactly_the_registered_settings() -> None:
    from sparkpair_cli.deploy import nodeenv_keys

    wanted = {
        s.name for s in sr.SETTINGS if s.name.startswith("SPARKPAIR_") and SCHEMA_READERS & set(s.readers)
    }
    assert nodeenv_keys.known_keys() == wanted
    # Read by compose.yaml, the node entrypoint or the CLI rather than (only) by a schema.
    assert all({"compose", "cli"} & set(sr.by_name(k).readers) for k in nodeenv_keys.COMPOSE_ONLY_KEYS)


def test_docs_reference_settings_is_generated_and_current() -> None:
    doc = ROOT / "docs" / "reference" / "settings.md"
    assert doc.read_text(encoding="utf-8") == sr.markdown(), (
        "docs/reference/settings.md is stale: python -m sparkpair_overlay.settings_registry "
        "> docs/reference/settings.md"
    )
    assert all(f"`{s.name}`" in doc.read_text(encoding="utf-8") for s in sr.SETTINGS)

"""Model profiles: how a model is served and which health checks apply to it.

A profile is a YAML file in ``configs/profiles/`` (or any path). The schema is
validated with pydantic; a bad file raises :class:`ProfileError` naming the file,
the key, the value seen and what was wanted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

PROFILES_DIR = Path(__file__).resolve().parents[2] / "configs" / "profiles"
"""``configs/profiles`` of a source checkout (also the layout inside the image)."""


class ProfileError(ValueError):
    """A profile is missing or does not match the schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServerSpec(_Strict):
    """How ``vllm serve`` is started for this model."""

    model: str = Field(description="model path or hub id; 'generated:tiny' makes the demo model")
    max_model_len: int = Field(gt=0, description="tokens; passed as --max-model-len")
    tensor_parallel_size: int = Field(1, ge=1)
    args: list[str] = Field(default_factory=list, description="further vllm serve arguments")
    env: dict[str, str] = Field(default_factory=dict, description="environment for the server")


class SemanticSpec(_Strict):
    """Checks that need a trained model (expected answers, thinking)."""

    enabled: bool = False
    skip_reason: str = ""
    expected_answers: list[dict[str, str]] = Field(
        default_factory=list, description="[{prompt: ..., contains: ...}], greedy"
    )


class ChecksSpec(_Strict):
    """Which checks run and with which request settings."""

    semantic: SemanticSpec = Field(default_factory=SemanticSpec)
    tools: bool = True
    thinking: bool = False
    extra: dict[str, Any] = Field(default_factory=dict, description="per-check settings")


class Profile(_Strict):
    """One model profile."""

    name: str
    served_model_name: str
    description: str = ""
    server: ServerSpec
    checks: ChecksSpec = Field(default_factory=ChecksSpec)


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a profile by name (``configs/profiles/<name>.yaml``) or by path.

    Raises:
        ProfileError: no such profile, YAML that does not parse, or a schema mismatch.
    """
    p = Path(name_or_path)
    if not p.suffix:
        p = PROFILES_DIR / f"{name_or_path}.yaml"
    if not p.is_file():
        known = sorted(x.stem for x in PROFILES_DIR.glob("*.yaml")) if PROFILES_DIR.is_dir() else []
        raise ProfileError(f"profile {name_or_path!r}: no file {p}; known profiles: {', '.join(known)}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as e:
        raise ProfileError(f"profile {p}: not valid YAML: {e}") from None
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (seen {err.get('input')!r})"
            for err in e.errors()
        )
        raise ProfileError(f"profile {p}: {problems}") from None

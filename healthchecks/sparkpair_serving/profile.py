"""Model profiles: how a model is served and which health checks apply to it.

A profile is a YAML file in ``configs/profiles/`` (or any path). The schema is
validated with pydantic; a bad file raises :class:`ProfileError` naming the file,
the key, the value seen and what was wanted.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .inputs import load_yaml, read_small_file


def _configs_dir() -> Path:
    """``configs/`` of a source checkout (also the layout inside the image), else the copy a
    non-editable ``pip install .`` puts under ``<prefix>/share/sparkpair/configs``
    (``[tool.setuptools.data-files]`` in pyproject.toml)."""
    checkout = Path(__file__).resolve().parents[2] / "configs"
    if (checkout / "profiles").is_dir():
        return checkout
    return Path(sys.prefix) / "share" / "sparkpair" / "configs"


CONFIGS_DIR = _configs_dir()
"""The ``configs`` folder the shipped profiles and bench workloads are read from."""

PROFILES_DIR = CONFIGS_DIR / "profiles"
"""``configs/profiles``: the profiles a name (``tiny-demo``) resolves to."""


class ProfileError(ValueError):
    """A profile is missing or does not match the schema."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SpeculationSpec(_Strict):
    """Speculative decoding of the served model, rendered as ``--speculative-config`` JSON.

    Every field's meaning is vLLM's ``SpeculativeConfig`` (``vllm/config/speculative.py``,
    vLLM 0.32 and 0.33); the tests of the ``stack`` tier construct 0.33's own config from
    :meth:`config_json` (docs/reference/speculation.md).

    Attributes:
        method: vLLM's speculative method (``dspark`` for DeepSeek-V4's DSpark draft, ``ngram``
            for prompt lookup, which the CPU build runs).
        num_speculative_tokens: draft tokens per step, k. A verify step of ``max_num_seqs``
            sequences scores ``max_num_seqs * (k + 1)`` tokens (:meth:`ServerSpec.verify_tokens`).
        draft_sample_method: ``greedy`` or ``probabilistic`` (vLLM 0.33's
            ``DraftSampleMethod``); ``None`` leaves vLLM's default and sends no key (vLLM 0.32
            has no such field).
        extra: further ``SpeculativeConfig`` fields (e.g. ``prompt_lookup_max`` for ngram).
    """

    method: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    num_speculative_tokens: int = Field(ge=1, le=64, strict=True)
    draft_sample_method: Literal["greedy", "probabilistic"] | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _extra_does_not_override(self) -> SpeculationSpec:
        own = sorted({"method", "num_speculative_tokens", "draft_sample_method"} & set(self.extra))
        if own:
            raise ValueError(
                f"speculation.extra sets {own}; wanted them only as the speculation fields of the "
                "same names (the checks and the capture size read those)"
            )
        return self

    def config_json(self) -> str:
        """The ``--speculative-config`` value: compact JSON, keys in a fixed order."""
        d: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.num_speculative_tokens}
        if self.draft_sample_method is not None:
            d["draft_sample_method"] = self.draft_sample_method
        d.update(self.extra)
        return json.dumps(d, separators=(",", ":"))


def arg_value(args: list[str], *names: str) -> str | None:
    """The value of the first of ``names`` in an argv list (``--x V`` or ``--x=V``), else ``None``."""
    for i, a in enumerate(args):
        for n in names:
            if a == n and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(n + "="):
                return a.split("=", 1)[1]
    return None


class ServerSpec(_Strict):
    """How ``vllm serve`` is started for this model."""

    model: str = Field(description="model path or hub id; 'generated:tiny' makes the demo model")
    max_model_len: int = Field(gt=0, description="tokens; passed as --max-model-len")
    tensor_parallel_size: int = Field(default=1, ge=1)
    args: list[str] = Field(default_factory=list, description="further vllm serve arguments")
    env: dict[str, str] = Field(default_factory=dict, description="environment for the server")
    speculation: SpeculationSpec | None = Field(default=None, description="speculative decoding; None: off")

    def max_num_seqs(self) -> int | None:
        """``--max-num-seqs`` of :attr:`args` (sequences), ``None`` when the profile leaves vLLM's default."""
        v = arg_value(self.args, "--max-num-seqs")
        return int(v) if v is not None else None

    def verify_tokens(self) -> int | None:
        """Tokens of the largest verify step, ``max_num_seqs * (k + 1)``; ``None`` without
        speculation or without ``--max-num-seqs``. With speculation every decode step of
        ``max_num_seqs`` sequences scores the last accepted token plus k drafts per sequence
        (docs/reference/speculation.md)."""
        seqs = self.max_num_seqs()
        if self.speculation is None or seqs is None:
            return None
        return seqs * (self.speculation.num_speculative_tokens + 1)

    def serve_args(self) -> list[str]:
        """:attr:`args` followed by ``--speculative-config <json>`` when :attr:`speculation` is set."""
        if self.speculation is None:
            return list(self.args)
        return [*self.args, "--speculative-config", self.speculation.config_json()]

    @model_validator(mode="after")
    def _speculation_consistent(self) -> ServerSpec:
        if self.speculation is None:
            return self
        if arg_value(self.args, "--speculative-config", "-sc") is not None:
            raise ValueError(
                "server.args has --speculative-config and server.speculation is set; wanted only "
                "server.speculation (it renders --speculative-config)"
            )
        cap, want = arg_value(self.args, "--max-cudagraph-capture-size"), self.verify_tokens()
        if cap is not None and want is not None and int(cap) != want:
            k = self.speculation.num_speculative_tokens
            raise ValueError(
                f"server.args --max-cudagraph-capture-size is {cap}; wanted max_num_seqs x (k + 1) = "
                f"{self.max_num_seqs()} x ({k} + 1) = {want}, so every verify step of a full batch "
                "runs in a captured graph (docs/reference/speculation.md)"
            )
        return self


class ExpectedAnswer(_Strict):
    """One greedy question with a known answer (field-bugs.md B15)."""

    prompt: str
    contains: str = Field(description="case-insensitive substring the answer must contain")
    finish_reason: str = Field(
        default="stop", description="wanted finish_reason ('stop': the model ended by itself)"
    )
    max_tokens: int = Field(default=32, gt=0, description="tokens")


class SemanticSpec(_Strict):
    """Checks that need a trained model (expected answers).

    A disabled semantic check is reported as ``skip`` with ``skip_reason``.
    """

    enabled: bool = False
    skip_reason: str = ""
    expected_answers: list[ExpectedAnswer] = Field(default_factory=list, description="greedy, thinking off")


def _bool_to_enabled(v: Any) -> Any:
    return {"enabled": v} if isinstance(v, bool) else v


class ToolsSpec(_Strict):
    """Forced tool-call checks (``tool_choice`` ``required`` and a named function), strict tools.

    Attributes:
        enabled: run the tool checks (the server needs a ``--tool-call-parser``).
        skip_reason: stated in the report when disabled.
        max_tokens: completion budget of a tool-call request, tokens.
        suppress_whitespace_tokens: bias the JSON whitespace tokens (``' '``, ``\\n``, ``\\r``,
            ``\\t``, each looked up with the server's ``/tokenize``) by -100 via ``logit_bias``.
            Only for random-weight models: vLLM constrains strict tool arguments with an
            xgrammar structural tag that allows unbounded whitespace between JSON tokens, and
            ``--structured-outputs-config '{"disable_any_whitespace": true}'`` does not reach
            structural tags in vLLM 0.32, so a random model can pick whitespace until
            ``max_tokens``. A trained model never needs this.
        request_extra: further request fields merged into every tool-call request
            (e.g. ``parallel_tool_calls: false``, ``chat_template_kwargs``).
        named_finish_reasons: finish_reason values accepted for a *named* tool choice. The
            OpenAI API answers a named ``tool_choice`` with ``stop`` and vLLM 0.32 follows it;
            ``required`` must always end with ``tool_calls``.
    """

    enabled: bool = True
    skip_reason: str = ""
    max_tokens: int = Field(default=96, gt=0)
    suppress_whitespace_tokens: bool = False
    request_extra: dict[str, Any] = Field(default_factory=dict)
    named_finish_reasons: list[str] = Field(default_factory=lambda: ["tool_calls", "stop"])


class ThinkingSpec(_Strict):
    """Thinking-mode checks: reasoning present when on, absent when off
    (docs/reference/vllm-code-paths.md#thinking)."""

    enabled: bool = False
    skip_reason: str = "the model has no thinking mode"
    on_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"chat_template_kwargs": {"thinking": True}},
        description="request fields that turn thinking on",
    )
    off_kwargs: dict[str, Any] = Field(
        default_factory=lambda: {"chat_template_kwargs": {"thinking": False, "enable_thinking": False}},
        description="request fields that turn thinking off",
    )
    max_tokens: int = Field(default=512, gt=0)


class LongPromptSpec(_Strict):
    """Long-prompt checks: accepted close to ``max_model_len``, rejected (HTTP 400) just over it.

    Attributes:
        enabled: run both long-prompt checks.
        accept_tokens: prompt length (tokens) of the accepted probe; ``None`` means
            ``max_model_len - margin_tokens`` (the server's reported ``max_model_len``).
        margin_tokens: tokens left below ``max_model_len`` for the accepted probe's answer.
    """

    enabled: bool = True
    skip_reason: str = ""
    accept_tokens: int | None = Field(default=None, gt=0)
    margin_tokens: int = Field(default=8, ge=2)


REMOVED_DSV4_SETTINGS: dict[str, str] = {
    "base_url": "the suite's base URL (--base-url / SPARKPAIR_BASE_URL)",
    "served_model_name": "the profile's served_model_name (or --served-model-name)",
    "api_key": "the suite's API key (SPARKPAIR_API_KEY / --api-key-file)",
    "request_timeout_s": "the suite's long-prompt timeout (timeouts.long_prompt_s, "
    "SPARKPAIR_LONG_PROMPT_TIMEOUT_S)",
    "check_timeout_s": "the check's own timeout times timeouts.check_scale",
    "semantic_enabled": "checks.semantic.enabled",
    "semantic_skip_reason": "checks.semantic.skip_reason",
    "thinking_enabled": "checks.thinking.enabled",
    "thinking_skip_reason": "checks.thinking.skip_reason",
    "thinking_max_tokens": "checks.thinking.max_tokens",
    "thinking_default": "the server's --default-chat-template-kwargs in server.args",
    "tools_enabled": "checks.tools.enabled",
    "expected_answers": "checks.semantic.expected_answers",
    "answer_max_tokens": "checks.semantic.expected_answers[].max_tokens",
    "long_context_shifts": "the needle probe's exact prompt lengths around checks.dsv4.long_context_tokens "
    "(every residue modulo 4, one token either side of multiples of 64 and 128)",
    "long_context_tolerance": "an exact comparison: usage.prompt_tokens must equal the server's /tokenize "
    "count of the prompt sent",
}
"""Settings of the removed ``DSV4CheckSettings`` (once given as ``SPARKPAIR_DSV4`` JSON or
``checks.extra.dsv4``) that are not fields of :class:`DSV4Spec`, and what replaces each."""


def removed_dsv4_setting(key: str, where: str) -> str:
    """The error for a removed DeepSeek-V4 check setting ``key`` given in ``where``: names
    the setting and what replaces it (:data:`REMOVED_DSV4_SETTINGS`, else a
    ``checks.dsv4`` field)."""
    if key in REMOVED_DSV4_SETTINGS:
        return f"{where}: {key!r} was removed; it is now {REMOVED_DSV4_SETTINGS[key]}"
    if key in DSV4Spec.model_fields:
        return f"{where}: {key!r} was removed; it is now the profile field checks.dsv4.{key}"
    return (
        f"{where}: {key!r} is not a DeepSeek-V4 check setting; wanted a field of checks.dsv4 "
        f"({', '.join(DSV4Spec.model_fields)})"
    )


def removed_dsv4_env(env: Mapping[str, str]) -> str | None:
    """The error for ``SPARKPAIR_DSV4_<FIELD>`` variables in ``env`` (the removed
    ``DSV4CheckSettings`` named them so), each with the setting that replaces it; ``None``
    when there are none. ``SPARKPAIR_DSV4_CHECKS`` (the gateway's switch) is not one."""
    # Matched in any case, as the gateway's settings are read (pydantic-settings).
    stale = sorted(
        k for k in env if k.upper().startswith("SPARKPAIR_DSV4_") and k.upper() != "SPARKPAIR_DSV4_CHECKS"
    )
    if not stale:
        return None
    n = len("SPARKPAIR_DSV4_")
    return "; ".join(removed_dsv4_setting(k[n:].lower(), k) for k in stale)


class DSV4Spec(_Strict):
    """Settings of the model checks (``dsv4.*``): long context and soak. Times are seconds,
    lengths tokens. Whether a check applies comes from the rest of the profile (semantic,
    thinking, tools).

    Attributes:
        seed: sampling seed of the model checks' requests.
        long_context_tokens: target prompt length of the needle probe, tokens (at least 192);
            the probe's exact lengths lie around the largest multiple of 128 not above it
            (``checks.long_context.probe_lengths``: every residue modulo 4, one token either
            side of multiples of 64 and 128).
        long_context_depths: where the needle sits, as fractions of the prompt: 0 the very
            start, 1 the very end (just before the question); each in [0, 1].
        long_context_answer_tokens: ``max_tokens`` of a needle answer.
        soak_requests: sequential soak requests; 0 turns the soak off (it is not part of the
            3-minute suite).
        soak_long_tokens / soak_short_tokens: output lengths of the long and short soak requests.
        soak_first_token_budget_s: prefill + queue allowance per soak request, seconds.
        soak_min_decode_tok_s: slowest acceptable decode, tokens/s.
    """

    seed: int = 0
    long_context_tokens: int = Field(default=48_000, ge=192)
    long_context_depths: list[Annotated[float, Field(ge=0.0, le=1.0)]] = Field(
        default_factory=lambda: [0.0, 0.5, 1.0]
    )
    long_context_answer_tokens: int = Field(default=32, gt=0)
    soak_requests: int = Field(default=0, ge=0)
    soak_long_tokens: int = Field(default=1000, gt=0)
    soak_short_tokens: int = Field(default=64, gt=0)
    soak_first_token_budget_s: float = Field(default=30.0, gt=0)
    soak_min_decode_tok_s: float = Field(default=8.0, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        if isinstance(data, dict):
            gone = [k for k in data if k in REMOVED_DSV4_SETTINGS]
            if gone:
                raise ValueError("; ".join(removed_dsv4_setting(k, "checks.dsv4") for k in gone))
        return data


class SpeculationChecksSpec(_Strict):
    """Settings of the speculation checks (``checks.speculation``); they run only when
    ``server.speculation`` is set.

    Attributes:
        acceptance_floor: lowest acceptance rate (accepted / drafted tokens, 0..1) over the
            suite's requests that passes, when the profile gives no per-kind rates. The field
            measured ~0.73 for DSpark on chat and 0.15-0.22 once a tool-call grammar constrained
            the output (docs/reference/speculation.md).
        chat_acceptance / tool_acceptance: the acceptance rate expected on chat (and reasoning)
            tokens and on tool-call tokens. With both set, the floor is derived from the suite's
            own mix at run time: ``floor_margin`` x the rates weighted by the tokens the suite's
            chat and tool-call requests generated (``usage.completion_tokens``;
            docs/reference/numerics.md, "Speculation acceptance on the suite's mix").
        floor_margin: the fraction of the expected rate that still passes (0..1).
        min_draft_tokens: draft tokens the server must count during the suite for speculation
            to be called active.
        concurrency: concurrent greedy requests of the batch check; ``None`` means the
            profile's ``--max-num-seqs`` (so the verify step is the largest captured size).
        max_tokens: tokens per request of the batch check.
    """

    acceptance_floor: float = Field(default=0.3, ge=0.0, le=1.0)
    chat_acceptance: float | None = Field(default=None, ge=0.0, le=1.0)
    tool_acceptance: float | None = Field(default=None, ge=0.0, le=1.0)
    floor_margin: float = Field(default=0.6, gt=0.0, le=1.0)
    min_draft_tokens: int = Field(default=1, ge=1)
    concurrency: int | None = Field(default=None, ge=2)
    max_tokens: int = Field(default=48, gt=0)


class ChecksSpec(_Strict):
    """Which checks run and with which request settings."""

    semantic: SemanticSpec = Field(default_factory=SemanticSpec)
    tools: ToolsSpec = Field(default_factory=ToolsSpec)
    thinking: ThinkingSpec = Field(default_factory=ThinkingSpec)
    long_prompt: LongPromptSpec = Field(default_factory=LongPromptSpec)
    speculation: SpeculationChecksSpec = Field(default_factory=SpeculationChecksSpec)
    prompt: str = Field(
        default="Say hello to the pair of Sparks.", description="prompt of the protocol checks"
    )
    max_tokens: int = Field(default=24, gt=0, description="tokens per protocol-check completion")
    request_extra: dict[str, Any] = Field(
        default_factory=dict, description="fields merged into every chat request (e.g. thinking off)"
    )
    dsv4: DSV4Spec = Field(default_factory=DSV4Spec, description="model-check settings (dsv4.*)")

    @model_validator(mode="before")
    @classmethod
    def _booleans(cls, data: Any) -> Any:
        # ``tools: true`` / ``thinking: false`` (the short form) mean ``{enabled: ...}``.
        if isinstance(data, dict):
            data = dict(data)
            if "extra" in data:
                raise ValueError(
                    "checks.extra was removed: the DeepSeek-V4 check settings are typed fields "
                    "under checks.dsv4 (e.g. checks.dsv4.long_context_tokens; docs/health-verdict.md)"
                )
            for k in ("tools", "thinking", "long_prompt"):
                if k in data:
                    data[k] = _bool_to_enabled(data[k])
        return data


class Profile(_Strict):
    """One model profile."""

    name: str
    served_model_name: str
    description: str = ""
    server: ServerSpec
    checks: ChecksSpec = Field(default_factory=ChecksSpec)

    @property
    def is_dsv4(self) -> bool:
        """Whether this profile serves DeepSeek-V4 (its tokenizer mode or its model id)."""
        return "deepseek_v4" in " ".join(self.server.args) or "deepseek-v4" in self.server.model.lower()


def _looks_like_path(name: str) -> bool:
    return "/" in name or "\\" in name or name.startswith(("~", "."))


PROFILE_ENV = "SPARKPAIR_PROFILE"
"""The environment variable naming the profile (the node env file sets it; compose passes it on)."""


def known_profiles() -> list[str]:
    """Names of the shipped profiles (the stems of :data:`PROFILES_DIR`'s ``*.yaml``), sorted."""
    return sorted(x.stem for x in PROFILES_DIR.glob("*.yaml")) if PROFILES_DIR.is_dir() else []


def require_profile(
    value: str | None, env: Mapping[str, str] | None = None, option: str = "--profile"
) -> str:
    """The profile a command was given: ``value`` (its option), else ``$SPARKPAIR_PROFILE``.

    ``sparkpair health`` and ``sparkpair gateway`` have no default profile: one pointed at the
    DeepSeek-V4 pair must not silently run the tiny model's checks.

    Raises:
        ProfileError: neither is set (or both are blank); the message names the option, the
            variable and the shipped profiles.
    """
    env = os.environ if env is None else env
    for v in (value, env.get(PROFILE_ENV)):
        if v is not None and v.strip():
            return v
    raise ProfileError(
        f"no profile: {option} and {PROFILE_ENV} are unset; wanted the served model's profile, one of "
        f"{', '.join(known_profiles())} (configs/profiles/NAME.yaml) or a path to a profile YAML"
    )


PROFILE_LIMIT_BYTES = 1024 * 1024
"""Largest profile file read (bytes). The shipped profiles (``configs/profiles/*.yaml``) are
a few KiB; a 50 MB file took the YAML parser over a minute, so anything over 1 MiB is refused
unread."""


def load_profile(name_or_path: str | Path) -> Profile:
    """Load a profile by name (``configs/profiles/<name>.yaml``) or by path.

    A name with a suffix, a path separator or a leading ``~``/``.`` is a path; a bare
    name is looked up in :data:`PROFILES_DIR`.

    At most :data:`PROFILE_LIMIT_BYTES` are read, from a regular file only. Errors about the
    file's text give a line and column, never the text itself (a path such as ``/etc/passwd``
    named by mistake must not be echoed into logs).

    Raises:
        ProfileError: no such profile, a ``~user`` that names no user, a folder, a FIFO or
            device, an unreadable or too large file, bytes that are not UTF-8 text, YAML that
            does not parse, a top level that is not a mapping, or a schema mismatch. The
            message names the file, the key, the value seen and what was wanted.
    """
    raw = str(name_or_path)
    try:
        p = Path(name_or_path).expanduser()
    except RuntimeError as e:  # `~nouser/x.yaml`: no such user's home
        raise ProfileError(
            f"profile {raw!r}: cannot expand the leading ~ ({e}); wanted a profile name or a path "
            "(~/x.yaml, /abs/x.yaml)"
        ) from None
    if not p.suffix and not _looks_like_path(raw):
        p = PROFILES_DIR / f"{raw}.yaml"
    if p.is_dir():
        raise ProfileError(
            f"profile {raw!r}: {p} is a folder; wanted a profile YAML file "
            "(configs/profiles/NAME.yaml or a path to one)"
        )
    if not p.exists():
        raise ProfileError(f"profile {raw!r}: no file {p}; known profiles: {', '.join(known_profiles())}")
    try:
        text = read_small_file(p, PROFILE_LIMIT_BYTES).decode("utf-8")
    except OSError as e:
        raise ProfileError(
            f"profile {p}: cannot read it ({e.strerror or e}); wanted a readable YAML file"
        ) from None
    except UnicodeDecodeError as e:
        raise ProfileError(
            f"profile {p}: not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); "
            "wanted a YAML file"
        ) from None
    except ValueError as e:  # not a regular file (FIFO, /dev/zero), or over the size cap
        what = str(e).split(";")[0]
        raise ProfileError(f"profile {raw!r}: {p} is {what}; wanted a profile YAML file") from None
    try:
        data = load_yaml(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or "does not parse"
        raise ProfileError(f"profile {p}: not valid YAML ({problem}{where})") from None
    if not isinstance(data, dict):
        # the type only: the file may be any text named by mistake (/etc/passwd), never echoed
        seen = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ProfileError(
            f"profile {p}: top level is {seen}; wanted a mapping with the keys "
            "name, served_model_name, server (see configs/profiles/tiny-demo.yaml)"
        )
    try:
        return Profile.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']} (seen {err.get('input')!r})"
            for err in e.errors()
        )
        raise ProfileError(f"profile {p}: {problems}") from None

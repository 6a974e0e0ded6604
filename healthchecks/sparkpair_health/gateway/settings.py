"""The gateway's settings: one schema (pydantic-settings), from ``SPARKPAIR_<FIELD>`` variables
and the same fields as ``sparkpair gateway`` options.

pydantic-settings reads the environment; this module adds what its defaults do not do the
way the gateway needs: only the structured settings (:data:`JSON_FIELDS`) are decoded as
JSON, ``only`` also takes a comma list and ``peers`` ``name=address,...``, and every error
names the variable (or ``--option``), the value seen (never the API key) and what was wanted.
Runs in the slim client: imports neither vLLM nor torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_settings import BaseSettings, EnvSettingsSource, NoDecode, SettingsConfigDict
from sparkpair_serving.apikey import api_key_source, resolve_api_key
from sparkpair_serving.inputs import check_base_url, check_output_file, check_plan_file

from ..peers import DEFAULT_HEAD_LOG, Peer, PeerSettings, check_unique_peers, peers_from_text
from ..stability import StabilitySettings

ENV_PREFIX = "SPARKPAIR_"

HEAD_START_PERIOD_S = 2700.0
"""The head's health-check start period, seconds: compose.yaml ``services.head.healthcheck.
start_period`` (45m), the time a cold load of the checkpoint may take (a unit test keeps
the two equal)."""

JOIN_TIMEOUT_DEFAULT_S = 1800.0
"""``SPARKPAIR_JOIN_TIMEOUT_S``'s default (scripts/sparkpair_cli/deploy/nodeenv.py): how long
the head waits for the worker to join before it starts loading."""

JSON_FIELDS = ("dsv4", "only", "stability", "peers")
"""The only settings whose env value is parsed as JSON (when it starts with ``{`` or ``[``).
No other value is ever parsed: an API key that starts with ``{`` stays a string."""

SECRET_FIELDS = ("api_key",)
"""Settings never shown in a message (the value is replaced by ``<hidden>``)."""


def renamed_env(env: Mapping[str, str]) -> str | None:
    """The error for old setting names in ``env`` (``sparkpair_overlay.envs.RENAMED``: e.g.
    ``SPARKPAIR_PLAN_FILE``, now ``SPARKPAIR_PLAN_PATH``), each with its value and the name that
    replaced it; ``None`` when there are none. Matched in any case, as pydantic-settings reads the
    gateway's environment."""
    from sparkpair_overlay.envs import RENAMED  # standard library only: no torch, no vLLM

    stale = sorted((k, RENAMED[k.upper()]) for k in env if k.upper() in RENAMED)
    if not stale:
        return None
    return "; ".join(f"{k}={env[k]!r} is no longer read; wanted {new} (the same value, new name)"
                     for k, new in stale)


def default_ready_timeout_s(env: Mapping[str, str] | None = None) -> float:
    """The readiness budget that follows the deployment: the worker's join timeout plus the
    head's start period, seconds.

    The head waits up to ``SPARKPAIR_JOIN_TIMEOUT_S`` for the worker, then loads (within its
    health check's start period, :data:`HEAD_START_PERIOD_S`); the gateway must not give up
    before the head would. A ``SPARKPAIR_JOIN_TIMEOUT_S`` that is not a number is left to
    the node's own validation and the default is used.
    """
    env = os.environ if env is None else env
    raw = env.get("SPARKPAIR_JOIN_TIMEOUT_S", "")
    try:
        join = float(raw) if raw.strip() else JOIN_TIMEOUT_DEFAULT_S
    except ValueError:
        join = JOIN_TIMEOUT_DEFAULT_S
    if not (0 < join < float("inf")):
        join = JOIN_TIMEOUT_DEFAULT_S
    return join + HEAD_START_PERIOD_S


TICK_SLACK_S = 1.0
"""Seconds the staleness bound allows past ``canary_interval_s + canary_timeout_s``: a tick's own
bookkeeping after its deadline (judging, the peers' look, recording) and its thread's wake-up on a
loaded host. Measured: on 2 shared cores a tick held to 10 s ended up to 0.8 s late and one poll
read a healthy pair stale (tests/vllm_real/test_canary_soak.py). It lies within the poller's
slack (``gateway.canary.POLL_SLACK_S``), so the verdict's bound is unchanged."""


class GatewaySettingsError(ValueError):
    """A gateway setting (env or option) has a value the schema refuses."""


class GatewaySettings(BaseSettings):
    """Everything the gateway needs. Env: ``SPARKPAIR_`` + the field name in upper case.

    Attributes:
        base_url: the vLLM server, ``http://host:port``.
        profile: profile name or path (``configs/profiles``).
        served_model_name: default: the profile's.
        api_key: the server's key from ``SPARKPAIR_API_KEY`` (env only; never an option).
        api_key_file: a file holding it (``--api-key-file`` / ``SPARKPAIR_API_KEY_FILE``).
        host / port: where the gateway listens.
        ready_timeout_s: the readiness gate's budget, seconds; default
            :func:`default_ready_timeout_s` (join timeout + head start period, 4500 s with the
            defaults). After it the gateway exits 2 (compose restarts it).
        request_timeout_s: one ordinary suite request, seconds.
        long_prompt_timeout_s: one long-prompt request, seconds.
        canary_interval_s: seconds between canary completions (>= 0.1).
        canary_timeout_s: the overall deadline of one canary request, seconds (connect to
            last byte, not per read).
        canary_busy_max_s: the longest the canary may stay slow on a busy engine (its answers
            late while the engine's own counters move: reported ``busy``, not a 503) before the
            verdict fails it anyway: a canary starved that long, or a server that keeps its
            counters moving but never answers it, seconds. Default 180 s: the long-prompt
            timeout, the longest the suite lets one 48K-token prefill take.
        canary_max_tokens: tokens the canary asks for (when the profile has no expected answer).
        canary_prompt: the canary's user message (when the profile has no expected answer).
        peers / head_log / peer_probe_port: how a peer that is down is named (:mod:`sparkpair_health.peers`).
        dsv4_checks: whether the suite adds the DeepSeek-V4 model checks (``dsv4.*``). Unset
            (``None``, what the node's health service leaves it): the profile decides, the one place
            that says what is served (:attr:`~sparkpair_serving.profile.Profile.is_dsv4`). ``False``
            skips them (a quick bring-up); ``True`` adds them on a profile that is not DeepSeek-V4
            (the tests run them on the tiny model). :meth:`runs_model_checks` applies this.
        dsv4: removed (refused when given): the model-check settings are the profile's ``checks.dsv4``.
        only: run only these health-v1 check ids.
        report_json / junit_xml: where each suite report is also written.
        stability: both nodes' containers and kernel logs to watch
            (:class:`~sparkpair_health.stability.StabilitySettings`, JSON in env); ``None``: off.
        stability_interval_s: seconds between stability looks after the suite.
        plan_path: the overlay's kernel-plan JSON as the head wrote it (``SPARKPAIR_PLAN_PATH``, the
            same setting and file as in vLLM's containers; compose shares it read-only at
            ``/var/lib/sparkpair/state/kernel-plan.json``), read by the ``overlay_plan`` check.
        recovery: wedge recovery on (:mod:`sparkpair_health.recovery`); off by default. Needs
            ``stability`` with a node named ``head`` and each node's ``containers``.
        recovery_max_restarts / recovery_window_s: at most this many pair restarts (1-100)
            within any window of this many seconds (60 s to 7 days: a shorter window would let
            restarts go on for ever); then recovery stops and ``/readyz`` says why.
        recovery_after_failures: canary failures in a row that count as a wedge.
        recovery_stall_s: seconds without a new generated token (vLLM's
            ``vllm:generation_tokens_total``) while requests run that count as a wedge.
        recovery_stop_timeout_s: seconds Docker gives each container to stop when recovery
            restarts the pair, before it kills it (a wedged engine seldom stops on SIGTERM).
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, env_ignore_empty=True, extra="forbid")

    base_url: str = "http://127.0.0.1:8000"
    profile: str = "tiny-demo"
    served_model_name: str | None = Field(None, min_length=1)
    api_key: SecretStr | None = None
    api_key_file: Path | None = None
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    ready_timeout_s: float = Field(default_factory=default_ready_timeout_s, gt=0, allow_inf_nan=False)
    request_timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False)
    long_prompt_timeout_s: float = Field(180.0, gt=0, allow_inf_nan=False)
    canary_interval_s: float = Field(15.0, ge=0.1, le=3600.0, allow_inf_nan=False)
    canary_timeout_s: float = Field(10.0, gt=0, le=3600.0, allow_inf_nan=False)
    canary_busy_max_s: float = Field(180.0, ge=0, le=86400.0, allow_inf_nan=False)
    canary_max_tokens: int = Field(4, gt=0)
    canary_prompt: str = "Reply with OK."
    dsv4_checks: bool | None = None
    dsv4: Annotated[dict[str, Any], NoDecode] = Field(default_factory=dict)
    only: Annotated[list[str] | None, NoDecode] = None
    report_json: Path | None = None
    junit_xml: Path | None = None
    stability: Annotated[StabilitySettings | None, NoDecode] = None
    stability_interval_s: float = Field(60.0, gt=0, le=86400.0, allow_inf_nan=False)
    plan_path: Path | None = None
    peers: Annotated[list[Peer], NoDecode] = Field(default_factory=list)
    head_log: Path | None = DEFAULT_HEAD_LOG
    peer_probe_port: int | None = Field(None, ge=1, le=65535)
    recovery: bool = False
    recovery_max_restarts: int = Field(3, ge=1, le=100)
    recovery_window_s: float = Field(3600.0, ge=60.0, le=7 * 86400.0, allow_inf_nan=False)
    recovery_after_failures: int = Field(3, ge=1, le=1000)
    recovery_stall_s: float = Field(120.0, gt=0, le=86400.0, allow_inf_nan=False)
    recovery_stop_timeout_s: int = Field(30, ge=1, le=600)

    @property
    def stale_after_s(self) -> float:
        """``/readyz`` answers 503 once the last successful canary is older than this, seconds:
        one canary interval plus one canary deadline (the longest a healthy pair goes between
        two successes) plus :data:`TICK_SLACK_S` for the tick's own bookkeeping."""
        return self.canary_interval_s + self.canary_timeout_s + TICK_SLACK_S

    def peer_settings(self) -> PeerSettings:
        """The :class:`~sparkpair_health.peers.PeerSettings` of these settings."""
        return PeerSettings(peers=self.peers, head_log=self.head_log, probe_port=self.peer_probe_port)

    @field_validator(*JSON_FIELDS, mode="before")
    @classmethod
    def _decode(cls, v: Any, info: ValidationInfo) -> Any:
        # Text (an env value) of a structured setting: JSON only when it starts like JSON;
        # ``peers`` and ``only`` also take their list forms. Anything else stays as it is.
        if not isinstance(v, str):
            return v
        if info.field_name == "peers":
            return [p.model_dump() for p in peers_from_text(v)]
        if v.lstrip().startswith(("{", "[")):
            try:
                return json.loads(v)
            except ValueError as e:
                raise ValueError(f"not valid JSON ({e}); wanted a JSON value") from None
        if info.field_name == "only":
            return [x.strip() for x in v.split(",") if x.strip()]
        return v

    @field_validator("recovery")
    @classmethod
    def _recovery_needs_nodes(cls, v: bool, info: ValidationInfo) -> bool:
        if not v:
            return v
        stability = info.data.get("stability")
        nodes = stability.nodes if stability is not None else []
        if not any(n.name == "head" and n.containers for n in nodes):
            raise ValueError(
                "stability names no node 'head' with containers "
                f"(nodes seen: {[(n.name, n.containers) for n in nodes]}); wanted SPARKPAIR_STABILITY "
                'with {"nodes": [{"name": "head", "containers": [...]}, {"name": "worker", ...}]}: '
                "recovery restarts those containers"
            )
        bare = [n.name for n in nodes if not n.containers]
        if bare:
            raise ValueError(
                f"stability node(s) {bare} name no containers; wanted every node's serving containers: "
                "recovery restarts the whole pair"
            )
        if len(nodes) < 2:
            raise ValueError(
                f"stability names only {[n.name for n in nodes]}; wanted the head and its worker(s): "
                "recovery restarts the whole pair"
            )
        return v

    @field_validator("recovery_stall_s")
    @classmethod
    def _stall_measurable(cls, v: float, info: ValidationInfo) -> float:
        interval = info.data.get("canary_interval_s")
        if info.data.get("recovery") and interval is not None and v < interval:
            raise ValueError(
                f"shorter than canary_interval_s={interval:g}: the token counters are read once per "
                "canary, so a shorter stall cannot be seen; wanted >= canary_interval_s"
            )
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str) -> str:
        try:
            return check_base_url(v, "base_url")
        except ValueError as e:
            raise ValueError(str(e).split(": ", 1)[-1]) from None

    @field_validator("peers")
    @classmethod
    def _peers(cls, v: list[Peer]) -> list[Peer]:
        return check_unique_peers(v)

    def runs_model_checks(self) -> bool:
        """Whether the suite adds the ``dsv4.*`` checks: :attr:`dsv4_checks` when set, else whether
        the profile serves DeepSeek-V4."""
        if self.dsv4_checks is not None:
            return self.dsv4_checks
        from sparkpair_serving.profile import load_profile

        return load_profile(self.profile).is_dsv4

    @field_validator("plan_path", mode="before")
    @classmethod
    def _plan_path_text(cls, v: Any) -> Any:
        # As the overlay reads SPARKPAIR_PLAN_PATH (sparkpair_overlay.envs): surrounding blanks go,
        # and a blank value names no file (not a file called " ").
        if isinstance(v, str):
            return v.strip() or None
        return v

    @field_validator("plan_path")
    @classmethod
    def _plan_path(cls, v: Path | None) -> Path | None:
        return check_plan_file(v, "plan_path")

    @field_validator("profile")
    @classmethod
    def _profile(cls, v: str) -> str:
        # Loaded now, not when the suite first runs: a bad profile must stop the gateway at
        # start (exit 3), not leave it answering 503 "suite defect" forever.
        from sparkpair_serving.profile import load_profile

        load_profile(v)
        return v

    @field_validator("only")
    @classmethod
    def _only(cls, v: list[str] | None) -> list[str] | None:
        from ..checks import CHECKS
        from ..checks.speculation import SPEC_FIRST, SPEC_LAST

        known = [c.id for c in [*SPEC_FIRST, *CHECKS, *SPEC_LAST]]
        bad = [x for x in v or [] if x not in known]
        if bad:
            raise ValueError(f"no such check {bad}; wanted ids from {known}")
        return v

    @field_validator("dsv4")
    @classmethod
    def _dsv4(cls, v: dict[str, Any]) -> dict[str, Any]:
        # Removed: the DeepSeek-V4 check settings are profile fields (checks.dsv4) now.
        from sparkpair_serving.profile import removed_dsv4_setting

        if v:
            raise ValueError("; ".join(removed_dsv4_setting(k, "SPARKPAIR_DSV4 / --dsv4") for k in v))
        return v

    @field_validator("report_json", "junit_xml")
    @classmethod
    def _writable(cls, v: Path | None, info: ValidationInfo) -> Path | None:
        return None if v is None else check_output_file(v, str(info.field_name))

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, overrides: Mapping[str, Any] | None = None
    ) -> GatewaySettings:
        """Settings from ``SPARKPAIR_<FIELD>`` variables, then ``overrides`` (CLI options, not None).

        Only the structured settings (:data:`JSON_FIELDS`) are parsed as JSON when they start
        with ``{`` or ``[``; every other value (the API key above all) is taken as the string
        it is. A plain comma list is accepted for ``only``, ``name=address,...`` for
        ``peers``; numbers and booleans (``true``/``false``/``1``/``0``) are converted by the
        schema. ``ready_timeout_s`` not set: :func:`default_ready_timeout_s` of ``env``.

        Raises:
            GatewaySettingsError: a value does not fit; the message names the variable,
                the value seen (never the API key) and what was wanted.
        """
        env = os.environ if env is None else env
        data: dict[str, Any] = dict(_EnvSource(cls, env)())
        source = {name: ENV_PREFIX + name.upper() for name in data}
        from sparkpair_serving.profile import removed_dsv4_env

        if stale := removed_dsv4_env(env):  # model-check settings are profile fields now
            raise GatewaySettingsError(stale)
        if renamed := renamed_env(env):
            raise GatewaySettingsError(renamed)
        if "ready_timeout_s" not in data:
            data["ready_timeout_s"] = default_ready_timeout_s(env)
        for k, v in (overrides or {}).items():
            if v is not None:
                data[k], source[k] = v, f"--{k.replace('_', '-')}"
        try:
            out = cls.model_validate(data)
        except ValidationError as e:
            probs = []
            for err in e.errors():
                field = str(err["loc"][0]) if err["loc"] else "?"
                seen = "<hidden>" if field in SECRET_FIELDS else repr(err.get("input"))
                msg = str(err["msg"]).removeprefix("Value error, ")
                sub = ".".join(str(x) for x in err["loc"][1:])
                where = f"{source.get(field, field)}: {sub}" if sub else source.get(field, field)
                probs.append(f"{where}={seen}: {msg}")
            raise GatewaySettingsError("; ".join(probs)) from None
        out._key_source = api_key_source(
            out.api_key,
            out.api_key_file,
            env,
            value_from=source.get("api_key", "SPARKPAIR_API_KEY"),
            file_from=source.get("api_key_file", "api_key_file"),
        )
        return out

    _key_source: str = PrivateAttr(default="")

    @property
    def key_source(self) -> str:
        """Where the API key comes from (an env variable or file path), for messages."""
        return self._key_source or api_key_source(self.api_key, self.api_key_file)

    def resolved_api_key(self) -> SecretStr | None:
        """The key from ``api_key``, ``api_key_file`` or ``SPARKPAIR_API_KEY(_FILE)``."""
        return resolve_api_key(self.api_key, self.api_key_file)


class _EnvSource(EnvSettingsSource):
    """pydantic-settings' environment source reading a given mapping instead of ``os.environ``
    (so :meth:`GatewaySettings.from_env` can be called with any environment)."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = env
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Case-insensitive, as the settings' default (the source lower-cases its look-ups).
        return {k.lower(): v for k, v in self._given.items() if v != ""}

"""Which keys a node env file may hold, which reach the containers, and the problems of the rest.

An env file key that nothing reads, that compose.yaml does not pass to the containers, or that the
shell overrides is ignored silently by Docker Compose; these functions name each such key with the
value wanted (``sparkpair node validate``, ``sparkpair up``, the gateway's start). The keys come from the
settings schemas (:class:`~sparkpair_cli.deploy.nodeenv.NodeEnv`, ``sparkpair_overlay.envs.REGISTRY``,
the gateway's settings) and the compose-only lists here; ``docs/reference/settings.md`` lists them all.
"""

from __future__ import annotations

from collections.abc import Mapping

from .nodeenv import NodeEnv
from .nodeenv_values import DERIVED_KEYS, shown

COMPOSE_ONLY_KEYS = frozenset(
    {
        # read by compose.yaml
        "SPARKPAIR_IMAGE",
        "SPARKPAIR_GATEWAY_PORT",
        "SPARKPAIR_GRAFANA_IMAGE",
        "SPARKPAIR_PROMETHEUS_IMAGE",
        "SPARKPAIR_NODE_ENV",
        "SPARKPAIR_HOST_USER",
        "SPARKPAIR_DSV4_CHECKS",
        # read from the environment by the node entrypoint, preflight and the CLI
        "SPARKPAIR_AOT_TRITON_CACHE",
        "SPARKPAIR_CLUSTER_FILE",
        "SPARKPAIR_GATE_DTYPE",
        "SPARKPAIR_HOME",
        "SPARKPAIR_NCCL_TIMEOUT_S",
        "SPARKPAIR_NODE_ROLE",
        "SPARKPAIR_PROBE_OUT",
        "SPARKPAIR_REPORTS_DIR",
        "SPARKPAIR_SYNC_TOKEN",  # model send/receive (cluster/transfer.py); model sync sets it
        "SPARKPAIR_SYNC_TOKEN_FILE",
    }
)
"""``SPARKPAIR_*`` keys read by compose.yaml, the node entrypoint or the CLI rather than by a
settings schema (tests/unit/cli/test_node_env.py keeps this in step with the code)."""


CONTAINER_ONLY_KEYS = ("SPARKPAIR_NCCL_TIMEOUT_S", "SPARKPAIR_PROBE_OUT", "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS")
"""Keys compose.yaml passes to the containers besides the settings schemas' fields: read from the
environment by ``nccl-allreduce`` and ``node run``, and NCCL's own debug switches (NCCL user
guide, ``NCCL_DEBUG``, ``NCCL_DEBUG_SUBSYS``)."""


def _who(values: Mapping[str, str]) -> str:
    """``"node NAME: "`` for an env file that names its node, else ``""`` (every problem line's head)."""
    name = values.get("SPARKPAIR_NODE_NAME")
    return f"node {name}: " if name else ""


def _gateway_keys() -> set[str]:
    """The ``SPARKPAIR_<FIELD>`` variables the gateway's settings read."""
    from sparkpair_health.gateway.settings import ENV_PREFIX, GatewaySettings

    return {ENV_PREFIX + f.upper() for f in GatewaySettings.model_fields}


def container_keys() -> frozenset[str]:
    """Every key compose.yaml's ``x-settings`` passes from the node's env file into head, worker
    and health: the node's (:class:`NodeEnv`), the overlay's (``sparkpair_overlay.envs.REGISTRY``),
    the gateway's (its settings' fields) and :data:`CONTAINER_ONLY_KEYS`. A key of an env file
    outside this set never reaches a container."""
    from sparkpair_overlay.envs import REGISTRY

    gateway = _gateway_keys()
    return frozenset(set(NodeEnv.model_fields) | set(REGISTRY) | gateway | set(CONTAINER_ONLY_KEYS))


def known_keys() -> frozenset[str]:
    """Every ``SPARKPAIR_*`` key a node env file may hold: the node's (:class:`NodeEnv`), the
    overlay's (``sparkpair_overlay.envs.REGISTRY``), the gateway's (its settings' fields) and
    compose's (:data:`COMPOSE_ONLY_KEYS`)."""
    from sparkpair_overlay.envs import REGISTRY

    gateway = _gateway_keys()
    node = {k for k in NodeEnv.model_fields if k.startswith("SPARKPAIR_")}
    return frozenset(node | set(REGISTRY) | gateway | COMPOSE_ONLY_KEYS)


def unknown_key_problems(values: Mapping[str, str], source: str, case_sensitive: bool = True) -> list[str]:
    """One line per ``SPARKPAIR_*`` key of an env file that nothing reads (a typo is silently
    ignored otherwise), with the closest known key. ``case_sensitive=False`` for a reader that
    matches names in any case (pydantic-settings, as the gateway reads its environment). An old
    name (``sparkpair_overlay.envs.RENAMED``) is named with the name that replaced it."""
    import difflib

    from sparkpair_overlay.envs import RENAMED

    known = known_keys()
    who = _who(values)
    out = []
    for k in sorted(values):
        if k.upper() in RENAMED:
            out.append(f"{who}{k}={shown(k, values[k])} in {source} is no longer read; wanted "
                       f"{RENAMED[k.upper()]} (the same value, new name)")
        elif k.upper().startswith("SPARKPAIR_") and (k if case_sensitive else k.upper()) not in known:
            near = difflib.get_close_matches(k.upper(), sorted(known), n=1)
            hint = f"; did you mean {near[0]}?" if near else ""
            out.append(
                f"{who}{k} in {source} is not a sparkpair setting (nothing reads it){hint} "
                "wanted one of the keys of configs/node.env.example, docs/deploy.md or "
                "docs/health-verdict.md"
            )
    return out


def overlay_value_problems(values: Mapping[str, str], source: str) -> list[str]:
    """One line per overlay setting (``sparkpair_overlay.envs.REGISTRY``) of an env file whose value
    the overlay refuses (``SPARKPAIR_ROUTER=bogus``): named now, not when every vLLM process of the
    node stops on it. Old names are :func:`unknown_key_problems`' to name."""
    from sparkpair_overlay.envs import REGISTRY, EnvError, read

    who = _who(values)
    mine = {k: v for k, v in values.items() if k in REGISTRY}
    out = []
    for k in sorted(mine):
        try:
            read(k, mine)
        except EnvError as e:
            out.append(f"{who}{e} (in {source})")
    return out


HEALTH_OPTIONS = ("base_url", "profile", "port", "report_json", "junit_xml")
"""The gateway settings ``sparkpair node health`` (the ``health`` service's entrypoint) passes as
command-line options, over any ``SPARKPAIR_<NAME>`` of the environment: the node's API address,
its profile, ``SPARKPAIR_GATEWAY_PORT`` and the reports' paths in the container."""

HEALTH_ARGV_KEYS = {
    "SPARKPAIR_" + o.upper(): "--" + o.replace("_", "-") for o in HEALTH_OPTIONS if o != "profile"
}
"""``SPARKPAIR_<NAME>`` -> the option ``node health`` passes over it (all but the profile, which is
the node's own setting and the same value)."""


def gateway_value_problems(values: Mapping[str, str], source: str, head: bool) -> list[str]:
    """The gateway's settings of a head's env file that its ``health`` service would refuse at
    start (``SPARKPAIR_CANARY_TIMEOUT_S=abc``, ``SPARKPAIR_ONLY=bogus``): one line per setting,
    naming it, the value seen and what was wanted (then one for a combination refused that no
    setting alone is), read as the container reads them: the exact keys compose.yaml passes,
    compose's fixed values (:data:`COMPOSE_FIXED_KEYS`), the API key file at its mount. The
    settings ``node health`` passes as options (:data:`HEALTH_OPTIONS`, but the profile) are
    :func:`ignored_problems`' to name. ``head=False`` (a worker: no gateway runs there): none."""
    from sparkpair_health.gateway.settings import GatewaySettings, GatewaySettingsError

    if not head:
        return []
    who = _who(values)
    judged = _gateway_keys() - set(HEALTH_ARGV_KEYS) - set(COMPOSE_FIXED_KEYS)
    mine = {k: v for k, v in values.items() if k in judged}
    base = dict(COMPOSE_FIXED_KEYS)
    if "SPARKPAIR_PROFILE" in values:
        base["SPARKPAIR_PROFILE"] = values["SPARKPAIR_PROFILE"]
    if mine.get("SPARKPAIR_API_KEY_FILE"):
        mine["SPARKPAIR_API_KEY_FILE"] = "/run/secrets/sparkpair_api_key"

    def refused(env: Mapping[str, str]) -> str | None:
        try:
            GatewaySettings.from_env(env)
        except GatewaySettingsError as e:
            return str(e)
        return None

    whys = [why for k in sorted(mine) if (why := refused({**base, k: mine[k]})) is not None]
    if not whys and (why := refused({**base, **mine})) is not None:
        whys.append(why)
    return [f"{who}the health gateway would refuse {why} (in {source})" for why in whys]


COMPOSE_INTERPOLATED_KEYS = frozenset({"SPARKPAIR_IMAGE", "SPARKPAIR_MODEL_CACHE", "SPARKPAIR_API_KEY_FILE"})
"""Keys compose.yaml interpolates into the services themselves (image, mounts, secret)."""


def not_passed_problems(values: Mapping[str, str], source: str) -> list[str]:
    """One line per key of an env file that compose.yaml does not pass to the containers
    (:func:`container_keys`) and nothing else reads: it would be ignored silently. ``SPARKPAIR_*``
    keys are :func:`unknown_key_problems`' to name; the keys ``sparkpair node`` derives itself
    (:data:`.nodeenv_values.DERIVED_KEYS`) are checked by :func:`load_node_env`."""
    passed = container_keys() | COMPOSE_INTERPOLATED_KEYS | set(DERIVED_KEYS)
    who = _who(values)
    return [
        f"{who}{k} in {source} is not passed to the containers (compose.yaml's x-settings lists what "
        "is); wanted it removed, or a setting of configs/node.env.example"
        for k in sorted(values)
        if k not in passed and not k.upper().startswith("SPARKPAIR_") and k != "VLLM_API_KEY"
    ]


COMPOSE_FIXED_KEYS = {
    "SPARKPAIR_PLAN_PATH": "/var/lib/sparkpair/state/kernel-plan.json",
    "SPARKPAIR_HEAD_LOG": "/var/lib/sparkpair/state/head.log",
}
"""Settings compose.yaml gives every container a fixed value of, over the env file's: the kernel
plan and the head's log live on the state volume the head writes and ``health`` reads
(tests/unit/cli/test_node_env.py keeps this in step with compose.yaml)."""


def ignored_problems(values: Mapping[str, str], source: str) -> list[str]:
    """One line per key of an env file whose value no container would use: compose.yaml sets it
    to a fixed value (:data:`COMPOSE_FIXED_KEYS`), or ``node health`` passes the gateway an option
    over it (:data:`HEALTH_OPTIONS`, but the profile, which is the node's own)."""
    who = _who(values)
    out = []
    for k in sorted(values):
        if k in COMPOSE_FIXED_KEYS:
            out.append(
                f"{who}{k}={shown(k, values[k])} in {source} is ignored: compose.yaml gives the containers "
                f"{k}={COMPOSE_FIXED_KEYS[k]} (the state volume the head writes and health reads); wanted "
                "the line removed"
            )
        elif k in HEALTH_ARGV_KEYS:
            out.append(
                f"{who}{k}={shown(k, values[k])} in {source} is ignored: the health service's entrypoint "
                f"(sparkpair node health) gives the gateway {HEALTH_ARGV_KEYS[k]} over it (the node's API "
                "address, SPARKPAIR_GATEWAY_PORT, the reports' volume); wanted the line removed"
            )
    return out


def shell_override_problems(values: Mapping[str, str], source: str, environ: Mapping[str, str]) -> list[str]:
    """One line per variable exported in this shell that ``docker compose`` would give the
    containers instead of (or besides) the env file's value: Compose takes the shell's value
    over the ``--env-file``'s when it interpolates (`sparkpair up` passes none)."""
    who = _who(values)
    out = []
    for k in sorted((container_keys() | COMPOSE_INTERPOLATED_KEYS) & set(environ)):
        if k in values and values[k] == environ[k]:
            continue
        file_says = f"{shown(k, values[k])} in {source}" if k in values else f"nothing in {source}"
        out.append(
            f"{who}{k}={shown(k, environ[k])} is exported in this shell; docker compose would give it to "
            f"the containers over {file_says}; wanted it unset (`unset {k}`)"
        )
    return out

"""Every environment setting sparkpair defines or sets, in one table: name, type, default, who reads
it, meaning.

The table is pure data (standard library only). It lives in the overlay because the overlay may
import nothing from the other two packages, while ``sparkpair_health`` and ``sparkpair_cli`` already
import the overlay's torch-free modules: the overlay's side is the one place all three can read it.
The schemas that parse these settings stay where they run (:data:`sparkpair_overlay.envs.REGISTRY`
in vLLM's processes, ``sparkpair_cli.deploy.nodeenv.NodeEnv`` for the node env file,
``sparkpair_health.gateway.settings.GatewaySettings`` for the gateway) and
``tests/unit/repo/test_settings_registry.py`` checks each against this table: the same names, the
same defaults. The same test fails on any ``SPARKPAIR_*`` name in the code, compose file, Dockerfile
or scripts that the table lacks, and on a ``docs/reference/settings.md`` that is not what
:func:`markdown` makes (regenerate: ``python -m sparkpair_overlay.settings_registry >
docs/reference/settings.md``).

Readers (:data:`READERS`): ``overlay`` (the vLLM plugin, :mod:`sparkpair_overlay.envs`), ``node``
(the node env file, ``NodeEnv``), ``gateway`` (``GatewaySettings``: the gateway and the health
container), ``cli`` (a ``sparkpair`` command or the node entrypoint reads the process environment),
``compose`` (``compose.yaml`` interpolates it), ``image`` (a Dockerfile build argument or
environment value), ``vllm`` / ``nccl`` / ``runtime`` (variables sparkpair sets for vLLM, NCCL and
Gloo, torch or Triton), ``tooling`` (developer scripts under ``scripts/``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["READERS", "READER_DEFAULTS", "REQUIRED", "SETTINGS", "Setting", "by_name", "markdown", "read_by"]

READERS = ("overlay", "node", "gateway", "cli", "compose", "image", "vllm", "nccl", "runtime", "tooling")

#: ``default`` of a setting that has none and must be given.
REQUIRED = "(required)"


@dataclass(frozen=True)
class Setting:
    """One environment setting.

    Attributes:
        name: the variable's name.
        type: what its value is (``str``, ``int``, ``float``, ``bool``, ``path``, ``choice``, ``ipv4``,
            ``cidr``, ``secret``, ``json``, ``list``).
        default: the value when unset, as written in an env file; ``""`` for none,
            :data:`REQUIRED` when it must be given.
        readers: who reads it (a subset of :data:`READERS`).
        meaning: what it does.
    """

    name: str
    type: str
    default: str
    readers: tuple[str, ...]
    meaning: str


def _s(name: str, type_: str, default: str, readers: str, meaning: str) -> Setting:
    return Setting(name, type_, default, tuple(readers.split()), meaning)


SETTINGS: tuple[Setting, ...] = (
    # --- the overlay (vLLM's processes): sparkpair_overlay.envs parses these ---------------------------
    _s(
        "SPARKPAIR_ROUTER",
        "choice",
        "auto",
        "overlay compose",
        "router GEMM path: auto (the kernel plan), triton (our tiers, family 120 only), upstream (vLLM's)",
    ),
    _s(
        "SPARKPAIR_ROUTER_MAX_M",
        "int",
        "auto",
        "overlay compose",
        "largest token count of the bf16 low-M Triton router tier; auto = the probe's crossover",
    ),
    _s(
        "SPARKPAIR_O_PROJ",
        "choice",
        "auto",
        "overlay compose",
        "o_proj fp8_einsum path: auto (per the probe), deepgemm, triton, upstream (patch nothing)",
    ),
    _s(
        "SPARKPAIR_O_PROJ_RECIPE",
        "choice",
        "auto",
        "overlay compose",
        "fp8_einsum recipe on family 120: auto (the plan's), 1,1,128 or 1,128,128",
    ),
    _s(
        "SPARKPAIR_PLAN_PATH",
        "path",
        "/tmp/sparkpair/kernel-plan.json",
        "overlay gateway compose cli",
        "where every vLLM process writes the kernel plan JSON (empty: not written); the gateway reads "
        "the head's there for the health report (unset: not shown); `sparkpair bench` reads it there "
        "when no --plan-file is given",
    ),
    _s(
        "SPARKPAIR_PROBE_RESULTS",
        "path",
        "",
        "overlay compose",
        "the probe results JSON the kernel plan reads (empty or missing: built-in defaults)",
    ),
    _s(
        "SPARKPAIR_SERVE_PATHS",
        "str",
        "",
        "overlay compose",
        "serve paths forced to a candidate over the probe's choice: path=candidate[,path=candidate]",
    ),
    _s(
        "SPARKPAIR_ALLOW_UNVERIFIED_VLLM",
        "bool",
        "0",
        "overlay compose",
        "1 = patch even on a vLLM version the overlay has not verified (an error is still logged)",
    ),
    _s(
        "SPARKPAIR_FAKE_CAPABILITY",
        "str",
        "",
        "overlay compose",
        "testing: pretend the device has this compute capability (MAJOR.MINOR) or none (cpu)",
    ),
    # --- the node env file (NodeEnv) -------------------------------------------------------------------
    _s("SPARKPAIR_NODE_NAME", "str", REQUIRED, "node compose cli", "this node's name in reports and errors"),
    _s("SPARKPAIR_NNODES", "int", REQUIRED, "node compose", "nodes in the pair (1 or 2)"),
    _s("SPARKPAIR_NODE_RANK", "int", REQUIRED, "node compose", "this node's rank: 0 = head"),
    _s("SPARKPAIR_GPUS_PER_NODE", "int", "1", "node compose", "GPUs per node (GB10: 1)"),
    _s("SPARKPAIR_HEAD_ADDR", "ipv4", REQUIRED, "node compose", "the head's fabric address"),
    _s(
        "SPARKPAIR_MASTER_PORT",
        "int",
        "29501",
        "node compose",
        "the torch.distributed rendezvous port on the head",
    ),
    _s("SPARKPAIR_EXECUTOR", "choice", "", "node compose", "vLLM's distributed executor: mp (empty: mp)"),
    _s(
        "SPARKPAIR_PROFILE",
        "str",
        "deepseek-v4-flash",
        "node gateway compose",
        "the serving profile (configs/profiles/<name>.yaml); the gateway's default is tiny-demo",
    ),
    _s("SPARKPAIR_MODEL", "str", "", "node compose", "the model to serve (empty: the profile's)"),
    _s("SPARKPAIR_API_HOST", "str", "0.0.0.0", "node compose", "the address vLLM's API listens on"),
    _s(
        "SPARKPAIR_API_KEY_FILE",
        "path",
        "",
        "node gateway compose",
        "a file holding the API key (preferred over SPARKPAIR_API_KEY)",
    ),
    _s(
        "SPARKPAIR_API_KEY",
        "secret",
        "",
        "node gateway compose",
        "the API key itself (never on a command line)",
    ),
    _s("SPARKPAIR_API_PORT", "int", "8000", "node compose", "vLLM's API port"),
    _s("SPARKPAIR_GATEWAY_PORT", "int", "8080", "node compose cli", "the gateway's published port"),
    _s(
        "SPARKPAIR_PEERS",
        "list",
        "",
        "node gateway compose",
        "the other nodes (name=address[,...]): node env text; the gateway parses it into peers",
    ),
    _s("SPARKPAIR_FABRIC_CIDR", "cidr", REQUIRED, "node compose", "the RoCE fabric's IPv4 network"),
    _s(
        "SPARKPAIR_FABRIC_IFNAME",
        "str",
        REQUIRED,
        "node compose",
        "the fabric netdev (NCCL/Gloo socket ifname)",
    ),
    _s(
        "SPARKPAIR_JOIN_TIMEOUT_S",
        "int",
        "1800",
        "node gateway compose cli",
        "seconds the head waits for the pair to join (and the gateway's readiness bound)",
    ),
    _s("SPARKPAIR_PREFLIGHT_WAIVE", "list", "", "node compose", "preflight check ids waived on this node"),
    _s("SPARKPAIR_HOST_USER", "str", "root", "node compose", "the ssh user on the node's host"),
    _s("SPARKPAIR_IMAGE", "str", "sparkpair:0.1.0", "node compose cli", "the sparkpair image to run"),
    _s("SPARKPAIR_MODEL_CACHE", "path", "", "node compose cli", "the host folder holding the model files"),
    # --- the gateway (GatewaySettings) -----------------------------------------------------------------
    _s(
        "SPARKPAIR_BASE_URL",
        "str",
        "http://127.0.0.1:8000",
        "gateway compose",
        "the vLLM server the gateway fronts",
    ),
    _s(
        "SPARKPAIR_SERVED_MODEL_NAME",
        "str",
        "",
        "gateway compose",
        "the served model name (empty: the profile's)",
    ),
    _s("SPARKPAIR_HOST", "str", "127.0.0.1", "gateway compose", "the gateway's listen address"),
    _s("SPARKPAIR_PORT", "int", "8080", "gateway compose", "the gateway's listen port"),
    _s(
        "SPARKPAIR_READY_TIMEOUT_S",
        "float",
        "(profile)",
        "gateway compose",
        "seconds to wait for the server to be ready (default: from the profile)",
    ),
    _s("SPARKPAIR_REQUEST_TIMEOUT_S", "float", "60.0", "gateway compose", "seconds per health request"),
    _s(
        "SPARKPAIR_LONG_PROMPT_TIMEOUT_S",
        "float",
        "180.0",
        "gateway compose",
        "seconds for the long-prompt check",
    ),
    _s(
        "SPARKPAIR_CANARY_INTERVAL_S",
        "float",
        "15.0",
        "gateway compose",
        "seconds between canary completions",
    ),
    _s("SPARKPAIR_CANARY_TIMEOUT_S", "float", "10.0", "gateway compose", "seconds one canary may take"),
    _s(
        "SPARKPAIR_CANARY_BUSY_MAX_S",
        "float",
        "180.0",
        "gateway compose",
        "seconds the canary may read busy (engine working) before it counts as wedged",
    ),
    _s("SPARKPAIR_CANARY_MAX_TOKENS", "int", "4", "gateway compose", "tokens the canary asks for"),
    _s("SPARKPAIR_CANARY_PROMPT", "str", "Reply with OK.", "gateway compose", "the canary's prompt"),
    _s(
        "SPARKPAIR_DSV4_CHECKS",
        "bool",
        "",
        "gateway compose",
        "run the DeepSeek-V4 checks of the suite; unset: when the profile serves DeepSeek-V4 (the profile "
        "is the one source of that fact), false skips them, true adds them on another model",
    ),
    _s("SPARKPAIR_DSV4", "json", "(profile)", "gateway compose", "DeepSeek-V4 check settings (JSON)"),
    _s("SPARKPAIR_ONLY", "list", "", "gateway compose", "run only these suite checks (empty: all)"),
    _s("SPARKPAIR_REPORT_JSON", "path", "", "gateway compose", "write the suite's JSON report here"),
    _s("SPARKPAIR_JUNIT_XML", "path", "", "gateway compose", "write the suite's JUnit XML here"),
    _s("SPARKPAIR_STABILITY", "json", "", "gateway compose", "stability watch settings (JSON; empty: off)"),
    _s(
        "SPARKPAIR_STABILITY_INTERVAL_S",
        "float",
        "60.0",
        "gateway compose",
        "seconds between stability polls",
    ),
    _s(
        "SPARKPAIR_HEAD_LOG",
        "path",
        "/var/lib/sparkpair/state/head.log",
        "gateway compose",
        "the head's log the gateway reads for peer state",
    ),
    _s(
        "SPARKPAIR_PEER_PROBE_PORT",
        "int",
        "",
        "gateway compose",
        "the port peers are probed on (empty: none)",
    ),
    _s("SPARKPAIR_RECOVERY", "bool", "false", "gateway compose", "restart a wedged server"),
    _s("SPARKPAIR_RECOVERY_MAX_RESTARTS", "int", "3", "gateway compose", "restarts allowed per window"),
    _s(
        "SPARKPAIR_RECOVERY_WINDOW_S", "float", "3600.0", "gateway compose", "the restart budget's window (s)"
    ),
    _s(
        "SPARKPAIR_RECOVERY_AFTER_FAILURES", "int", "3", "gateway compose", "failed canaries before a restart"
    ),
    _s(
        "SPARKPAIR_RECOVERY_STALL_S",
        "float",
        "120.0",
        "gateway compose",
        "seconds of no progress that count as a stall",
    ),
    _s(
        "SPARKPAIR_RECOVERY_STOP_TIMEOUT_S",
        "int",
        "30",
        "gateway compose",
        "seconds a stop may take before a kill",
    ),
    # --- read by compose.yaml, the node entrypoint, preflight or the CLI -------------------------------
    _s(
        "SPARKPAIR_NODE_ENV",
        "path",
        "",
        "compose cli",
        "the node env file (compose --env-file; sparkpair node)",
    ),
    _s("SPARKPAIR_GRAFANA_IMAGE", "str", "grafana/grafana-oss:11.3.1", "compose", "the Grafana image"),
    _s("SPARKPAIR_PROMETHEUS_IMAGE", "str", "prom/prometheus:v2.55.1", "compose", "the Prometheus image"),
    _s(
        "SPARKPAIR_AOT_TRITON_CACHE",
        "path",
        "/opt/sparkpair/triton-cache",
        "image cli",
        "the image's ahead-of-time Triton cache, copied into TRITON_CACHE_DIR at start",
    ),
    _s("SPARKPAIR_CLUSTER_FILE", "path", "", "cli", "the cluster file sparkpair cluster/model read"),
    _s("SPARKPAIR_GATE_DTYPE", "str", "", "cli", "preflight: the router gate weight dtype to expect"),
    _s("SPARKPAIR_HOME", "path", "", "cli", "sparkpair demo's folder (default: $XDG_CACHE_HOME/sparkpair)"),
    _s("SPARKPAIR_NCCL_TIMEOUT_S", "float", "600", "compose cli", "preflight's NCCL all-reduce bound (s)"),
    _s(
        "SPARKPAIR_NODE_ROLE",
        "choice",
        "",
        "cli",
        "set by sparkpair node for vLLM's processes: head or worker",
    ),
    _s(
        "SPARKPAIR_PROBE_OUT",
        "path",
        "/var/cache/sparkpair/vllm/sparkpair-probe.json",
        "compose cli",
        "where the node's probe writes its results",
    ),
    _s(
        "SPARKPAIR_REPORTS_DIR",
        "path",
        "/var/lib/sparkpair/reports",
        "cli",
        "where sparkpair node keeps reports",
    ),
    _s(
        "SPARKPAIR_SYNC_TOKEN",
        "secret",
        "",
        "cli",
        "model send/receive's shared token (sparkpair model sync sets it)",
    ),
    _s("SPARKPAIR_SYNC_TOKEN_FILE", "path", "", "cli", "a file holding SPARKPAIR_SYNC_TOKEN"),
    # --- image build arguments -------------------------------------------------------------------------
    _s(
        "SPARKPAIR_KERNEL_ARCHS",
        "list",
        "sm_121a",
        "image",
        "the archs the image's AOT kernel cache is built for",
    ),
    _s("SPARKPAIR_VERSION", "str", "0.1.0", "image", "the sparkpair version the image carries"),
    # --- developer scripts -----------------------------------------------------------------------------
    _s(
        "SPARKPAIR_CHROMIUM_VERSION",
        "str",
        "",
        "tooling",
        "scripts/ensure-chromium.sh: the Chromium to fetch",
    ),
    _s("SPARKPAIR_DOCKERD_LOG", "path", "", "tooling", "scripts/ensure-docker.sh: the dockerd log file"),
    _s(
        "SPARKPAIR_PROMETHEUS_VERSION",
        "str",
        "",
        "tooling",
        "scripts/ensure-prometheus.sh: the Prometheus to fetch",
    ),
    _s("SPARKPAIR_SKIP_DOCKER", "bool", "", "tooling", "scripts/test.sh: skip the docker tier"),
    _s(
        "SPARKPAIR_SOAK",
        "bool",
        "",
        "tooling",
        "scripts/test.sh: 1 also runs the soak tier, last and alone",
    ),
    _s("SPARKPAIR_STACK_VENV", "path", "", "tooling", "scripts/setup-stack.sh: the stack venv to build"),
    _s("SPARKPAIR_TRITON_REQ", "str", "", "tooling", "scripts/setup-stack.sh: the Triton requirement"),
    _s(
        "SPARKPAIR_STACK_RELEASE",
        "str",
        "",
        "tooling",
        "scripts/setup-stack.sh: the vLLM release the venv being checked must hold",
    ),
    _s(
        "SPARKPAIR_ROOT", "path", "", "tooling", "scripts/setup-stack.sh: the checkout the venv's check reads"
    ),
    _s(
        "SPARKPAIR_GIT_SHA",
        "str",
        "",
        "tooling",
        "benchmarks: the git_sha column of a run's rows (no .git on the device)",
    ),
    # --- vLLM, NCCL, Gloo, torch and Triton variables sparkpair sets ----------------------------------
    _s("VLLM_HOST_IP", "ipv4", REQUIRED, "node vllm compose", "this node's fabric address, for vLLM (B06)"),
    _s("VLLM_API_KEY", "secret", "", "vllm", "sparkpair node hands the API key to vLLM here, never on argv"),
    _s("VLLM_CACHE_ROOT", "path", "/var/cache/sparkpair/vllm", "vllm compose", "vLLM's cache folder"),
    _s(
        "VLLM_CONFIGURE_LOGGING", "bool", "1", "vllm", "read by the overlay: 0 = vLLM's logging is not set up"
    ),
    _s("VLLM_ENGINE_READY_TIMEOUT_S", "int", "(profile)", "vllm", "the profile's engine start bound"),
    _s("VLLM_CPU_KVCACHE_SPACE", "int", "(profile)", "vllm", "the CPU demo profile's KV cache GiB"),
    _s("VLLM_CPU_OMP_THREADS_BIND", "str", "(profile)", "vllm", "the CPU demo profile's thread binding"),
    _s("VLLM_NO_USAGE_STATS", "bool", "1", "vllm", "sparkpair's local servers send no usage stats"),
    _s("NCCL_IB_HCA", "str", REQUIRED, "node nccl compose", "the RoCE HCA NCCL uses (B05)"),
    _s(
        "NCCL_IB_GID_INDEX",
        "str",
        "auto",
        "node nccl compose",
        "the RoCEv2 IPv4 GID index; auto = sparkpair node finds it",
    ),
    _s("NCCL_SOCKET_IFNAME", "str", "(SPARKPAIR_FABRIC_IFNAME)", "nccl", "NCCL's bootstrap netdev"),
    _s("GLOO_SOCKET_IFNAME", "str", "(SPARKPAIR_FABRIC_IFNAME)", "runtime", "Gloo's netdev"),
    _s("TP_SOCKET_IFNAME", "str", "(SPARKPAIR_FABRIC_IFNAME)", "runtime", "TensorPipe's netdev"),
    _s("NCCL_DEBUG", "str", "", "nccl compose", "NCCL's log level"),
    _s("NCCL_DEBUG_SUBSYS", "str", "", "nccl compose", "NCCL's log subsystems"),
    _s("NCCL_IB_ADDR_FAMILY", "str", "(profile)", "nccl", "the profile's RoCE address family"),
    _s("NCCL_IB_DISABLE", "bool", "(profile)", "nccl", "the profile's IB switch"),
    _s("NCCL_IB_ROCE_VERSION_NUM", "int", "(profile)", "nccl", "the profile's RoCE version"),
    _s("NCCL_IGNORE_CPU_AFFINITY", "bool", "(profile)", "nccl", "the profile's CPU affinity switch"),
    _s("NCCL_NVLS_ENABLE", "bool", "(profile)", "nccl", "the profile's NVLS switch"),
    _s("PYTORCH_CUDA_ALLOC_CONF", "str", "(profile)", "runtime", "the profile's CUDA allocator settings"),
    _s("HF_HOME", "path", "/models", "runtime compose", "the Hugging Face cache in the container"),
    _s("HF_HUB_OFFLINE", "bool", "1", "runtime compose", "the container never downloads"),
    _s(
        "TRITON_CACHE_DIR",
        "path",
        "/var/cache/sparkpair/triton",
        "runtime compose cli",
        "Triton's kernel cache",
    ),
    _s(
        "TRITON_PTXAS_PATH",
        "path",
        "/usr/local/cuda/bin/ptxas",
        "image runtime cli",
        "the ptxas Triton assembles with (one that knows sm_121a, B01)",
    ),
    _s(
        "TRITON_PTXAS_BLACKWELL_PATH",
        "path",
        "/usr/local/cuda/bin/ptxas",
        "image runtime",
        "the same ptxas for Triton's sm_100+ builds",
    ),
    _s("TORCH_CUDA_ARCH_LIST", "str", "12.1a", "image runtime", "the arch JIT builders target"),
    _s("FLASHINFER_CUDA_ARCH_LIST", "str", "12.1a", "image runtime", "FlashInfer's JIT arch"),
    _s("CUTE_DSL_ARCH", "str", "sm_121a", "image runtime", "CuTe-DSL's arch"),
)

#: Where one schema's default differs from the table's (``(reader, name)``: that reader's default).
READER_DEFAULTS: dict[tuple[str, str], str] = {
    # The gateway's profile default is the CPU demo (a bare ``sparkpair gateway``); a node's is the model.
    ("gateway", "SPARKPAIR_PROFILE"): "tiny-demo",
    # The gateway shows the plan only where compose points it at the head's (the health service).
    ("gateway", "SPARKPAIR_PLAN_PATH"): "",
}

_BY_NAME = {s.name: s for s in SETTINGS}
if len(_BY_NAME) != len(SETTINGS):  # pragma: no cover - a twin row is a mistake in this file
    raise RuntimeError("settings_registry: a name appears twice")


def by_name(name: str) -> Setting:
    """The setting called ``name``.

    Raises:
        KeyError: no setting has that name.
    """
    return _BY_NAME[name]


def read_by(reader: str) -> tuple[Setting, ...]:
    """The settings ``reader`` (one of :data:`READERS`) reads, in table order.

    Raises:
        ValueError: an unknown reader.
    """
    if reader not in READERS:
        raise ValueError(f"unknown reader {reader!r}; known: {', '.join(READERS)}")
    return tuple(s for s in SETTINGS if reader in s.readers)


def markdown() -> str:
    """docs/reference/settings.md: every setting, by reader group, as one Markdown table."""
    lines = [
        "# Settings",
        "",
        "Generated from `overlay/sparkpair_overlay/settings_registry.py` (`python -m "
        "sparkpair_overlay.settings_registry > docs/reference/settings.md`); "
        "`tests/unit/repo/test_settings_registry.py` fails when this file is not current.",
        "",
        "Readers: `overlay` the vLLM plugin; `node` the node env file; `gateway` the gateway and health "
        "container; `cli` a `sparkpair` command or the node entrypoint; `compose` compose.yaml; `image` "
        "the Dockerfile; `vllm`, `nccl`, `runtime` variables sparkpair sets for vLLM, NCCL and Gloo, "
        "torch or Triton; `tooling` developer scripts. A default `(profile)` comes from the serving "
        "profile; `(required)` has none.",
        "",
        "| name | type | default | read by | meaning |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        default = f"`{s.default}`" if s.default else ""
        meaning = s.meaning.replace("|", "\\|")
        lines.append(f"| `{s.name}` | {s.type} | {default} | {', '.join(s.readers)} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover - the docs generator
    print(markdown(), end="")

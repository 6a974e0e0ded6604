# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair node``: the container entrypoint of a head or worker node, its health checks,
and validation of the node env file.

``sparkpair node run --role head|worker`` validates the node env (configs/node.env, passed
by compose), runs ``sparkpair preflight --local``, then the kernel probe where this build
has it, resolves the RoCEv2 GID index, and starts vLLM (its multi-node `mp` executor) with the
profile's arguments. vLLM runs as a supervised child (``deploy/supervise.py``): when it stops
serving without a stop request (a peer died) the node exits non-zero, so compose restarts it.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Literal

import typer
from rich.console import Console

from .deploy import launch, liveness, supervise
from .deploy.nodeenv import NodeEnv, load_node_env_file, load_node_env_from_environ
from .deploy.nodeenv_values import SECRET_KEYS, NodeEnvError

err = Console(stderr=True)
out = Console()

AOT_TRITON_CACHE = Path(os.environ.get("SPARKPAIR_AOT_TRITON_CACHE", "/opt/sparkpair/triton-cache"))
"""Where the image ships its AOT-compiled Triton kernels (Dockerfile)."""

EXIT_CONFIG = 2
EXIT_PREFLIGHT = 3
EXIT_CLUSTER = 4
EXIT_PEER_LOST = supervise.EXIT_PEER_LOST  # 5: vLLM stopped serving on its own (a peer died)


def child_base_env(environ: dict[str, str]) -> dict[str, str]:
    """The environment children start from: ``environ`` without the API key settings'
    secrets (the key reaches vLLM only as VLLM_API_KEY, see :func:`api_key_env`), so no plan,
    log line or child that does not serve the API ever holds it."""
    return {k: v for k, v in environ.items() if k not in SECRET_KEYS}


def api_key_env(env: NodeEnv) -> dict[str, str]:
    """``{"VLLM_API_KEY": key}`` for the head's vLLM, ``{}`` when no key is set.

    The key comes from SPARKPAIR_API_KEY_FILE (a compose secret) or SPARKPAIR_API_KEY and
    is read by the same resolver the health client uses; it is handed to vLLM through the
    environment variable vLLM reads (docs/reference/node-env.md, "vLLM's server API key"),
    never on the command line.

    Raises:
        sparkpair_serving.apikey.ApiKeyError: the key file is unreadable, empty, binary or
            holds more than one line (the message names the setting and path, never content).
    """
    from sparkpair_serving.apikey import resolve_api_key

    key = resolve_api_key(env=env.api_key_source())
    return {"VLLM_API_KEY": key.get_secret_value()} if key is not None else {}


def bind_problem(env: NodeEnv) -> str | None:
    """Why the head's API server could not bind SPARKPAIR_API_HOST here, or ``None``.

    A wildcard (0.0.0.0, ::) always binds; any other address must belong to this host
    (containers use the host's network), which a test bind to port 0 shows.
    """
    host = env.SPARKPAIR_API_HOST
    if host.is_unspecified:
        return None
    fam = socket.AF_INET6 if host.version == 6 else socket.AF_INET
    try:
        with socket.socket(fam, socket.SOCK_STREAM) as s:
            s.bind((str(host), 0))
    except OSError as e:
        return (
            f"node {env.SPARKPAIR_NODE_NAME}: SPARKPAIR_API_HOST={host} cannot be bound on this host "
            f"({e.strerror or e}); wanted 0.0.0.0, ::, 127.0.0.1 or an address this host has "
            "(`ip -br addr`)"
        )
    return None


def _load_env(env_file: Path | None) -> NodeEnv:
    try:
        return load_node_env_file(env_file) if env_file else load_node_env_from_environ()
    except NodeEnvError as e:
        err.print(f"[red]sparkpair node: invalid node env[/red]\n{e}", highlight=False)
        raise typer.Exit(EXIT_CONFIG) from None


def _load_profile(env: NodeEnv):  # type: ignore[no-untyped-def]
    from sparkpair_serving.profile import ProfileError, load_profile

    try:
        return load_profile(env.SPARKPAIR_PROFILE)
    except ProfileError as e:
        err.print(
            f"node {env.SPARKPAIR_NODE_NAME}: SPARKPAIR_PROFILE={env.SPARKPAIR_PROFILE!r}: {e}",
            highlight=False,
        )
        raise typer.Exit(EXIT_CONFIG) from None


def _say(env: NodeEnv, msg: str) -> None:
    err.print(f"[bold]sparkpair node {env.SPARKPAIR_NODE_NAME} ({env.role}):[/bold] {msg}", highlight=False)


def checkpoint_dir(model: str) -> Path | None:
    """The served model's folder on this node, or ``None`` when its files are not here yet.

    ``model`` is a folder (used as is when it holds ``model.safetensors.index.json``) or a Hugging Face
    repo id, looked up in the local cache only (``HF_HOME``; ``huggingface_hub.snapshot_download`` with
    ``local_files_only=True``: no network).
    """
    p = Path(model)
    if p.is_dir():
        return p if (p / "model.safetensors.index.json").is_file() else None
    try:
        from huggingface_hub import snapshot_download

        found = Path(snapshot_download(model, local_files_only=True,
                                       allow_patterns=["*.json", "*.safetensors"]))
    except Exception:  # noqa: BLE001 - not in the cache (or not a repo id): no checkpoint check
        return None
    return found if (found / "model.safetensors.index.json").is_file() else None


def _apply_probe(env: NodeEnv, profile, out_path: Path, base_env: dict[str, str]):  # type: ignore[no-untyped-def]
    """The probe step's result: the serve-path switches go to vLLM, or the node stops before vLLM starts.

    Reads the probe JSON (``sparkpair probe`` exit 0 or 3), sets ``SPARKPAIR_PROBE_RESULTS`` and the
    chosen switches' environment, and appends their ``vllm serve`` flags to the profile's args
    (:func:`sparkpair_overlay.probe.choice.launch_switches`). Stops with :data:`EXIT_PREFLIGHT`
    (SPARKPAIR_PREFLIGHT_WAIVE does not waive these; the way around is in each message) on:

    * a verdict (no correct candidate on a serve path);
    * an unverified vLLM on capability family 120 without ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``;
    * for a DeepSeek-V4 profile, a final set of switches (the profile's flags win over the probe's) under
      which the overlay would refuse to build the model
      (:func:`sparkpair_overlay.plugin.launch_problem`, the same check vLLM's process makes).
    """
    from rich.markup import escape
    from sparkpair_overlay.envs import EnvError
    from sparkpair_overlay.jsonio import PlanError
    from sparkpair_overlay.plugin import launch_problem
    from sparkpair_overlay.probe.choice import ServePathError, launch_switches
    from sparkpair_overlay.probe_results import ProbeFile

    try:
        read = ProbeFile.load(out_path, "probe JSON")
    except PlanError as e:
        _say(env, f"[red]{escape(str(e))} (the output of sparkpair probe); not starting[/red]")
        raise typer.Exit(EXIT_PREFLIGHT) from None
    choice, probe = read.serve_choice, read.results
    base_env = {**base_env, "SPARKPAIR_PROBE_RESULTS": str(out_path)}
    new_env, args, notes = base_env, list(profile.server.args), []
    if choice is not None:
        if choice.stop:
            _say(env, f"[red]sparkpair probe: {escape(str(choice.verdict))}; not starting[/red]")
            raise typer.Exit(EXIT_PREFLIGHT)
        try:
            new_env, extra, notes = launch_switches(choice, profile.server.args, base_env)
        except ServePathError as e:
            _say(env, f"[red]{escape(str(e))}; not starting[/red]")
            raise typer.Exit(EXIT_PREFLIGHT) from None
        for c in choice.choices:
            _say(env, escape(f"serve path {c.path}: {c.candidate} via {c.switch.describe()} ({c.reason})"))
        for n in notes:
            _say(env, f"[yellow]{escape(n)}[/yellow]")
        args += extra
    if probe is not None:
        try:
            problem = launch_problem(new_env, args, probe, read.vllm_version)
        except EnvError as e:
            _say(env, f"[red]{escape(str(e))}; not starting[/red]")
            raise typer.Exit(EXIT_CONFIG) from None
        if problem is not None and (profile.is_dsv4 or "not a verified version" in problem):
            _say(env, f"[red]{escape(problem)}; not starting[/red]")
            raise typer.Exit(EXIT_PREFLIGHT)
    if args != list(profile.server.args):
        server = profile.server.model_copy(update={"args": args})
        profile = profile.model_copy(update={"server": server})
    return new_env, profile


def register(app: typer.Typer) -> None:
    """Add ``sparkpair node`` (run, check, health, validate, plan) to ``app``."""
    node = typer.Typer(help="Run this node (container entrypoint), check its health, validate its env file.")
    app.add_typer(node, name="node")

    @node.command("validate")
    def validate(
        env_file: Path | None = typer.Option(
            None, help="the node env file [default: $SPARKPAIR_NODE_ENV, else configs/node.env]"
        ),
        host_paths: bool = typer.Option(
            True,
            help="also check this host: SPARKPAIR_MODEL_CACHE exists; on the head, the API key file "
            "is readable and SPARKPAIR_API_HOST can be bound",
        ),
    ) -> None:
        """Validate a node env file and the profile it names; exit 2 with every problem listed."""
        from .deploy import nodeenv as ne
        from .deploy import nodeenv_keys as keys

        try:
            env_file = ne.env_file_choice(env_file)
        except NodeEnvError as e:
            err.print(f"sparkpair node validate: {e}", highlight=False)
            raise typer.Exit(EXIT_CONFIG) from None
        env = _load_env(env_file)
        profile = _load_profile(env)
        values = ne.parse_env_file(env_file)
        problems = keys.unknown_key_problems(values, str(env_file))
        problems += keys.not_passed_problems(values, str(env_file))
        problems += keys.ignored_problems(values, str(env_file))
        problems += keys.overlay_value_problems(values, str(env_file))
        problems += keys.gateway_value_problems(values, str(env_file), head=env.role == "head")
        problems += keys.shell_override_problems(values, str(env_file), os.environ)
        try:
            launch.check_shape(env, profile)
            launch.executor_of(env, profile)
        except launch.LaunchError as e:
            problems.append(str(e))
        if host_paths and env.role == "head":
            from sparkpair_serving.apikey import ApiKeyError

            if why := bind_problem(env):
                problems.append(why)
            try:
                api_key_env(env)  # the host file compose will mount as the secret
            except ApiKeyError as e:
                problems.append(f"node {env.SPARKPAIR_NODE_NAME}: {e}")
        if host_paths:
            cache = env.SPARKPAIR_MODEL_CACHE
            if not cache:
                problems.append(
                    f"node {env.SPARKPAIR_NODE_NAME}: SPARKPAIR_MODEL_CACHE=''; wanted an absolute host path"
                )
            elif not Path(cache).is_dir():
                problems.append(
                    f"node {env.SPARKPAIR_NODE_NAME}: SPARKPAIR_MODEL_CACHE={cache!r} is not a directory on this "  # noqa: E501
                    "host; wanted an existing folder (mkdir -p it, then download the model into it)"
                )
        if problems:
            err.print("\n".join(problems), highlight=False)
            raise typer.Exit(EXIT_CONFIG)
        out.print(
            f"node {env.SPARKPAIR_NODE_NAME}: {env_file} is valid: rank {env.SPARKPAIR_NODE_RANK}/"
            f"{env.SPARKPAIR_NNODES} ({env.role}), executor {launch.executor_of(env, profile)}, "
            f"profile {profile.name}, fabric {env.VLLM_HOST_IP} on {env.SPARKPAIR_FABRIC_IFNAME}",
            highlight=False,
        )

    @node.command("plan")
    def plan_cmd(
        role: str = typer.Option(..., help="head or worker"),
        env_file: Path | None = typer.Option(None, help="node env file (default: the environment)"),
    ) -> None:
        """Print what ``node run`` would start (argv and environment), without starting it."""
        env = _load_env(env_file)
        profile = _load_profile(env)
        try:
            p = launch.plan(
                env, profile, _role(role), base_env=child_base_env(dict(os.environ)), gid_index=None
            )
        except launch.LaunchError as e:
            err.print(str(e), highlight=False)
            raise typer.Exit(EXIT_CONFIG) from None
        out.print(launch.describe(p), highlight=False, soft_wrap=True)

    @node.command("run")
    def run(
        role: str = typer.Option(..., help="head or worker (the compose service)"),
        env_file: Path | None = typer.Option(None, help="node env file (default: the environment)"),
        root: Path = typer.Option(Path("/"), help="root for /sys and /proc reads (tests)"),
    ) -> None:
        """Container entrypoint: preflight, probe, then start vLLM (executor mp) for this node."""
        env = _load_env(env_file)
        profile = _load_profile(env)
        r = _role(role)
        if r != env.role:
            err.print(
                f"node {env.SPARKPAIR_NODE_NAME}: compose service {r!r} started with SPARKPAIR_NODE_RANK="
                f"{env.SPARKPAIR_NODE_RANK}; wanted rank 0 for head, 1..{env.SPARKPAIR_NNODES - 1} for worker "  # noqa: E501
                f"(run `--profile {env.role}` on this node)",
                highlight=False,
            )
            raise typer.Exit(EXIT_CONFIG)

        from .preflight import checks as pf
        from .preflight.fabric import resolve_gid_index

        _say(env, "preflight --local")
        report = pf.run_local(env, profile, root=root)
        pf.print_report(report, err)
        if report.failed:
            _say(env, f"[red]preflight failed ({len(report.failed)} checks); not starting[/red]")
            raise typer.Exit(EXIT_PREFLIGHT)

        secret_env: dict[str, str] = {}
        if r == "head":
            from sparkpair_serving.apikey import ApiKeyError

            why = bind_problem(env)
            if why:
                err.print(why, highlight=False)
                raise typer.Exit(EXIT_CONFIG)
            try:
                secret_env = api_key_env(env)
            except ApiKeyError as e:
                err.print(f"node {env.SPARKPAIR_NODE_NAME}: {e}", highlight=False)
                raise typer.Exit(EXIT_CONFIG) from None
            if secret_env:
                _say(env, f"API key set: /v1 requests need it (bind {env.SPARKPAIR_API_HOST})")
            elif env.SPARKPAIR_API_HOST.is_unspecified:
                _say(
                    env,
                    f"[yellow]no API key and SPARKPAIR_API_HOST={env.SPARKPAIR_API_HOST}: the OpenAI API "
                    "is open to every interface of this host; set SPARKPAIR_API_KEY_FILE, or "
                    "SPARKPAIR_API_HOST=127.0.0.1 / one address of this host[/yellow]",
                )

        base_env = child_base_env(dict(os.environ))
        out_path = Path(
            os.environ.get("SPARKPAIR_PROBE_OUT", "/var/cache/sparkpair/vllm/sparkpair-probe.json")
        )
        _say(env, f"sparkpair probe (on-device kernel self-test) -> {out_path}")
        tp = str(profile.server.tensor_parallel_size)
        probe_argv = [sys.executable, "-m", "sparkpair_cli.main", "probe", "--out", str(out_path), "--tp", tp,
                      "--tp-rank", str(env.SPARKPAIR_NODE_RANK)]
        if profile.is_dsv4:  # the o_proj is rated at this profile's token counts (else the DSv4 default's)
            probe_argv += ["--profile", str(env.SPARKPAIR_PROFILE)]
        ckpt = checkpoint_dir(env.SPARKPAIR_MODEL or profile.server.model) if profile.is_dsv4 else None
        if ckpt is not None:  # the model's files are here: the probe checks the o_proj on one real wo_a
            probe_argv += ["--checkpoint", str(ckpt)]
        rc = subprocess.call(probe_argv)
        if rc in (0, 3):
            base_env, profile = _apply_probe(env, profile, out_path, base_env)
        elif "probe" in env.waived:
            _say(
                env,
                f"[yellow]sparkpair probe exited {rc}; waived by SPARKPAIR_PREFLIGHT_WAIVE: "
                "the kernel plan uses its built-in defaults[/yellow]",
            )
        else:
            _say(
                env,
                f"[red]sparkpair probe exited {rc}; wanted 0 (a GPU to run on); not starting[/red]",
            )
            raise typer.Exit(EXIT_PREFLIGHT)

        gid = None
        if env.NCCL_IB_GID_INDEX == "auto":
            gid = resolve_gid_index(env, root)
            _say(
                env,
                f"NCCL_IB_GID_INDEX=auto resolved to {gid if gid is not None else 'unset (no RoCEv2 entry; waived)'}",  # noqa: E501
            )
        else:
            gid = int(env.NCCL_IB_GID_INDEX)

        cache = Path(os.environ.get("TRITON_CACHE_DIR", ""))
        if cache.parts:
            try:
                n = launch.seed_triton_cache(AOT_TRITON_CACHE, cache)
            except launch.LaunchError as e:
                err.print(f"node {env.SPARKPAIR_NODE_NAME}: {e}", highlight=False)
                raise typer.Exit(EXIT_CONFIG) from None
            _say(env, f"Triton cache {cache}: {n} AOT entries copied from {AOT_TRITON_CACHE}")

        try:
            p = launch.plan(env, profile, r, base_env=base_env, gid_index=gid)
        except launch.LaunchError as e:
            err.print(str(e), highlight=False)
            raise typer.Exit(EXIT_CONFIG) from None
        _say(env, f"executor {p.executor}; plan:\n{launch.describe(p)}")
        _start(env, p, secret_env)

    @node.command("check")
    def check(
        role: str = typer.Option(..., help="head, worker or health"),
        root: Path = typer.Option(Path("/"), help="root for /proc reads (tests)"),
    ) -> None:
        """Container health check (exit 0 healthy, 1 not): see ``deploy/liveness.py``."""
        env = _load_env(None)
        if role == "head":
            res = liveness.http_ok(f"http://{_url_host(env.probe_host())}:{env.SPARKPAIR_API_PORT}/health")
        elif role == "worker":
            res = liveness.worker_alive(
                env.SPARKPAIR_NODE_NAME,
                str(env.SPARKPAIR_HEAD_ADDR),
                env.SPARKPAIR_MASTER_PORT,
                root,
            )
        elif role == "health":
            res = liveness.http_ok(f"http://127.0.0.1:{env.SPARKPAIR_GATEWAY_PORT}/readyz")
        else:
            err.print(f"sparkpair node check: --role {role!r}; wanted head, worker or health")
            raise typer.Exit(EXIT_CONFIG)
        print(res.message)
        raise typer.Exit(0 if res.ok else 1)

    @node.command("health")
    def health() -> None:
        """Entrypoint of the ``health`` service: the gateway that runs the functional suite
        against this node's API server and answers ``/readyz``."""
        env = _load_env(None)
        base = f"http://{_url_host(env.probe_host())}:{env.SPARKPAIR_API_PORT}"
        reports = Path(os.environ.get("SPARKPAIR_REPORTS_DIR", "/var/lib/sparkpair/reports"))
        from .deploy.nodeenv_keys import HEALTH_OPTIONS

        given = {
            "base_url": base,
            "profile": env.SPARKPAIR_PROFILE,
            "port": str(env.SPARKPAIR_GATEWAY_PORT),
            "report_json": str(reports / "report.json"),
            "junit_xml": str(reports / "junit.xml"),
        }  # no --dsv4-checks: the gateway reads whether the model is DeepSeek-V4 from the profile
        argv = [sys.executable, "-m", "sparkpair_cli.main", "gateway"]
        for opt in HEALTH_OPTIONS:  # the one list node validate names these settings from
            argv += ["--" + opt.replace("_", "-"), given[opt]]
        reports.mkdir(parents=True, exist_ok=True)
        _say(env, "exec " + " ".join(argv))
        launch.exec_argv(argv, os.environ)


def _role(role: str) -> Literal["head", "worker"]:
    if role not in ("head", "worker"):
        err.print(f"sparkpair node: --role {role!r}; wanted head or worker")
        raise typer.Exit(EXIT_CONFIG)
    return role  # type: ignore[return-value]


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _peers(env: NodeEnv, seen: set[str]) -> str:
    """The other node(s), as this node knows them, for the last log line."""
    head, port = env.SPARKPAIR_HEAD_ADDR, env.SPARKPAIR_MASTER_PORT
    if env.SPARKPAIR_NNODES == 1:
        return "none (SPARKPAIR_NNODES=1: the engine itself stopped)"
    if env.role == "worker":
        try:
            socket.create_connection((str(head), port), timeout=2).close()
            state = "still accepts connections"
        except OSError as e:
            state = f"does not accept connections ({e.strerror or e})"
        return f"the head (rank 0) at {head}:{port}, which {state}"
    ranks = f"rank 1..{env.SPARKPAIR_NNODES - 1}" if env.SPARKPAIR_NNODES > 2 else "rank 1"
    if seen:
        return f"worker(s) ({ranks}) last seen connected to {head}:{port} from {', '.join(sorted(seen))}"
    return f"worker(s) ({ranks}); none was seen connected to {head}:{port}"


def _serve(env: NodeEnv, p: launch.LaunchPlan, secret_env: dict[str, str]) -> None:
    """Run this node's vLLM as a supervised child and exit with :func:`supervise.exit_status`."""
    assert p.serve is not None
    _say(env, "start " + " ".join(p.serve))
    seen: set[str] = set()
    me = {str(env.VLLM_HOST_IP)}

    def sample(_elapsed: float) -> None:
        # The head's workers hold a connection to its rendezvous port; remember who did.
        if env.role == "head" and env.SPARKPAIR_NNODES > 1:
            ips = set(liveness.clients_of_port(env.SPARKPAIR_MASTER_PORT)) - me
            if ips:
                seen.clear()
                seen.update(ips)

    child = supervise.run_child(p.serve, {**p.env, **secret_env}, on_tick=sample)
    code = supervise.exit_status(child)
    line = supervise.last_line(child, node=env.SPARKPAIR_NODE_NAME, role=env.role, peers=_peers(env, seen))
    err.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def _start(env: NodeEnv, p: launch.LaunchPlan, secret_env: dict[str, str] | None = None) -> None:
    timeout = float(env.SPARKPAIR_JOIN_TIMEOUT_S)
    head, port = str(env.SPARKPAIR_HEAD_ADDR), env.SPARKPAIR_MASTER_PORT

    def tick(waited: float) -> None:
        if int(waited) % 30 < 2:
            _say(env, f"waiting for the head at {head}:{port} ({waited:.0f}/{timeout:.0f} s)")

    if p.role == "worker":
        _wait_head(env, head, port, timeout, tick)
    _serve(env, p, secret_env or {})


def _wait_head(env: NodeEnv, head: str, port: int, timeout: float, tick) -> None:  # type: ignore[no-untyped-def]
    try:
        waited = launch.wait_tcp(head, port, timeout, tick)
    except TimeoutError as e:
        _say(env, f"[red]{e}; wanted the head (SPARKPAIR_HEAD_ADDR) up within SPARKPAIR_JOIN_TIMEOUT_S[/red]")
        raise typer.Exit(EXIT_CLUSTER) from None
    _say(env, f"head {head}:{port} reachable after {waited:.0f} s")

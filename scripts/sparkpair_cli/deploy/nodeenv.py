"""The per-node env file (``configs/node.env``): schema, parser and errors.

One ``compose.yaml`` serves every node; nodes differ only in this file. Every key is
documented in ``configs/node.env.example`` and validated here, so a wrong value stops
the node before any weight is read, with an error that names the node, the key, the
value seen and the value wanted.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from sparkpair_health.peers import peers_from_text
from sparkpair_serving.inputs import read_small_file

from ..preflight.ids import CHECK_IDS
from .nodeenv_values import (
    DERIVED_KEYS,
    FABRIC_PREFIX_MAX,
    FABRIC_PREFIX_MIN,
    HF_REPO_ID_RE,
    IFNAME_RE,
    INT_KEYS,
    NODE_NAME_RE,
    PATH_MAX,
    PROFILE_NAME_RE,
    WANTED,
    NodeEnvError,
    ascii_int,
    no_dotdot,
    parse_hca_list,
    port_in_range,
    printable,
    shown,
)


class NodeEnv(BaseModel):
    """Validated settings of one node (all keys of ``configs/node.env.example``)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    SPARKPAIR_NODE_NAME: str = Field(pattern=NODE_NAME_RE.pattern)
    SPARKPAIR_NNODES: int = Field(ge=1, le=64)
    SPARKPAIR_NODE_RANK: int = Field(ge=0)
    SPARKPAIR_GPUS_PER_NODE: int = Field(1, ge=1, le=8)
    SPARKPAIR_HEAD_ADDR: ipaddress.IPv4Address
    SPARKPAIR_MASTER_PORT: int = 29501
    SPARKPAIR_EXECUTOR: Literal["mp"] | None = None
    SPARKPAIR_PROFILE: str = Field("deepseek-v4-flash", min_length=1)
    SPARKPAIR_MODEL: str = ""
    SPARKPAIR_API_HOST: ipaddress.IPv4Address | ipaddress.IPv6Address = ipaddress.IPv4Address("0.0.0.0")
    SPARKPAIR_API_KEY_FILE: str = ""
    SPARKPAIR_API_KEY: SecretStr = SecretStr("")
    SPARKPAIR_API_PORT: int = 8000
    SPARKPAIR_GATEWAY_PORT: int = 8080
    SPARKPAIR_PEERS: str = ""
    SPARKPAIR_FABRIC_CIDR: ipaddress.IPv4Network
    SPARKPAIR_FABRIC_IFNAME: str = Field(pattern=IFNAME_RE.pattern)
    VLLM_HOST_IP: ipaddress.IPv4Address
    NCCL_IB_HCA: str
    NCCL_IB_GID_INDEX: str = "auto"
    SPARKPAIR_JOIN_TIMEOUT_S: int = Field(1800, ge=10, le=86_400)
    SPARKPAIR_PREFLIGHT_WAIVE: str = ""
    SPARKPAIR_HOST_USER: str = Field("root", pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    SPARKPAIR_IMAGE: str = Field("sparkpair:0.1.0", pattern=r"^[a-z0-9][a-z0-9._/:@-]*$")
    SPARKPAIR_MODEL_CACHE: str = Field("", pattern=r"^(/.*)?$")

    _port_check = field_validator("SPARKPAIR_MASTER_PORT", "SPARKPAIR_API_PORT", "SPARKPAIR_GATEWAY_PORT")(
        port_in_range
    )
    _int_check = field_validator(*INT_KEYS, mode="before")(ascii_int)

    @field_validator("SPARKPAIR_FABRIC_CIDR", mode="before")
    @classmethod
    def _cidr(cls, v: object) -> object:
        if isinstance(v, str) and "/" not in v:
            raise ValueError("no prefix length")
        return v

    @field_validator("SPARKPAIR_FABRIC_CIDR")
    @classmethod
    def _fabric_like(cls, v: ipaddress.IPv4Network) -> ipaddress.IPv4Network:
        if not FABRIC_PREFIX_MIN <= v.prefixlen <= FABRIC_PREFIX_MAX:
            raise ValueError(f"a /{v.prefixlen} is not a fabric subnet")
        a = v.network_address
        for bad, what in (
            (a in ipaddress.IPv4Network("0.0.0.0/8"), "the 'this network' block 0.0.0.0/8"),
            (a.is_loopback, "loopback"),
            (a.is_link_local, "link-local (169.254.0.0/16: autoconfigured, changes on reboot)"),
            (a.is_multicast, "multicast"),
            (a.is_reserved, "reserved (240.0.0.0/4)"),
        ):
            if bad:
                raise ValueError(f"{v} is {what}")
        return v

    @field_validator("NCCL_IB_HCA")
    @classmethod
    def _hca(cls, v: str) -> str:
        parse_hca_list(v)
        return v

    @field_validator("NCCL_IB_GID_INDEX")
    @classmethod
    def _gid(cls, v: str) -> str:
        if v == "auto":
            return v
        if not re.fullmatch(r"[0-9]{1,3}", v) or int(v) > 255:
            raise ValueError("not 'auto' or an integer 0-255 (ASCII digits)")
        return v

    @field_validator("SPARKPAIR_PROFILE")
    @classmethod
    def _profile(cls, v: str) -> str:
        if PROFILE_NAME_RE.match(v) and ".." not in v:
            return v
        if v.startswith("/"):
            if len(v) > PATH_MAX or not printable(v):
                raise ValueError("a path longer than 4096 characters or with control characters")
            if not no_dotdot(v):
                raise ValueError("a path with a '..' component")
            if not v.endswith((".yaml", ".yml")):
                raise ValueError("a path that does not end in .yaml or .yml (no other file is read)")
            return v
        raise ValueError("neither a profile name nor an absolute .yaml path")

    @field_validator("SPARKPAIR_MODEL")
    @classmethod
    def _model(cls, v: str) -> str:
        if not v:
            return v
        if len(v) > PATH_MAX:
            raise ValueError(f"{len(v)} characters; at most {PATH_MAX}")
        if v.startswith("-"):
            raise ValueError("starts with '-': vLLM would read it as an option")
        if not printable(v):
            raise ValueError("control or non-ASCII characters")
        if v.startswith("/"):
            if not no_dotdot(v):
                raise ValueError("a path with a '..' component")
            return v
        if HF_REPO_ID_RE.match(v) and "--" not in v and ".." not in v and not v.endswith(".git"):
            return v
        raise ValueError("neither a Hugging Face repo id nor an absolute path")

    @field_validator("SPARKPAIR_API_KEY_FILE")
    @classmethod
    def _key_file(cls, v: str) -> str:
        if v and (not v.startswith("/") or len(v) > PATH_MAX or not printable(v) or not no_dotdot(v)):
            raise ValueError("not an absolute path (no '..' component, at most 4096 characters)")
        return v

    @field_validator("SPARKPAIR_API_KEY")
    @classmethod
    def _key(cls, v: SecretStr) -> SecretStr:
        k = v.get_secret_value()
        if k and (len(k) > 4096 or not all("!" <= ch <= "~" for ch in k)):
            # The message names the rule, never the key.
            raise ValueError("longer than 4096 characters, or holds spaces, control or non-ASCII characters")
        return v

    @field_validator("SPARKPAIR_PEERS")
    @classmethod
    def _peers(cls, v: str) -> str:
        peers_from_text(v)  # the health service's own parser: one meaning for the setting
        return v

    @field_validator("SPARKPAIR_PREFLIGHT_WAIVE")
    @classmethod
    def _waive(cls, v: str) -> str:
        ids = [x.strip() for x in v.split(",") if x.strip()]
        unknown = [x for x in ids if x not in CHECK_IDS]
        if unknown:
            cut = [x if len(x) <= 40 else x[:40] + "..." for x in unknown[:5]]
            raise ValueError(f"unknown check ids {cut}; known: {','.join(CHECK_IDS)}")
        return v

    @model_validator(mode="after")
    def _cross(self) -> NodeEnv:
        problems: list[tuple[str, object, str]] = []
        if self.SPARKPAIR_NODE_RANK >= self.SPARKPAIR_NNODES:
            problems.append(
                (
                    "SPARKPAIR_NODE_RANK",
                    self.SPARKPAIR_NODE_RANK,
                    f"an integer below SPARKPAIR_NNODES={self.SPARKPAIR_NNODES}",
                )
            )
        net = self.SPARKPAIR_FABRIC_CIDR
        if self.VLLM_HOST_IP not in net:
            problems.append(
                ("VLLM_HOST_IP", str(self.VLLM_HOST_IP), f"an address in SPARKPAIR_FABRIC_CIDR={net}")
            )
        if self.SPARKPAIR_HEAD_ADDR not in net:
            problems.append(
                (
                    "SPARKPAIR_HEAD_ADDR",
                    str(self.SPARKPAIR_HEAD_ADDR),
                    f"an address in SPARKPAIR_FABRIC_CIDR={net}",
                )
            )
        if self.SPARKPAIR_NODE_RANK == 0 and self.VLLM_HOST_IP != self.SPARKPAIR_HEAD_ADDR:
            problems.append(
                (
                    "SPARKPAIR_HEAD_ADDR",
                    str(self.SPARKPAIR_HEAD_ADDR),
                    f"this node's VLLM_HOST_IP={self.VLLM_HOST_IP} (rank 0 is the head)",
                )
            )
        if self.SPARKPAIR_NODE_RANK != 0 and self.VLLM_HOST_IP == self.SPARKPAIR_HEAD_ADDR:
            problems.append(
                (
                    "VLLM_HOST_IP",
                    str(self.VLLM_HOST_IP),
                    f"an address other than SPARKPAIR_HEAD_ADDR (rank {self.SPARKPAIR_NODE_RANK} is not the head)",  # noqa: E501
                )
            )
        api = self.SPARKPAIR_API_HOST
        if not api.is_unspecified and (api.is_multicast or api.is_reserved or api.is_link_local):
            problems.append(
                (
                    "SPARKPAIR_API_HOST",
                    str(api),
                    "0.0.0.0, ::, 127.0.0.1 or one unicast address of this node",
                )
            )
        if self.SPARKPAIR_API_KEY_FILE and self.SPARKPAIR_API_KEY.get_secret_value():
            problems.append(
                (
                    "SPARKPAIR_API_KEY",
                    "<set>",
                    f"unset while SPARKPAIR_API_KEY_FILE={self.SPARKPAIR_API_KEY_FILE} names the key "
                    "(one source for the key)",
                )
            )
        for peer in peers_from_text(self.SPARKPAIR_PEERS):
            if peer.name == self.SPARKPAIR_NODE_NAME or peer.address == str(self.VLLM_HOST_IP):
                problems.append(
                    (
                        "SPARKPAIR_PEERS",
                        f"{peer.name}={peer.address}",
                        f"the other nodes only, not this one "
                        f"({self.SPARKPAIR_NODE_NAME}={self.VLLM_HOST_IP})",
                    )
                )
        if self.SPARKPAIR_GATEWAY_PORT == self.SPARKPAIR_API_PORT:
            problems.append(
                (
                    "SPARKPAIR_GATEWAY_PORT",
                    self.SPARKPAIR_GATEWAY_PORT,
                    "a port other than SPARKPAIR_API_PORT",
                )
            )
        if self.SPARKPAIR_MASTER_PORT in (self.SPARKPAIR_API_PORT, self.SPARKPAIR_GATEWAY_PORT):
            problems.append(
                ("SPARKPAIR_MASTER_PORT", self.SPARKPAIR_MASTER_PORT, "a port not used by the API or gateway")
            )
        if problems:
            raise ValueError(_CROSS_MARK + "\n".join(f"{k}\x1f{v!r}\x1f{w}" for k, v, w in problems))
        return self

    # --- derived values --------------------------------------------------------------

    @property
    def role(self) -> Literal["head", "worker"]:
        """``head`` for rank 0, else ``worker``."""
        return "head" if self.SPARKPAIR_NODE_RANK == 0 else "worker"

    @property
    def hca_excludes(self) -> bool:
        """Whether NCCL_IB_HCA is NCCL's exclude list (leading ``^``)."""
        return parse_hca_list(self.NCCL_IB_HCA)[0]

    @property
    def hcas(self) -> list[str]:
        """RDMA devices NCCL_IB_HCA names for NCCL to use (ports dropped); ``[]`` for an
        exclude list (``^...``), which names only what NCCL must not use: see
        :meth:`nccl_hcas` for the devices NCCL then picks from those present."""
        exclude, _exact, entries = parse_hca_list(self.NCCL_IB_HCA)
        return [] if exclude else [d for d, _p in entries]

    def nccl_hcas(self, present: list[str]) -> list[str]:
        """The devices of ``present`` (``/sys/class/infiniband`` names) NCCL uses under
        NCCL_IB_HCA: include lists keep the devices matching an entry, exclude lists (``^``)
        drop them; entries match exactly after ``=``, else as name prefixes
        (docs/reference/node-env.md)."""
        exclude, exact, entries = parse_hca_list(self.NCCL_IB_HCA)
        names = [d for d, _p in entries]

        def hit(dev: str) -> bool:
            return any(dev == n if exact else dev.startswith(n) for n in names)

        return [d for d in present if hit(d) != exclude]

    @property
    def waived(self) -> set[str]:
        """Preflight check ids the operator asked to report as warnings."""
        return {x.strip() for x in self.SPARKPAIR_PREFLIGHT_WAIVE.split(",") if x.strip()}

    def probe_host(self) -> str:
        """The address a local health probe must use to reach the API server.

        The server binds ``SPARKPAIR_API_HOST``; a wildcard bind (0.0.0.0 or ::) is reached
        on loopback, any other bind on that very address (field bug B16).
        """
        api = self.SPARKPAIR_API_HOST
        if api.is_unspecified:
            return "::1" if api.version == 6 else "127.0.0.1"
        return str(api)

    def derived_env(self) -> dict[str, str]:
        """Environment ``sparkpair node`` exports to NCCL, Gloo and vLLM (B05, B06)."""
        ifname = self.SPARKPAIR_FABRIC_IFNAME
        return {
            "VLLM_HOST_IP": str(self.VLLM_HOST_IP),
            "NCCL_SOCKET_IFNAME": ifname,
            "GLOO_SOCKET_IFNAME": ifname,
            "TP_SOCKET_IFNAME": ifname,
            "NCCL_IB_HCA": self.NCCL_IB_HCA,
        }

    def api_key_source(self) -> dict[str, str]:
        """The two API-key settings, as :func:`sparkpair_serving.apikey.resolve_api_key` reads
        them (contract: the key from a file or the env, never argv)."""
        return {
            "SPARKPAIR_API_KEY": self.SPARKPAIR_API_KEY.get_secret_value(),
            "SPARKPAIR_API_KEY_FILE": self.SPARKPAIR_API_KEY_FILE,
        }


ENV_FILE_MAX_BYTES = 1 << 20
"""The largest node env file read (bytes; the example is ~8 KB): a bigger one is a mistake
(``/dev/zero``, a log) that must not be read into memory whole."""

_CROSS_MARK = "\x1ecross\x1e"


def parse_env_file(path: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Read a node env file exactly as Docker Compose reads it.

    Compose is the authority on its own syntax (quotes, ``#`` comments, ``export``,
    ``${VAR}``): when a Compose v2 program is at hand (:func:`.compose_cli.find_compose`) the
    values are the ones ``docker compose config`` gives a service reading this file, which are
    the values the containers get. Where none is (inside the image, a laptop without Compose),
    python-dotenv reads the file, after :func:`dotenv_subset_problem` has refused every line
    outside the syntax on which the two agree (tests/unit/cli/test_env_file_reading.py checks
    python-dotenv against Compose on that syntax).

    Args:
        environ: the variables ``${VAR}`` and bare ``KEY`` lines resolve from, as Compose does
            (default ``os.environ``).

    Raises:
        NodeEnvError: the file is missing, too large, not UTF-8, or Compose (or the subset)
            refuses a line; the message names the file and the line.
    """
    from .compose_cli import ComposeUnavailable, EnvFileError, env_file_values

    try:
        data = read_small_file(path, ENV_FILE_MAX_BYTES)
    except (OSError, ValueError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise NodeEnvError(
            f"node env file {path}: cannot read it ({why}); wanted a copy of "
            "configs/node.env.example filled in for this node"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise NodeEnvError(
            f"node env file {path}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); "
            "wanted KEY=VALUE lines"
        ) from None
    env = dict(os.environ if environ is None else environ)
    try:
        return env_file_values(path, env)
    except EnvFileError as e:
        raise NodeEnvError(
            f"node env file {path}: docker compose cannot read it ({e}); wanted KEY=VALUE lines"
        ) from None
    except ComposeUnavailable:
        pass
    import io

    from dotenv import dotenv_values

    for n, raw in enumerate(text.splitlines(), 1):
        why = dotenv_subset_problem(raw)
        if why:
            raise NodeEnvError(
                f"node env file {path}:{n}: {raw[:80]!r} {why}; wanted KEY=VALUE lines in the syntax "
                "python-dotenv and Docker Compose read alike (no Compose program here to read it)"
            )
    return {
        k: v for k, v in dotenv_values(stream=io.StringIO(text), interpolate=False).items() if v is not None
    }


_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_SUBSET_LINE = re.compile(
    rf"^ *(export +)?{_KEY} *= *"
    r"""(?:(?:'[^'$\\\t]*'|"[^"$\\\t]*"|[^'"$\\\t# ][^'"$\\\t]*?)(?: +#[^\t]*)?|) *$"""
)
"""One ``KEY=VALUE`` line python-dotenv 1.2 and Compose v2.40 read alike
(docs/reference/node-env.md#compose-env-files-and-interpolation): an unquoted value
without quotes, ``$``, backslashes or tabs (a `` #`` after a space starts a comment), or a
whole single- or double-quoted value without ``$``, backslashes or its own quote."""


def dotenv_subset_problem(line: str) -> str | None:
    """Why python-dotenv may read ``line`` differently from Compose, or ``None`` (blank lines,
    ``#`` comments and :data:`_SUBSET_LINE` lines are read alike)."""
    s = line.strip()
    if not s or s.startswith("#"):
        return None
    if "=" not in s:
        return "is not KEY=VALUE"
    if not _SUBSET_LINE.match(line):
        return "uses quoting, '$', a backslash or a tab"
    return None


def load_node_env(values: Mapping[str, str], *, source: str = "environment") -> NodeEnv:
    """Validate ``values`` (the env file or ``os.environ``) into a :class:`NodeEnv`.

    Raises:
        NodeEnvError: one line per problem, each naming node, key, value seen and value wanted.
    """
    node = values.get("SPARKPAIR_NODE_NAME") or ""
    if not NODE_NAME_RE.match(node):
        # An invalid name is reported on its own line; messages name the host instead.
        node = socket.gethostname()
    data = {k: v for k, v in values.items() if k in NodeEnv.model_fields}
    # An empty value in an env file means "use the default", as in compose interpolation.
    data = {k: v for k, v in data.items() if v != "" or k in ("SPARKPAIR_MODEL", "SPARKPAIR_PREFLIGHT_WAIVE")}
    lines: list[str] = []
    if values.get("VLLM_API_KEY"):
        lines.append(
            f"node {node} ({source}): VLLM_API_KEY={shown('VLLM_API_KEY', values['VLLM_API_KEY'])}; "
            "wanted it unset (sparkpair node hands vLLM the key from SPARKPAIR_API_KEY_FILE or "
            "SPARKPAIR_API_KEY)"
        )
    for key in DERIVED_KEYS:
        if key in values and values[key] != "":
            want = values.get("SPARKPAIR_FABRIC_IFNAME", "")
            if values[key] != want:
                lines.append(
                    f"node {node} ({source}): {key}={shown(key, values[key])}; wanted it unset or equal to "
                    f"{want!r} (sparkpair node derives it from "
                    "SPARKPAIR_FABRIC_IFNAME)"
                )
    try:
        env = NodeEnv.model_validate(data)
    except ValidationError as e:
        for err in e.errors():
            msg = str(err.get("msg", ""))
            if _CROSS_MARK in msg:
                for item in msg.split(_CROSS_MARK, 1)[1].split("\n"):
                    key, seen, want = item.split("\x1f")
                    lines.append(f"node {node} ({source}): {key}={seen}; wanted {want}")
                continue
            key = str(err["loc"][0]) if err["loc"] else "?"
            seen = shown(key, values[key]) if key in values else "'<unset>'"
            lines.append(
                f"node {node} ({source}): {key}={seen}; wanted {WANTED.get(key, msg)} "
                f"({msg.removeprefix('Value error, ')})"
            )
    if lines:
        raise NodeEnvError("\n".join(lines))
    return env


def load_node_env_file(path: Path) -> NodeEnv:
    """Parse and validate a node env file (see :func:`load_node_env`)."""
    return load_node_env(parse_env_file(path), source=str(path))


def load_node_env_from_environ() -> NodeEnv:
    """Validate the container's environment (compose passes the env file through ``env_file``)."""
    return load_node_env(dict(os.environ), source="container environment")


NODE_ENV_VAR = "SPARKPAIR_NODE_ENV"
"""The environment variable naming this node's env file for the host-side commands."""

DEFAULT_ENV_FILE = Path("configs/node.env")
"""The node env file a host-side command reads when none is named."""


def in_container(root: Path = Path("/")) -> bool:
    """Whether this process runs in a container (Docker's ``/.dockerenv``, Podman's
    ``/run/.containerenv``): there the node's settings are the environment Compose built."""
    return (root / ".dockerenv").exists() or (root / "run" / ".containerenv").exists()


def env_file_choice(
    given: Path | None, environ: Mapping[str, str] | None = None, option: str = "--env-file"
) -> Path:
    """The node env file a host-side command reads (``node validate``, ``preflight``, ``node
    init``): ``--env-file``, else ``$SPARKPAIR_NODE_ENV``, else :data:`DEFAULT_ENV_FILE`.

    Raises:
        NodeEnvError: ``--env-file`` and ``SPARKPAIR_NODE_ENV`` name two different files; the
            message names both.
    """
    env = os.environ if environ is None else environ
    named = env.get(NODE_ENV_VAR, "")
    if given is not None and named and Path(named).resolve() != given.resolve():
        raise NodeEnvError(
            f"{option} {given} and {NODE_ENV_VAR}={named} name two different node env files; "
            f"wanted one: drop {option}, or unset {NODE_ENV_VAR}"
        )
    if given is not None:
        return given
    return Path(named) if named else DEFAULT_ENV_FILE

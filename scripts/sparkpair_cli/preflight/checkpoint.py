"""Checkpoint completeness and gate-weight dtype, read from safetensors headers without torch.

A safetensors file is an 8-byte little-endian header length, a JSON header
(``{name: {dtype, shape, data_offsets: [begin, end]}}``, offsets relative to the end of
the header) and the data. A complete shard is exactly ``8 + header_len + max(end)`` bytes.
"""

from __future__ import annotations

import json
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .result import Ctx

GATE_RE = re.compile(r"(^|\.)gate\.weight$")
"""MoE router gate weights (``...mlp.gate.weight`` / ``...ffn.gate.weight``), not ``gate_proj``."""

DRAFT_RE = re.compile(r"^mtp\.\d+\.")
"""Tensors of the DeepSeek-V4 draft layers shipped inside the checkpoint (``mtp.<layer>.*``; vLLM
0.33's DSpark loader reads them from the target checkpoint: docs/reference/speculation.md)."""

MAX_HEADER = 100 << 20
"""Refuse absurd header lengths (a corrupt file) instead of reading them."""


class InspectError(ValueError):
    """The folder is not a readable safetensors checkpoint."""


@dataclass
class CheckpointReport:
    """What ``inspect_checkpoint`` found."""

    folder: Path
    shards: list[str]
    tensors: int
    total_bytes: int
    gate_dtypes: dict[str, int]
    problems: list[str] = field(default_factory=list)
    draft_tensors: int = 0

    @property
    def summary(self) -> str:
        """One line: shards, tensors, size, gate dtypes."""
        return (
            f"{len(self.shards)} shards, {self.tensors} tensors, {self.total_bytes / (1 << 30):.2f} GiB, "
            f"gate dtypes {self.gate_dtypes or 'none'}, draft (mtp.*) tensors {self.draft_tensors}"
        )


def read_header(path: Path) -> tuple[int, dict[str, Any]]:
    """``(header_len, header)`` of a safetensors file.

    Raises:
        InspectError: too short, or a header that is not JSON.
    """
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise InspectError(f"{path.name}: {len(raw)} bytes; wanted at least the 8-byte header length")
        (n,) = struct.unpack("<Q", raw)
        if n > MAX_HEADER:
            raise InspectError(f"{path.name}: header length {n}; wanted <= {MAX_HEADER} (corrupt file?)")
        body = f.read(n)
    if len(body) < n:
        raise InspectError(f"{path.name}: header cut at {len(body)} of {n} bytes (incomplete download)")
    try:
        return n, json.loads(body)
    except json.JSONDecodeError as e:
        raise InspectError(f"{path.name}: header is not JSON ({e})") from None


def inspect_checkpoint(
    folder: Path, gate_dtype: str | None = None, need_draft: bool = False
) -> CheckpointReport:
    """Check every shard the index names exists, is complete, and holds the tensors the index
    maps to it; collect gate-weight dtypes and compare with ``gate_dtype`` when given; count the
    draft (``mtp.*``) tensors the index names and, with ``need_draft``, require some (a DSpark
    profile reads its draft from the checkpoint: the 0731 checkpoint has them, 48 shards).

    Raises:
        InspectError: no index and no ``model.safetensors``, or an index that is not JSON.
    """
    idx = folder / "model.safetensors.index.json"
    problems: list[str] = []
    if idx.is_file():
        try:
            weight_map: dict[str, str] = json.loads(idx.read_text())["weight_map"]
        except (json.JSONDecodeError, KeyError) as e:
            raise InspectError(f"{idx}: not a safetensors index ({e})") from None
    elif (folder / "model.safetensors").is_file():
        _, h = read_header(folder / "model.safetensors")
        weight_map = {k: "model.safetensors" for k in h if k != "__metadata__"}
    else:
        raise InspectError(f"{folder}: no model.safetensors.index.json or model.safetensors")
    shards = sorted(set(weight_map.values()))
    draft = sum(1 for k in weight_map if DRAFT_RE.match(k))
    if need_draft and not draft:
        problems.append(
            f"draft weights: no mtp.* tensors in {len(shards)} shards; wanted the DSpark draft inside the "
            "checkpoint (the profile's speculation method is dspark: the 0731 checkpoint, 48 shards)"
        )
    total = 0
    tensors = 0
    gates: dict[str, int] = {}
    for shard in shards:
        p = folder / shard
        if not p.is_file():
            problems.append(f"{shard}: missing ({sum(1 for v in weight_map.values() if v == shard)} tensors)")
            continue
        try:
            n, header = read_header(p)
        except InspectError as e:
            problems.append(str(e))
            continue
        entries = {k: v for k, v in header.items() if k != "__metadata__"}
        end = max((v["data_offsets"][1] for v in entries.values()), default=0)
        size = p.stat().st_size
        want = 8 + n + end
        if size != want:
            problems.append(
                f"{shard}: {size} bytes; wanted {want} (8 + header {n} + data {end}): incomplete download"
            )
        total += size
        tensors += len(entries)
        for name, shard_of in weight_map.items():
            if shard_of == shard and name not in entries:
                problems.append(f"{shard}: tensor {name} named by the index is not in the shard")
                break
        for name, meta in entries.items():
            if GATE_RE.search(name):
                gates[meta["dtype"]] = gates.get(meta["dtype"], 0) + 1
    if gate_dtype is not None:
        wrong = {d: k for d, k in gates.items() if d != gate_dtype}
        if not gates:
            problems.append(f"gate weights: none found (*.gate.weight); wanted {gate_dtype}")
        elif wrong:
            problems.append(
                f"gate weights: dtypes {gates}; wanted all {gate_dtype} (the profile's router path assumes it)"  # noqa: E501
            )
    return CheckpointReport(folder, shards, tensors, total, gates, problems, draft)


def expected_gate_dtype(profile: Any) -> str | None:
    """Gate dtype the profile assumes: ``server.env.SPARKPAIR_GATE_DTYPE`` if set, else BF16
    for DeepSeek-V4 (docs/reference/vllm-code-paths.md#dsv4-shapes: bf16 [256, 4096]), else none."""
    env = getattr(getattr(profile, "server", None), "env", {}) or {}
    if env.get("SPARKPAIR_GATE_DTYPE"):
        return str(env["SPARKPAIR_GATE_DTYPE"])
    return "BF16" if profile.is_dsv4 else None


def expects_draft(profile: Any) -> bool:
    """True when the profile's speculation reads its draft from the target checkpoint (DSpark)."""
    spec = getattr(getattr(profile, "server", None), "speculation", None)
    return spec is not None and spec.method == "dspark" and "model" not in spec.extra


def pull_hint(model: str, revision: str | None) -> str:
    """The commands that put ``model`` on every node (docs/operations.md, "The checkpoint, once"),
    complete enough to paste: ``model pull`` needs ``--into``, and the node then serves the
    folder (``SPARKPAIR_MODEL=/models/<folder>``, the model cache's mount point in compose)."""
    folder = model.rstrip("/").rsplit("/", 1)[-1] or "model"
    rev = f" --revision {revision}" if revision else ""
    return (
        f"on one node: sparkpair model pull {model}{rev} --into <SPARKPAIR_MODEL_CACHE>/{folder}; "
        f"then sparkpair model sync --from <that node> --folder {folder}, and set "
        f"SPARKPAIR_MODEL=/models/{folder} (docs/operations.md)"
    )


def resolve_model_dir(model: str, hf_home: Path, revision: str | None = None) -> Path | None:
    """The local folder of ``model``: a path as given (absolute, or below ``hf_home``), or a
    hub id's snapshot in ``hf_home/hub``.

    With ``revision`` (the profile's ``--revision``: a commit id, or a branch/tag name) only
    that revision's snapshot counts: ``snapshots/<revision>``, or the commit ``refs/<revision>``
    names; ``None`` when it is not downloaded (a snapshot of another revision is never taken
    for it). Without one: ``refs/main``'s snapshot, else the newest snapshot.
    """
    for cand in (Path(model), hf_home / model.lstrip("/")):
        if cand.is_dir() and (
            any(cand.glob("*.safetensors")) or (cand / "model.safetensors.index.json").exists()
        ):
            return cand
    repo = hf_home / "hub" / ("models--" + model.replace("/", "--"))
    snaps = repo / "snapshots"
    if not snaps.is_dir():
        return None
    if revision is not None:
        if "/" not in revision and (snaps / revision).is_dir():
            return snaps / revision
        ref = repo / "refs" / revision
        if ref.is_file() and (snaps / ref.read_text().strip()).is_dir():
            return snaps / ref.read_text().strip()
        return None
    ref = repo / "refs" / "main"
    if ref.is_file() and (snaps / ref.read_text().strip()).is_dir():
        return snaps / ref.read_text().strip()
    dirs = sorted((d for d in snaps.iterdir() if d.is_dir()), key=lambda d: d.stat().st_mtime)
    return dirs[-1] if dirs else None


def profile_checkpoint(model_override: str | None, profile: Any) -> tuple[str, str | None]:
    """``(model, revision)`` a node serves: ``SPARKPAIR_MODEL`` when set (no revision: a local
    folder or another hub id is taken as it is), else the profile's ``server.model`` at its
    ``--revision``."""
    if model_override:
        return model_override, None
    from sparkpair_serving.profile import arg_value

    return profile.server.model, arg_value(profile.server.args, "--revision")


def check_checkpoint(c: Ctx) -> None:
    """The checkpoint is complete and its gate weights have the dtype the profile assumes
    (``sparkpair inspect``)."""
    model, revision = profile_checkpoint(c.env.SPARKPAIR_MODEL, c.profile)
    hf_home = c.host.path(os.environ.get("HF_HOME", "/models"))
    d = resolve_model_dir(model, hf_home, revision)
    if d is None:
        at = f" at revision {revision}" if revision else ""
        c.add(
            "checkpoint",
            "fail",
            "model",
            f"{model}{at}",
            f"downloaded under HF_HOME ({hf_home})",
            pull_hint(model, revision),
        )
        return
    try:
        gate, draft = expected_gate_dtype(c.profile), expects_draft(c.profile)
        rep = inspect_checkpoint(d, gate_dtype=gate, need_draft=draft)
    except InspectError as e:
        c.add("checkpoint", "fail", "checkpoint", d, "a complete safetensors checkpoint", str(e))
        return
    c.report.facts["checkpoint_bytes"] = rep.total_bytes
    if rep.problems:
        c.add(
            "checkpoint",
            "fail",
            "checkpoint",
            d,
            "complete, gate dtype as the profile assumes",
            "; ".join(rep.problems[:5]),
        )
    else:
        c.add(
            "checkpoint",
            "pass",
            "checkpoint",
            f"{len(rep.shards)} shards, {rep.total_bytes / (1 << 30):.1f} GiB",
            "complete",
            rep.summary,
        )

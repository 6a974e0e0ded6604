"""Provenance of a benchmark run: what was measured, with what, on what.

Collected once per run and stored under ``provenance`` in the result JSON:

- ``endpoint``: base URL, served model name, model root and ``max_model_len`` (from
  ``/v1/models``) and the server's vLLM version (from ``/version``);
- ``image``: the serving image, from ``--image`` or ``SPARKPAIR_IMAGE`` (the server does not
  report it);
- ``overlay_plan``: the overlay's kernel plan JSON, from ``--plan-file`` or the file named by
  ``SPARKPAIR_PLAN_PATH`` (the path the overlay plugin writes to);
- ``profile``: the model profile (``configs/profiles``) when ``--profile`` is given;
- ``client_host`` (the machine running the benchmark), and ``server_host`` only when the
  endpoint is on this machine (loopback); otherwise ``server_host.note`` says it was not seen;
- ``sparkpair``: package version and git commit of the checkout; ``bench_client``: the vLLM
  and Python versions of the client; ``command``: the argv.

Nothing here raises for a missing source: each absent item carries ``None`` and a reason.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx

REPO_ROOT = Path(__file__).resolve().parents[3]


def _run(argv: list[str], timeout_s: float = 10.0) -> str | None:
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def endpoint_info(base_url: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """``/v1/models`` and ``/version`` of the endpoint.

    Returns ``served_model_name``, ``model_root``, ``max_model_len`` (tokens) of the first
    model, ``models`` (all ids) and ``vllm_version`` (``None`` plus ``version_error`` when
    ``/version`` does not answer: not every OpenAI-compatible server is vLLM).

    Raises:
        RuntimeError: ``/v1/models`` does not answer 200 with at least one model.
    """
    base = base_url.rstrip("/")
    with httpx.Client(timeout=timeout_s) as c:
        try:
            r = c.get(base + "/v1/models")
            r.raise_for_status()
            data = r.json().get("data") or []
        except (httpx.HTTPError, ValueError) as e:
            raise RuntimeError(
                f"endpoint {base}: GET /v1/models failed ({type(e).__name__}: {e}); "
                "want 200 with a model list. Is the server up at this --base-url?"
            ) from None
        if not data:
            raise RuntimeError(f"endpoint {base}: /v1/models lists no model; want at least one")
        info: dict[str, Any] = {
            "base_url": base,
            "models": [m.get("id") for m in data],
            "served_model_name": data[0].get("id"),
            "model_root": data[0].get("root"),
            "max_model_len": data[0].get("max_model_len"),
        }
        try:
            v = c.get(base + "/version")
            v.raise_for_status()
            info["vllm_version"] = v.json().get("version")
        except (httpx.HTTPError, ValueError) as e:
            info["vllm_version"] = None
            info["version_error"] = f"{type(e).__name__}: {e}"[:200]
    return info


def host_info() -> dict[str, Any]:
    """This machine: hostname, OS, CPU model and count, memory (bytes), GPUs and driver.

    GPUs come from ``nvidia-smi`` (name, driver version, memory in MiB); without it ``gpus`` is
    ``[]`` and ``driver_version`` is ``None`` with ``driver_note`` saying why.
    """
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
    }
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "cpu model")):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["mem_total_bytes"] = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    gpus: list[dict[str, Any]] = []
    driver = None
    if shutil.which("nvidia-smi"):
        out = _run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,compute_cap",
                "--format=csv,noheader,nounits",
            ]
        )
        for line in (out or "").splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 4:
                gpus.append({"name": parts[0], "memory_mib": parts[2], "compute_cap": parts[3]})
                driver = parts[1]
        info["driver_note"] = None if out is not None else "nvidia-smi failed"
    else:
        info["driver_note"] = "no nvidia-smi on this host"
    info["gpus"] = gpus
    info["driver_version"] = driver
    return info


def _is_loopback(base_url: str) -> bool:
    host = urlparse(base_url).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def git_info() -> dict[str, Any]:
    """Commit and dirty flag of the sparkpair checkout (``None`` outside a git checkout)."""
    sha = _run(["git", "-C", str(REPO_ROOT), "rev-parse", "HEAD"])
    status = _run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"])
    return {"git_sha": sha, "git_dirty": bool(status) if status is not None else None}


def overlay_plan(plan_file: Path | None) -> dict[str, Any]:
    """The overlay kernel plan: ``--plan-file``, else ``$SPARKPAIR_PLAN_PATH``, else none.

    Returns ``{"source": path or None, "plan": parsed JSON or None, "note": why not}``.
    """
    if plan_file is None and os.environ.get("SPARKPAIR_PLAN_PATH"):
        plan_file = Path(os.environ["SPARKPAIR_PLAN_PATH"])
        origin = "SPARKPAIR_PLAN_PATH"
    else:
        origin = "--plan-file"
    if plan_file is None:
        return {"source": None, "plan": None, "note": "no --plan-file and SPARKPAIR_PLAN_PATH unset"}
    from sparkpair_overlay.plan import KernelPlan, PlanError

    try:
        return {
            "source": str(plan_file),
            "origin": origin,
            "plan": KernelPlan.load(plan_file, origin).to_json(),
            "note": None,
        }
    except PlanError as e:  # unreadable, not JSON, or not a kernel plan (names file and key)
        return {
            "source": str(plan_file),
            "origin": origin,
            "plan": None,
            "note": f"{type(e).__name__}: {e}"[:300],
        }


def collect(
    endpoint: dict[str, Any],
    *,
    image: str | None,
    plan_file: Path | None,
    profile: dict[str, Any] | None,
    command: list[str],
) -> dict[str, Any]:
    """Everything above in one mapping (see the module docstring)."""
    try:
        import vllm  # noqa: PLC0415 - the client's vLLM, already imported by the runner

        client_vllm = getattr(vllm, "__version__", None)
    except ImportError:
        client_vllm = None
    try:
        from importlib.metadata import version

        sp_version = version("sparkpair")
    except Exception:  # noqa: BLE001 - not installed: a source checkout on sys.path
        sp_version = None
    host = host_info()
    image_value = image or os.environ.get("SPARKPAIR_IMAGE")
    return {
        "endpoint": endpoint,
        "image": {
            "value": image_value,
            "origin": "--image" if image else ("SPARKPAIR_IMAGE" if image_value else None),
            "note": None
            if image_value
            else "not reported by the server; pass --image or set SPARKPAIR_IMAGE",
        },
        "overlay_plan": overlay_plan(plan_file),
        "profile": profile,
        "client_host": host,
        "server_host": host
        if _is_loopback(endpoint["base_url"])
        else {"note": "server is remote; its hardware is not visible to the client"},
        "sparkpair": {"version": sp_version, **git_info()},
        "bench_client": {"vllm_version": client_vllm, "python": sys.version.split()[0]},
        "command": command,
    }

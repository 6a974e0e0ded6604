"""A vLLM wheel's runtime requirements against the stack tier's shared pins and the package registry."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from sparkpair_overlay import versions

from .findings import ReportLine


def registry_versions(package: str) -> list[str]:
    """The versions the package registry has for ``package`` (``pip index versions``), newest first;
    empty when it has none or pip cannot ask."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", package], capture_output=True, text=True
    )
    m = re.search(r"Available versions: (.*)", proc.stdout)
    return [v.strip() for v in m.group(1).split(",")] if m else []


def shared_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` of a requirements file's ``name==version`` lines."""
    from packaging.utils import canonicalize_name

    pins = {}
    for line in path.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s#;]+)", line)
        if m:
            pins[canonicalize_name(m.group(1).split("[")[0])] = m.group(2)
    return pins


def pin_findings(
    requires: Iterable[str],
    shared: dict[str, str],
    available: Callable[[str], list[str]],
) -> tuple[list[ReportLine], dict[str, str], list[versions.Substitute]]:
    """The wheel's runtime requirements against the stack tier's shared pins and the registry.

    Returns:
        ``(findings, chosen, substitutes)``: ``chosen`` maps ``torch`` and ``flashinfer-python`` to the
        versions the release's stack venv takes (the pin, or the nearest the registry has: torch's newest
        CPU build; FlashInfer's nearest newer release, else the newest older one); ``substitutes`` the
        ones that differ from the pin, as the release's record must name them.
    """
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    out: list[ReportLine] = []
    chosen: dict[str, str] = {}
    subs: list[versions.Substitute] = []
    for text in requires:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        pinned = [s.version for s in req.specifier if s.operator == "=="]
        if name == "torch" and pinned:
            cpu = [v for v in available("torch") if v.endswith("+cpu")]
            want_cpu = f"{pinned[0]}+cpu"
            use = want_cpu if want_cpu in cpu else (max(cpu, key=Version) if cpu else "")
            chosen["torch"] = use
            status = "same" if use == want_cpu else "changed"
            if use != want_cpu:
                subs.append(versions.Substitute("torch", str(req.specifier), use))
            out.append(
                ReportLine(
                    "pins",
                    status,
                    f"torch=={pinned[0]}: "
                    + (
                        "its CPU build is on the registry"
                        if use == want_cpu
                        else f"no CPU build on the registry; the stack tier takes {use or 'NOTHING'} "
                        "(a substitute the record must name)"
                    ),
                )
            )
        elif name == "flashinfer-python" and pinned:
            have = available("flashinfer-python")
            if pinned[0] in have:
                chosen[name] = pinned[0]
                out.append(ReportLine("pins", "same", f"flashinfer-python=={pinned[0]} is on the registry"))
            else:
                newer = sorted((v for v in have if Version(v) > Version(pinned[0])), key=Version)
                older = sorted((v for v in have if Version(v) < Version(pinned[0])), key=Version)
                use = newer[0] if newer else (older[-1] if older else "")
                chosen[name] = use
                subs.append(versions.Substitute(req.name, str(req.specifier), use))
                out.append(
                    ReportLine(
                        "pins",
                        "changed",
                        f"flashinfer-python=={pinned[0]} is not on the registry "
                        f"(it has {', '.join(sorted(have, key=Version)[-3:])}); the stack tier takes "
                        f"{use or 'NOTHING'} (a substitute the record must name)",
                    )
                )
        elif name in shared and name not in ("vllm",):
            if not req.specifier.contains(shared[name], prereleases=True):
                out.append(
                    ReportLine(
                        "pins",
                        "ACTION",
                        f"scripts/stack-requirements.txt pins {name}=={shared[name]}; vLLM asks {req}",
                    )
                )
    if not any(f.status == "ACTION" for f in out):
        out.append(
            ReportLine(
                "pins", "same", "every shared pin of scripts/stack-requirements.txt satisfies the wheel"
            )
        )
    return out, chosen, subs

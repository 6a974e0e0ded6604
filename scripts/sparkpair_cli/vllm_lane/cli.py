"""The lane's command line: ``scripts/vllm-lane.sh VERSION [--base VERSION] [--no-stack] [--json FILE]``
(what it prints and its exit status: :mod:`sparkpair_cli.vllm_lane`)."""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence

from sparkpair_overlay import versions
from sparkpair_overlay.targets import deepgemm_conditions, o_proj_owner

from .findings import LaneError, ReportLine
from .pins import pin_findings, registry_versions, shared_pins
from .source import compare_source
from .stack import REPO, requirements_file, run_stack, suggested_record, write_requirements
from .wheels import fetch_wheel, wheel_reader, wheel_requires


def parse_version(version: str) -> tuple[int, ...]:
    """``"0.34.0"`` -> ``(0, 34, 0)``.

    Raises:
        LaneError: not a release version: three ASCII numbers without leading zeros, the form of
            vLLM's release wheels (``vllm-0.34.0-…whl``).
    """
    if not re.fullmatch(r"(0|[1-9][0-9]*)(\.(0|[1-9][0-9]*)){2}", version, flags=re.ASCII):
        raise LaneError(
            f"vLLM version {version!r} is not a release version; wanted MAJOR.MINOR.PATCH in ASCII "
            "digits without leading zeros, e.g. 0.34.0"
        )
    return tuple(int(x) for x in version.split("."))


def base_release(version: str) -> str:
    """The newest stack-tier release older than ``version`` (what the lane compares with).

    Raises:
        LaneError: there is none.
    """
    older = [
        r.version
        for r in versions.RELEASES
        if r.tier == "stack" and parse_version(r.version) < parse_version(version)
    ]
    if not older:
        raise LaneError(
            f"no stack-tier release older than vLLM {version} to compare with; wanted a version "
            f"newer than {min((r.version for r in versions.RELEASES if r.tier == 'stack'), default='?')}"
        )
    return max(older, key=parse_version)


def main(argv: Sequence[str] | None = None) -> int:
    """``scripts/vllm-lane.sh VERSION [--base VERSION] [--no-stack]``: see :mod:`sparkpair_cli.vllm_lane`."""
    ap = argparse.ArgumentParser(
        prog="scripts/vllm-lane.sh",
        description="Is a vLLM release proven for sparkpair, and what changed for the overlay.",
    )
    ap.add_argument("version", help="the vLLM release, e.g. 0.34.0")
    ap.add_argument(
        "--base", help="the release to compare with (default: the newest older stack-tier release)"
    )
    ap.add_argument(
        "--no-stack", action="store_true", help="read the source only; make no venv, run no tests"
    )
    ap.add_argument("--json", dest="json_out", help="also write the findings to this JSON file")
    args = ap.parse_args(argv)
    say = print
    try:
        parse_version(args.version)
        if args.json_out is not None:  # checked now, not after a stack tier of an hour
            from sparkpair_serving.inputs import check_output_file

            try:
                args.json_out = check_output_file(args.json_out, "--json")
            except ValueError as exc:
                raise LaneError(str(exc)) from None
        base = args.base or base_release(args.version)
        parse_version(base)
        say(f"sparkpair lane: vLLM {args.version} against {base}")
        new_wheel, base_wheel = fetch_wheel(args.version), fetch_wheel(base)
    except LaneError as exc:
        print(f"sparkpair lane: {exc}", file=sys.stderr)
        return 2
    say(f"  wheels: {new_wheel.name}, {base_wheel.name} ({new_wheel.parent})")
    record = versions.release(args.version)
    say(f"  record: {versions.proof_line(args.version)}")
    new, old = wheel_reader(new_wheel), wheel_reader(base_wheel)
    findings = compare_source(old, new, base, args.version, record)
    pins, chosen, subs = pin_findings(
        wheel_requires(new_wheel), shared_pins(REPO / "scripts" / "stack-requirements.txt"), registry_versions
    )
    findings += pins
    if record is None:
        nvcc = deepgemm_conditions(new)[1]
        findings.append(
            ReportLine(
                "record",
                "ACTION",
                "no release record; wanted in versions.RELEASES: "
                + suggested_record(args.version, [str(x) for x in subs], nvcc, o_proj_owner(new)),
            )
        )
    elif list(record.substitutes) != subs:
        findings.append(
            ReportLine(
                "record",
                "ACTION",
                f"the record names substitutes "
                f"{[str(x) for x in record.substitutes]}; the registry gives {[str(x) for x in subs]}",
            )
        )
    else:
        findings.append(
            ReportLine(
                "record",
                "same",
                f"{record.level}; substitutes named: {', '.join(map(str, record.substitutes)) or 'none'}",
            )
        )
    if not requirements_file(args.version).exists():
        path = write_requirements(args.version, chosen, "nvcc" in deepgemm_conditions(new)[0])
        findings.append(
            ReportLine("record", "ACTION", f"wrote {path.relative_to(REPO)}: commit it with the record")
        )
    for f in findings:
        say(str(f))
    passed = True
    if not args.no_stack:
        say(
            f"sparkpair lane: the stack tier on vLLM {args.version} "
            f"(scripts/setup-stack.sh --vllm {args.version})"
        )
        passed, summary = run_stack(args.version, say)
        say(f"[{'same' if passed else 'ACTION'}] stack tier: {summary}")
        findings.append(ReportLine("stack tier", "same" if passed else "ACTION", summary))
    if args.json_out is not None:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps([f.__dict__ for f in findings], indent=2) + "\n")
    actions = [f for f in findings if f.status == "ACTION"]
    fixes = [f for f in findings if f.status == "UPSTREAM FIX"]
    verdict = (
        "verified to patch"
        if not actions and passed and not args.no_stack
        else "source clean (stack tier not run)"
        if not actions and args.no_stack
        else "NOT verified"
    )
    say(
        f"sparkpair lane: vLLM {args.version}: {verdict}; {len(actions)} action(s), "
        f"{len(fixes)} upstream fix(es)"
    )
    return 0 if not actions and passed else 1

#!/usr/bin/env python3
"""Print the Triton requirement of sparkpair's ``kernels`` extra (``triton==X.Y.Z``).

pyproject.toml's ``kernels`` extra is the one place the project names its Triton (the one the
image's torch requires). The scripts that install Triton outside that extra read it here:
scripts/setup-stack.sh (.venv-stack) and tests/docker/standin/build-standin.sh (the docker
stand-in). Standard library only (``tomllib``: Python >= 3.11).

usage: python3 scripts/triton_requirement.py [PYPROJECT]   (default: the repo's pyproject.toml)
exit 1, naming the file, when the extra holds no exact ``triton==`` pin.
"""

from __future__ import annotations

import sys
from pathlib import Path

import tomllib


def triton_requirement(pyproject: Path) -> str:
    """``triton==X.Y.Z`` from ``pyproject``'s ``[project.optional-dependencies] kernels``.

    Raises:
        ValueError: no such extra, or its Triton entry is missing or not an exact ``==`` pin.
    """
    extras = tomllib.loads(pyproject.read_text()).get("project", {}).get("optional-dependencies", {})
    pins = [r.replace(" ", "") for r in extras.get("kernels", []) if r.replace(" ", "").startswith("triton")]
    if len(pins) != 1 or not pins[0].startswith("triton==") or pins[0].count("=") != 2:
        raise ValueError(
            f"{pyproject}: the kernels extra names Triton as {pins or 'nothing'}; wanted one exact pin "
            "'triton==X.Y.Z' (the Triton the image's torch requires)"
        )
    return pins[0]


def main() -> int:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "pyproject.toml"
    try:
        print(triton_requirement(path))
    except (OSError, ValueError, tomllib.TOMLDecodeError) as exc:
        print(f"sparkpair: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

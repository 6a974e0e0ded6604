"""pytest imports test modules by basename (rootdir-relative "prepend" import mode, no package
``__init__``), so two test files with one name in the same run abort collection of the whole run
("import file mismatch"). The stack tier is its own run (scripts/test.sh), so its files may
share a name with the main run's; within each run every basename is unique."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[2]


def clashes(files: list[Path]) -> dict[str, list[str]]:
    """Basenames held by more than one of ``files``, with their paths relative to tests/."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for f in files:
        by_name[f.name].append(str(f.relative_to(TESTS)))
    return {k: sorted(v) for k, v in by_name.items() if len(v) > 1}


def test_a_basename_shared_within_one_run_is_found() -> None:
    a, b = TESTS / "unit" / "x" / "test_same.py", TESTS / "gpu" / "test_same.py"
    assert clashes([a, b, TESTS / "unit" / "test_other.py"]) == {
        "test_same.py": ["gpu/test_same.py", "unit/x/test_same.py"]
    }


def test_every_test_module_name_is_unique_within_its_run() -> None:
    every = [p for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts]
    stack = [p for p in every if p.relative_to(TESTS).parts[0] == "stack"]
    main = [p for p in every if p not in stack]
    assert clashes(main) == {}, "rename one of each pair (the main run's collection aborts)"
    assert clashes(stack) == {}

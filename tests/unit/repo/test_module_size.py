"""No Python module over :data:`MODULE_LIMIT` lines, except the per-target kernel files under
``overlay/sparkpair_overlay/kernels/`` (at most :data:`KERNEL_LIMIT`): a module a newcomer has to
read whole stays readable whole (issue 34, "A house a newcomer can live in").

Every ``.py`` file git knows of (tracked, or new and not ignored) is counted, tests included. Lines
are counted as ``wc -l`` counts them. :data:`ALLOWED_OVER` names the modules still over the limit
while their split is under way; an entry is removed when its split lands, and the test fails on an
entry that is no longer over (or no longer exists), so the list can only shrink.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]

MODULE_LIMIT = 600
"""Most lines a module may have (issue 34's bar)."""

KERNEL_LIMIT = 800
"""Most lines a per-target kernel file may have (issue 34's bar)."""

KERNELS = "overlay/sparkpair_overlay/kernels/"
"""Where the per-target kernel files live (each file under it, subfolders included)."""

ALLOWED_OVER: dict[str, str] = {  # none today: every module is within its limit
}
"""Modules over their limit today, each with the issue and the helper whose split brings it under.
Remove an entry when its split lands (the test fails while a listed file is within its limit)."""


def limit_of(rel: str) -> int:
    """The line limit of the module at ``rel`` (a path relative to the repository, ``/``-separated)."""
    return KERNEL_LIMIT if rel.startswith(KERNELS) else MODULE_LIMIT


def line_count(path: Path) -> int:
    """Lines of ``path`` as ``wc -l`` counts them (newline characters)."""
    return path.read_bytes().count(b"\n")


def python_modules(repo: Path) -> list[str]:
    """Every ``.py`` file git knows of in ``repo`` (tracked, or untracked and not ignored) that
    exists in the working tree, relative and sorted."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout
    names = {n.decode() for n in out.split(b"\0") if n}
    return sorted(n for n in names if (repo / n).is_file())


def size_problems(repo: Path, modules: Iterable[str], allowed: dict[str, str]) -> list[str]:
    """One line per module over its limit and not in ``allowed``, and per ``allowed`` entry that is
    within its limit or absent (stale); empty when the tree keeps the bar."""
    problems: list[str] = []
    seen = set()
    for rel in modules:
        seen.add(rel)
        n, limit = line_count(repo / rel), limit_of(rel)
        if n > limit and rel not in allowed:
            problems.append(f"{rel}: {n} lines; wanted at most {limit} (split it along its seams)")
        elif n <= limit and rel in allowed:
            problems.append(
                f"{rel}: {n} lines, within {limit}: remove its ALLOWED_OVER entry ({allowed[rel]})"
            )
    for rel, why in sorted(allowed.items()):
        if rel not in seen:
            problems.append(f"{rel}: no such module: remove its ALLOWED_OVER entry ({why})")
    return problems


def test_no_module_is_over_its_line_limit() -> None:
    problems = size_problems(REPO, python_modules(REPO), ALLOWED_OVER)
    assert problems == [], "\n".join(problems)


def test_the_scan_fails_on_a_long_module_and_on_a_stale_allowance(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("x = 1\n" * (MODULE_LIMIT + 1))
    (tmp_path / "b.py").write_text("x = 1\n" * MODULE_LIMIT)
    kernels = tmp_path / KERNELS
    kernels.mkdir(parents=True)
    (kernels / "k.py").write_text("x = 1\n" * KERNEL_LIMIT)
    (kernels / "big.py").write_text("x = 1\n" * (KERNEL_LIMIT + 1))
    mods = ["a.py", "b.py", KERNELS + "k.py", KERNELS + "big.py"]
    assert size_problems(tmp_path, mods, {}) == [
        f"a.py: {MODULE_LIMIT + 1} lines; wanted at most {MODULE_LIMIT} (split it along its seams)",
        f"{KERNELS}big.py: {KERNEL_LIMIT + 1} lines; wanted at most {KERNEL_LIMIT} "
        "(split it along its seams)",
    ]
    assert size_problems(tmp_path, mods, {"a.py": "x", KERNELS + "big.py": "y"}) == []
    stale = size_problems(tmp_path, mods, {"a.py": "x", KERNELS + "big.py": "y", "b.py": "z", "gone.py": "w"})
    assert stale == [
        f"b.py: {MODULE_LIMIT} lines, within {MODULE_LIMIT}: remove its ALLOWED_OVER entry (z)",
        "gone.py: no such module: remove its ALLOWED_OVER entry (w)",
    ]


def test_the_scan_lists_git_known_modules_only(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored/\n")
    (tmp_path / "ignored").mkdir()
    (tmp_path / "ignored" / "x.py").write_text("x = 1\n")
    (tmp_path / "new.py").write_text("x = 1\n")
    (tmp_path / "notes.txt").write_text("x\n")
    assert python_modules(tmp_path) == ["new.py"]

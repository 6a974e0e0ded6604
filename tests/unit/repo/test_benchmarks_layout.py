"""The benchmark room holds programs and results, not a second copy of the kernels, and the
overlay's constants cite results, not commits (issue 34's bars)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

#: A Triton or Gluon kernel definition: the decorator, or Gluon's import.
KERNEL_DEFINITION = re.compile(r"@\s*(triton|gluon)\.jit|\bfrom\s+triton\.experimental\s+import\s+gluon")
#: A commit hash: 7 to 40 hex digits holding at least one digit and one letter a-f, as a word.
COMMIT_HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def kernel_definitions(root: Path) -> list[str]:
    """``path:line`` of every kernel definition in any text file under ``root``."""
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if KERNEL_DEFINITION.search(line):
                found.append(f"{path.relative_to(root)}:{n}")
    return found


def hash_citations(root: Path) -> list[str]:
    """``path:line`` of every ``#:`` comment in a Python file under ``root`` that names a commit."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if line.lstrip().startswith("#:") and COMMIT_HASH.search(line):
                found.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    return found


def test_benchmarks_define_no_triton_or_gluon_kernel() -> None:
    assert kernel_definitions(ROOT / "benchmarks") == []


def test_no_doc_comment_in_the_overlay_cites_a_commit_hash() -> None:
    assert hash_citations(ROOT / "overlay") == []


def test_the_scans_find_what_they_look_for(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "copy.py").write_text("import triton\n\n@triton.jit\ndef k(x_ptr):\n    pass\n")
    (tmp_path / "results" / "g.py").write_text("from triton.experimental import gluon\n")
    (tmp_path / "configs.py").write_text(
        "#: tiles of 4 stages (H200, 14999a3: 5.1 us)\n#: 4096 tokens, 0x7FC00000, decade\nX = 1  # 84188d2\n"
    )
    assert kernel_definitions(tmp_path) == ["results/copy.py:3", "results/g.py:1"]
    assert hash_citations(tmp_path) == ["configs.py:1: #: tiles of 4 stages (H200, 14999a3: 5.1 us)"]

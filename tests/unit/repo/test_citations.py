"""Every fact the repository cites lives in the repository: each field-bug id (``B05``) has a
heading in ``docs/reference/field-bugs.md``, each ``docs/reference/<page>.md#<anchor>`` link
names a page and a heading that exist, and nothing cites the old audit sections or a path
outside the repository (the session-shared reference folder).

Scanned: the files git tracks that read as UTF-8 text, except ``docs/reference/`` itself (its
pages define the headings; their own links are checked separately), ``benchmarks/results/``
(recorded output), and this file (which spells the forbidden forms to look for them).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
REFERENCE = REPO / "docs" / "reference"
SKIP_PREFIXES = ("docs/reference/", "benchmarks/results/", ".venv", "venv/")
SELF = "tests/unit/repo/test_citations.py"

BUG_ID = re.compile(r"\bB\d\d\b")
LINK = re.compile(r"(?:docs/|(?<![\w/.-]))reference/([\w.-]+\.md)(?:#([\w-]+))?")
"""``docs/reference/<page>.md#<anchor>``, or ``reference/...`` relative to ``docs/``."""
LOCAL_LINK = re.compile(r"\]\(([\w.-]+\.md)(?:#([\w-]+))?\)")
AUDIT = re.compile(r"\baudit\s*\(?\s*(?:§|section\b)", re.IGNORECASE)
OUTSIDE = re.compile(r"shared/reference\b")


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation other than ``-`` and
    ``_`` dropped, spaces turned into hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def headings(page: Path) -> list[str]:
    """The heading texts of a Markdown page (outside fenced code blocks)."""
    out, fenced = [], False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6}\s+(.+?)\s*#*$", line)):
            out.append(m.group(1))
    return out


def reference_index(root: Path) -> tuple[dict[str, set[str]], set[str]]:
    """``{page name: its anchors}`` of ``root``'s pages, and the bug ids with a heading
    (a heading that starts with the id: ``## B05: ...``) in ``field-bugs.md``."""
    pages = {p.name: {slug(h) for h in headings(p)} for p in sorted(root.glob("*.md"))}
    bugs_page = root / "field-bugs.md"
    ids = {m.group(0) for h in (headings(bugs_page) if bugs_page.exists() else []) if (m := BUG_ID.match(h))}
    return pages, ids


def problems_in(
    rel: str, text: str, pages: dict[str, set[str]], ids: set[str], local: bool = False
) -> list[str]:
    """``file:line: what`` for every citation in ``text`` that does not resolve."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        where = f"{rel}:{n}"
        if not local:
            for bug in BUG_ID.findall(line):
                if bug not in ids:
                    out.append(f"{where}: field bug {bug} has no heading in docs/reference/field-bugs.md")
            if AUDIT.search(line):
                out.append(
                    f"{where}: cites an audit section; wanted a docs/reference heading "
                    "(e.g. docs/reference/vllm-code-paths.md#plugin-load-order)"
                )
            if OUTSIDE.search(line):
                out.append(
                    f"{where}: cites a path outside the repository (shared/reference); wanted docs/reference/"
                )
        for page, anchor in (LOCAL_LINK if local else LINK).findall(line):
            if page not in pages:
                if local and not (REFERENCE / page).exists() and "/" not in page:
                    continue  # a link to a page elsewhere is not this check's business
                out.append(f"{where}: docs/reference/{page} does not exist")
            elif anchor and anchor not in pages[page]:
                out.append(f"{where}: docs/reference/{page} has no heading #{anchor}")
    return out


def tracked_text_files(repo: Path) -> list[tuple[str, str]]:
    """``(path relative to the repo, text)`` of the tracked UTF-8 files to scan."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=repo, capture_output=True, check=True).stdout.split(
        b"\0"
    )
    out = []
    for raw in names:
        rel = raw.decode()
        if not rel or rel == SELF or rel.startswith(SKIP_PREFIXES):
            continue
        path = repo / rel
        if not path.is_file():
            continue  # deleted in the working tree
        try:
            out.append((rel, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # binary
    return out


def test_every_citation_in_the_repository_resolves_to_docs_reference() -> None:
    pages, ids = reference_index(REFERENCE)
    assert {"field-bugs.md", "vllm-code-paths.md"} <= set(pages)
    files = tracked_text_files(REPO)
    assert len(files) > 100, len(files)
    found = [p for rel, text in files for p in problems_in(rel, text, pages, ids)]
    assert not found, "\n".join(found)


def test_the_reference_pages_own_links_resolve() -> None:
    pages, ids = reference_index(REFERENCE)
    found = [
        p
        for page in sorted(REFERENCE.glob("*.md"))
        for p in problems_in(
            f"docs/reference/{page.name}", page.read_text(encoding="utf-8"), pages, ids, True
        )
    ]
    assert not found, "\n".join(found)


def test_cited_bug_ids_all_have_an_entry_with_symptom_cause_and_check() -> None:
    text = (REFERENCE / "field-bugs.md").read_text(encoding="utf-8")
    for entry in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        head = entry.splitlines()[0]
        assert BUG_ID.match(head), head
        for part in ("**Symptom:**", "**Cause:**", "**Caught by:**"):
            assert part in entry, f"{head}: no {part}"


@pytest.fixture()
def bad_repo(tmp_path: Path) -> Path:
    """A tiny repository whose one file cites what does not resolve, beside a reference page."""
    ref = tmp_path / "docs" / "reference"
    ref.mkdir(parents=True)
    (ref / "field-bugs.md").write_text("# Field bugs\n\n## B05: a bug with a heading\n")
    (ref / "vllm-code-paths.md").write_text("# Paths\n\n## Plugin load order\n")
    code = tmp_path / "pkg" / "mod.py"
    code.parent.mkdir()
    code.write_text(
        "MTU = 9000  # B05, fine\n"
        "X = 1  # B99 has no entry\n"
        "# the " + "audit §4 says so\n"
        "# see " + "shared/" + "reference/field-bugs.md\n"
        "# docs/reference/vllm-code-paths.md#plugin-load-order resolves\n"
        "# docs/reference/vllm-code-paths.md#no-such-heading does not\n"
        "# docs/reference/missing.md is no page\n"
    )
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "-A"], cwd=tmp_path, check=True)
    return tmp_path


def test_the_scan_fails_on_each_kind_of_unresolved_citation_naming_file_and_line(bad_repo: Path) -> None:
    pages, ids = reference_index(bad_repo / "docs" / "reference")
    assert ids == {"B05"}
    found = [p for rel, text in tracked_text_files(bad_repo) for p in problems_in(rel, text, pages, ids)]
    assert found == [
        "pkg/mod.py:2: field bug B99 has no heading in docs/reference/field-bugs.md",
        "pkg/mod.py:3: cites an audit section; wanted a docs/reference heading "
        "(e.g. docs/reference/vllm-code-paths.md#plugin-load-order)",
        "pkg/mod.py:4: cites a path outside the repository (shared/reference); wanted docs/reference/",
        "pkg/mod.py:6: docs/reference/vllm-code-paths.md has no heading #no-such-heading",
        "pkg/mod.py:7: docs/reference/missing.md does not exist",
    ]


def test_slugs_follow_githubs_anchor_rule() -> None:
    assert slug("B05: NCCL traffic not on both RDMA halves, or at the wrong MTU") == (
        "b05-nccl-traffic-not-on-both-rdma-halves-or-at-the-wrong-mtu"
    )
    assert slug("o_proj fp8_einsum callers") == "o_proj-fp8_einsum-callers"
    assert slug("GB10 on DeepGEMM's path") == "gb10-on-deepgemms-path"

"""No import cycle inside or between the packages (``overlay/sparkpair_overlay``,
``healthchecks/sparkpair_serving``, ``healthchecks/sparkpair_health``, ``scripts/sparkpair_cli``).

Every import between modules of one package counts, at module level, inside functions and under
``if TYPE_CHECKING:`` alike (a function-level import that reaches back is the same knot, only tied
later; a type-only one is the same knot for a reader and for mypy). Imports are read from the
source with :mod:`ast`, so the test imports none of the packages and runs in well under a second.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PACKAGES = (
    REPO / "overlay" / "sparkpair_overlay",
    REPO / "healthchecks" / "sparkpair_serving",
    REPO / "healthchecks" / "sparkpair_health",
    REPO / "scripts" / "sparkpair_cli",
)


def _module_name(pkg: Path, file: Path) -> str:
    parts = [pkg.name, *file.relative_to(pkg).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST, me: str, is_pkg: bool) -> set[str]:
    """Absolute names this module imports (``from .x import y`` gives ``x`` and ``x.y``)."""
    out: set[str] = set()
    base = me.split(".") if is_pkg else me.split(".")[:-1]

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                mod = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                mod = node.module or ""
            out.add(mod)
            out.update(f"{mod}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def import_graph(packages: tuple[Path, ...]) -> dict[str, set[str]]:
    """``module -> modules of the same packages it imports``, read from the sources."""
    files: dict[str, tuple[Path, bool]] = {}
    for pkg in packages:
        for f in sorted(pkg.rglob("*.py")):
            files[_module_name(pkg, f)] = (f, f.name == "__init__.py")
    graph: dict[str, set[str]] = {}
    for mod, (f, is_pkg) in files.items():
        names = _imports(ast.parse(f.read_text(encoding="utf-8"), str(f)), mod, is_pkg)
        # importing a.b.c runs a and a.b first; a package's own __init__ is not an edge to itself
        targets = {n for n in names if n in files}
        graph[mod] = {t for t in targets if t != mod and not mod.startswith(t + ".")}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None (depth-first search, three colours)."""
    colour: dict[str, int] = {}
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        colour[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if colour.get(m) == 1:
                return [*stack[stack.index(m) :], m]
            if not colour.get(m):
                found = dfs(m)
                if found:
                    return found
        stack.pop()
        colour[n] = 2
        return None

    for n in sorted(graph):
        if not colour.get(n):
            found = dfs(n)
            if found:
                return found
    return None


PENDING = {"sparkpair_health.checks_model": "sparkpair_health.checks"}
"""A known knot, cut by dissolving ``checks_model.py`` into ``checks.py`` (the one check
framework): while that module exists its edge back to ``checks`` is left out. Once the module is
gone this entry matches nothing."""


def test_the_packages_have_no_import_cycle() -> None:
    graph = import_graph(PACKAGES)
    for mod, back in PENDING.items():
        graph.get(mod, set()).discard(back)
    assert "sparkpair_cli.preflight.checks" in graph, sorted(graph)[:5]
    assert "sparkpair_cli.preflight.checkpoint" in graph["sparkpair_cli.preflight.checks"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_the_serving_contract_imports_neither_the_health_package_nor_the_cli() -> None:
    """``sparkpair_serving`` is what both sides share: it stands below them, never reaches up."""
    graph = import_graph(PACKAGES)
    assert "sparkpair_serving.profile" in graph, sorted(graph)[:5]
    up = {
        f"{mod} -> {t}"
        for mod, targets in graph.items()
        if mod.startswith("sparkpair_serving")
        for t in targets
        if not t.startswith("sparkpair_serving")
    }
    assert up == set()


def test_the_detector_finds_a_cycle_through_a_function_level_import(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "checks.py").write_text("from .checkpoint import inspect\n")
    (pkg / "checkpoint.py").write_text("def inspect():\n    from .checks import is_dsv4\n")
    graph = import_graph((pkg,))
    assert find_cycle(graph) == ["pkg.checkpoint", "pkg.checks", "pkg.checkpoint"]


def test_the_detector_finds_a_cycle_through_a_type_only_import(tmp_path: Path) -> None:
    """A module typed against another that imports it back (issue 34's gateway knot) is a cycle."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "gateway.py").write_text("from .app import make_app\n")
    (pkg / "app.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .gateway import Gateway\n"
    )
    graph = import_graph((pkg,))
    assert graph["pkg.app"] == {"pkg.gateway"}
    assert find_cycle(graph) == ["pkg.app", "pkg.gateway", "pkg.app"]

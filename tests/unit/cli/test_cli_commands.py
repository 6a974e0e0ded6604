"""``sparkpair_cli.main`` registers every command module, imported by name (no string lookups a
reader or a tool cannot follow)."""

from __future__ import annotations

import ast
from pathlib import Path

from sparkpair_cli import main

CLI = Path(main.__file__).resolve().parent


def unregistered(files: list[str], registered: tuple[str, ...]) -> list[str]:
    """Command modules (``cmd_*.py`` files) that ``registered`` lacks."""
    return sorted(
        f"sparkpair_cli.{Path(f).stem}" for f in files if f"sparkpair_cli.{Path(f).stem}" not in registered
    )


def test_every_cmd_module_is_registered() -> None:
    files = sorted(p.name for p in CLI.glob("cmd_*.py"))
    assert len(files) >= 10
    assert unregistered(files, main.COMMAND_MODULES) == []


def test_a_cmd_module_left_out_is_named() -> None:
    assert unregistered(["cmd_health.py", "cmd_new.py"], ("sparkpair_cli.cmd_health",)) == [
        "sparkpair_cli.cmd_new"
    ]


def test_main_imports_its_commands_by_name() -> None:
    tree = ast.parse((CLI / "main.py").read_text(encoding="utf-8"))
    imported = {
        a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level == 1 for a in n.names
    }
    assert {m.rsplit(".", 1)[1] for m in main.COMMAND_MODULES} <= imported
    assert not any(isinstance(n, ast.Name) and n.id == "importlib" for n in ast.walk(tree))


def test_the_command_list_shows_each_summary_unbroken() -> None:
    """`sparkpair --help` lists every command's summary as flowing text: the line breaks of a
    docstring wrapped in the source (preflight's "driver, ptxas," / "FlashInfer") are gone."""
    from typer.testing import CliRunner

    out = CliRunner().invoke(main.app, ["--help"], terminal_width=200).output
    assert "driver, ptxas, FlashInfer, checkpoint" in out

    def infos(group):
        yield from group.registered_commands
        for sub in group.registered_groups:
            yield from infos(sub.typer_instance)

    summaries = [i.short_help for i in infos(main.app)]
    assert len(summaries) >= 20 and all(s and "\n" not in s for s in summaries), summaries


def test_one_line_short_helps_keeps_a_given_short_help() -> None:
    import typer

    group = typer.Typer()

    @group.command(short_help="given")
    def a() -> None:
        """first\n    line.\n\n    more"""

    @group.command()
    def b() -> None:
        """wrapped
        summary.

        details"""

    main.one_line_short_helps(group)
    assert [i.short_help for i in group.registered_commands] == ["given", "wrapped summary."]

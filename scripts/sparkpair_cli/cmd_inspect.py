# ruff: noqa: B008  (typer declares options as argument defaults)
"""``sparkpair inspect``: checkpoint completeness and gate dtype, without torch."""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add ``inspect`` to ``app``."""

    @app.command("inspect")
    def inspect(
        model: str = typer.Argument(..., help="checkpoint folder, or a hub id in HF_HOME's cache"),
        hf_home: Path = typer.Option(Path.home() / ".cache" / "huggingface", envvar="HF_HOME"),
        gate_dtype: str = typer.Option(
            "", help="dtype the gate weights must have (e.g. BF16); empty: report only"
        ),
        revision: str = typer.Option(
            "", help="with a hub id: this revision's snapshot (the profile's --revision); empty: refs/main"
        ),
        need_draft: bool = typer.Option(
            False, "--need-draft", help="require draft (mtp.*) weights: a DSpark profile's checkpoint (0731)"
        ),
    ) -> None:
        """Check every shard named by model.safetensors.index.json is present and complete, and
        report (or require) the dtype of the MoE gate weights. Exit 1 on a problem."""
        from .preflight.checkpoint import InspectError, inspect_checkpoint, resolve_model_dir

        d = resolve_model_dir(model, hf_home, revision or None)
        if d is None and any(c.is_dir() for c in (Path(model), hf_home / model.lstrip("/"))):
            folder = next(c for c in (Path(model), hf_home / model.lstrip("/")) if c.is_dir())
            print(f"inspect: no model.safetensors.index.json (or *.safetensors) in {folder}")
            raise typer.Exit(1)
        if d is None:
            at = f" at revision {revision}" if revision else ""
            print(
                f"inspect: {model!r}{at} is not a folder and not in {hf_home}/hub; "
                "wanted a downloaded checkpoint"
            )
            raise typer.Exit(1)
        try:
            rep = inspect_checkpoint(d, gate_dtype=gate_dtype or None, need_draft=need_draft)
        except InspectError as e:
            print(f"inspect: {e}")
            raise typer.Exit(1) from None
        print(f"inspect: {d}: {rep.summary}")
        for p in rep.problems:
            print(f"inspect: problem: {p}")
        raise typer.Exit(1 if rep.problems else 0)

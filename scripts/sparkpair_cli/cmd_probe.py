"""``sparkpair probe``: on-device kernel self-test that writes the kernel plan's probe JSON.

The work is :func:`sparkpair_overlay.probe.run_probe` (what is probed, the tolerances and the
JSON layout: docs/kernels.md "Probe"); this command shows its progress and its table.

Exit codes: 0 written, every serve path has a candidate; 2 no CUDA device or a bad setting
(nothing written); 3 written, but a serve path has no correct candidate: the verdict is printed
and the node must not start (``sparkpair node run`` stops on it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

console = Console()

EXIT_NO_DEVICE = 2
EXIT_SERVE_PATH = 3


def _print(data: dict[str, Any]) -> None:
    cap = data.get("capability") or ["?", "?"]
    table = Table(title=f"sparkpair probe: {data['device']} (cap {cap[0]}.{cap[1]})")
    for col in ("kernel", "path", "case", "ok", "µs", "error"):
        table.add_column(col)

    def yes(ok: bool) -> str:
        return "yes" if ok else "[red]no[/red]"

    def us(r: dict[str, Any]) -> str:
        return f"{r['us']:.2f}" if r.get("us") else "-"

    for r in data["router"]:
        table.add_row(
            "router",
            r["path"],
            f"{r['weight_dtype']} M={r['m']}",
            yes(r["ok"]),
            us(r),
            f"{r['max_rel_err']:.2e}" if "max_rel_err" in r else r.get("error", "")[:60],
        )
    for r in data["o_proj"]:
        table.add_row(
            "o_proj",
            r["backend"],
            f"recipe {tuple(r['recipe'])} T={r['t']} on {r.get('weight_layout')}",
            yes(r["ok"]),
            us(r),
            f"{r['err']:.2e}" if r.get("err") is not None and r["ok"] else (r.get("error") or "")[:60],
        )
    for c in data.get("checkpoint") or []:
        table.add_row(
            "o_proj",
            "triton (checkpoint)",
            f"{c['tensor']} rank {c['tp_rank']}/{c['tp_size']} on {c['weight_layout']}",
            yes(c["ok"]),
            "-",
            f"{c['err']:.2e}" if c.get("err") is not None and c["ok"] else (c.get("error") or "")[:60],
        )
    for r in data.get("serve_paths", []):
        table.add_row(
            r["path"],
            r["candidate"],
            f"{r['shape']} T={r['tokens']}",
            yes(r["ok"]),
            us(r),
            f"{r['err']:.2e}" if r["ok"] else (r.get("error") or "")[:60],
        )
    console.print(table)
    dg = data.get("deepgemm") or {}
    console.print(f"DeepGEMM: {dg.get('reason', 'not located')}", highlight=False)
    for c in (data.get("serve_choice") or {}).get("choices", []):
        if not c.get("needed", True):
            console.print(f"serve path {c['path']}: not needed ({c['reason']})", highlight=False)
            continue
        console.print(
            f"serve path {c['path']}: {c['candidate'] or '[red]none[/red]'} ({c['reason']})", highlight=False
        )
    dec = data.get("o_proj_decision")
    if dec:
        console.print(
            f"o_proj: {dec['backend']}{tuple(dec['recipe'])} on {dec['weight_layout']} ({dec['reason']})",
            highlight=False,
        )
    _print_kernel_paths(data)


def _print_kernel_paths(data: dict[str, Any]) -> None:
    """The o_proj kernel's configs: how many rows, which failed, and the config per token range."""
    rows = data.get("kernel_paths") or []
    tokens = data.get("token_counts") or {}
    if tokens:
        console.print(f"token counts: {tokens.get('source')}; o_proj at {tokens.get('o_proj')}, kernel paths "
                      f"at {tokens.get('kernel_paths')}", highlight=False)
    if not rows:
        return
    bad: dict[str, list[int]] = {}
    for r in rows:
        if not r["ok"]:
            bad.setdefault(r["config"], []).append(r["tokens"])
    versions = sorted({str(r.get("triton")) for r in rows})
    console.print(f"o_proj kernel paths: {len(rows)} rows, {len(rows) - sum(map(len, bad.values()))} correct "
                  f"(Triton {', '.join(versions)})", highlight=False)
    for name, ts in bad.items():
        why = next(r.get("error") or "" for r in rows if r["config"] == name and not r["ok"])
        console.print(f"[red]  {name} not correct at T={ts}: {why[:100]}[/red]", highlight=False)
    acc = data.get("mx_accumulation") or {}
    if acc:
        console.print(f"block-scaled MMA over K={acc.get('k')}: max error promoted per K tile "
                      f"{acc.get('mx-tile')}, accumulated in the MMA {acc.get('mx-tile-acc')}",
                      highlight=False)
    dec = data.get("kernel_path_decision")
    if dec:
        table = Table(title=f"o_proj configs on {dec['layout']} ({dec['source']})")
        for col in ("T", "config", "why"):
            table.add_column(col, overflow="fold")
        lo = 1
        for r in dec["ranges"]:
            hi = r["t_max"]
            span = f">= {lo}" if hi >= 1 << 62 else (f"{lo}-{hi}" if hi != lo else str(lo))
            table.add_row(span, r["config"], r["reason"])
            lo = hi + 1
        console.print(table)


probe_app_help = "On-device kernel self-test: correctness vs fp32/fp64 and timing; writes the probe JSON."
_OutOpt = Annotated[
    Path, typer.Option("--out", help="probe JSON to write (SPARKPAIR_PROBE_RESULTS reads it)")
]
_TpOpt = Annotated[
    int, typer.Option("--tp", help="tensor-parallel size of the served profile (per-rank shapes)")
]
_RankOpt = Annotated[
    int, typer.Option("--tp-rank", help="this node's tensor-parallel rank (its checkpoint shard)")
]
_CkptOpt = Annotated[
    Path | None,
    typer.Option("--checkpoint", help="the served model's folder: also check the o_proj on one real wo_a"),
]
#: The profile whose token counts the probe takes when none is named: the DeepSeek-V4 profile (the
#: probe's shapes are DeepSeek-V4-Flash's).
DEFAULT_PROFILE = "deepseek-v4-flash"
_ProfileOpt = Annotated[
    str,
    typer.Option("--profile", help="the served profile (name or file): the o_proj is rated at its CUDA-graph "
                 "capture sizes and prefill chunk"),
]


def profile_tokens(profile: str) -> Any:
    """The :class:`sparkpair_overlay.probe.ServedTokens` of a profile (name or file).

    Raises:
        ValueError: the profile does not load, or its arguments give no capture sizes (the message says
            which).
    """
    from sparkpair_overlay.probe import served_tokens
    from sparkpair_serving.profile import ProfileError, load_profile

    try:
        prof = load_profile(profile)
    except ProfileError as exc:
        raise ValueError(f"--profile {profile}: {exc}") from None
    return served_tokens(prof.server.args, f"profile {prof.name}")


def probe_cmd(
    out: _OutOpt = Path("/tmp/sparkpair/probe.json"), tp: _TpOpt = 2, tp_rank: _RankOpt = 0,
    checkpoint: _CkptOpt = None, profile: _ProfileOpt = DEFAULT_PROFILE,
) -> None:
    """Probe every candidate kernel path on this GPU and write the probe JSON."""
    from sparkpair_overlay.deepgemm import DeepGemmSettingError
    from sparkpair_overlay.probe import ProbeProgress, ProbeUnavailable, run_probe
    from sparkpair_overlay.probe.choice import ServePathError

    with console.status("probing ...") as status:

        def progress(p: ProbeProgress) -> None:
            status.update(f"probing {p.label} ({p.done}/{p.total}) ...")

        try:
            tokens = profile_tokens(profile)
            if checkpoint is not None:
                data = run_probe(out, tp, progress, checkpoint_dir=checkpoint, tp_rank=tp_rank, tokens=tokens)
            else:
                data = run_probe(out, tp, progress, tokens=tokens)
        except (ProbeUnavailable, ServePathError, DeepGemmSettingError, ValueError) as exc:
            console.print(f"[red]{exc}[/red]", highlight=False)
            raise typer.Exit(EXIT_NO_DEVICE) from None
    _print(data)
    console.print(f"wrote {out} in {data['seconds']} s (set SPARKPAIR_PROBE_RESULTS={out})")
    verdict = (data.get("serve_choice") or {}).get("verdict")
    if verdict:
        console.print(f"[red]{verdict}[/red]", highlight=False)
        raise typer.Exit(EXIT_SERVE_PATH)


def register(app: typer.Typer) -> None:
    """Add the ``probe`` command to the sparkpair CLI."""
    app.command("probe", help=probe_app_help)(probe_cmd)

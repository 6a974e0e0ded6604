"""Our o_proj on one real layer's ``wo_a`` from the served checkpoint, against fp64.

Where the node has the model's files, the probe reads the first ``wo_a`` weight and its scale from
the checkpoint's safetensors (``model.safetensors.index.json`` maps each tensor to its file), takes
this rank's tensor-parallel shard (``wo_a`` is column-parallel: rank ``k`` of ``tp`` holds rows
``k*N/tp .. (k+1)*N/tp``; its 128x128 block scales shard the same way), post-processes it into
each served layout the way vLLM does (:mod:`sparkpair_overlay.probe.operands`), runs the overlay's
kernel through the dispatcher's own operand hand-over
(:func:`sparkpair_overlay.o_proj_route.triton_operands`) on a random activation quantised as the
attention quantises it, and compares with fp64 from the checkpoint's bytes and exponents.

Tensor names: DeepSeek-V4 checkpoints name them ``<prefix>.wo_a.weight`` and ``<prefix>.wo_a.scale``
(vLLM maps ``*.scale`` to ``weight_scale_inv``; docs/reference/vllm-code-paths.md#o_proj-scales);
``weight_scale_inv`` is accepted too. The scale is ``float8_e8m0fnu`` (DeepSeek-V4-Flash) or fp32
(the -Base checkpoint, whose fp32 scales are checked only on the fp32 layouts). Groups: ``o_groups``
from ``config.json`` (8 for DeepSeek-V4-Flash).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..probe_results import CheckpointCheck
from ..serve_matrix import RECIPE_SM100, Recipe

#: Token count of the checkpoint check's activation (a DSpark verify step of the profile).
CHECK_TOKENS = 36
#: Relative Frobenius tolerance (the o_proj probe's, docs/kernels.md "Probe").
TOL = 1e-2


class CheckpointError(ValueError):
    """The checkpoint folder has no readable ``wo_a`` (the message names the file and what is missing)."""


def find_wo_a(model_dir: Path) -> tuple[Path, str, str, int]:
    """``(file, weight name, scale name, o_groups)`` of the first ``wo_a`` in ``model_dir``.

    Raises:
        CheckpointError: no index / no ``wo_a`` / weight and scale in different files / bad config.
    """
    index = model_dir / "model.safetensors.index.json"
    try:
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(
            f"{index}: not a safetensors index ({type(exc).__name__}: {exc}); wanted the "
            "model folder of the served checkpoint"
        ) from None
    names = sorted(k for k in weight_map if k.endswith("wo_a.weight"))
    if not names:
        raise CheckpointError(f"{index}: no tensor named *wo_a.weight; wanted a DeepSeek-V4 checkpoint")
    weight = names[0]
    prefix = weight[: -len("weight")]
    scale = next((prefix + s for s in ("scale", "weight_scale_inv") if prefix + s in weight_map), None)
    if scale is None:
        raise CheckpointError(f"{index}: {weight} has no {prefix}scale / {prefix}weight_scale_inv")
    if weight_map[weight] != weight_map[scale]:
        raise CheckpointError(f"{index}: {weight} and {scale} are in different files; wanted one file")
    try:
        groups = int(json.loads((model_dir / "config.json").read_text()).get("o_groups", 8))
    except (OSError, ValueError, TypeError) as exc:
        raise CheckpointError(
            f"{model_dir / 'config.json'}: unreadable ({exc}); wanted the model config"
        ) from None
    return model_dir / weight_map[weight], weight, scale, groups


def load_shard(file: Path, weight: str, scale: str, tp: int, rank: int) -> tuple[Any, Any, str]:
    """``(w2d e4m3 [N/tp, K], scale [N/tp/128, K/128], scale dtype name)`` of this rank's shard (CPU)."""
    from safetensors import safe_open

    with safe_open(str(file), framework="pt", device="cpu") as f:
        ws, ss = f.get_slice(weight), f.get_slice(scale)
        n = ws.get_shape()[0]
        if n % (tp * 128):
            raise CheckpointError(f"{file}: {weight} has {n} rows; wanted a multiple of tp*128 = {tp * 128}")
        rows = n // tp
        w = ws[rank * rows : (rank + 1) * rows]
        s = ss[rank * rows // 128 : (rank + 1) * rows // 128]
    return w, s, str(s.dtype).removeprefix("torch.")


def check_checkpoint(
    model_dir: Path | str,
    tp: int,
    rank: int,
    layouts: Sequence[str],
    *,
    recipe: Recipe = RECIPE_SM100,
    device: str = "cuda",
    use_vllm: bool | None = None,
    transform: Callable[..., Any] | None = None,
) -> list[CheckpointCheck]:
    """One :class:`~sparkpair_overlay.probe_results.CheckpointCheck` per layout.

    A failure after the tensors are found is a row, never raised.

    Raises:
        CheckpointError: the folder has no readable ``wo_a`` (:func:`find_wo_a`).
    """
    import torch

    from sparkpair_overlay.kernels import fp8_einsum as fe

    from ..numerics import rel_fro
    from ..o_proj_route import triton_operands, weight_layout
    from . import operands as ops

    model_dir = Path(model_dir)
    file, weight, scale, groups = find_wo_a(model_dir)
    w2d, s, sdt = load_shard(file, weight, scale, tp, rank)
    g = groups // tp
    d, r = w2d.shape[0] // g, w2d.shape[1]
    rows: list[CheckpointCheck] = []
    for layout in layouts:

        def row(
            ok: bool, err: float | None = None, error: str | None = None, lay: str = layout
        ) -> CheckpointCheck:
            return CheckpointCheck(str(file), weight, rank, tp, lay, CHECK_TOKENS, ok, err, error)

        if sdt not in ("float8_e8m0fnu", "uint8"):
            rows.append(row(False, error=f"scale dtype {sdt}: only e8m0 checkpoints are checked here"))
            continue
        exps = s.view(torch.uint8)
        try:
            w, sw, _ = ops.post_process_wo_a(
                layout, w2d, exps, g, device=device, use_vllm=use_vllm, transform=transform
            )
            if weight_layout(w, sw, g, d) != layout:
                raise ValueError(f"the post-processing made {weight_layout(w, sw, g, d)}, not {layout}")
            a, sa, _ = ops.activation(recipe, CHECK_TOKENS, g, r, device=device, seed=7, use_vllm=use_vllm)
            out = torch.full((CHECK_TOKENS, g, d), float("nan"), dtype=torch.bfloat16, device=device)
            a2, b2, krecipe = triton_operands((a, sa), (w, sw), out)
            fe.fp8_einsum("bhr,hdr->bhd", a2, b2, out, recipe=krecipe)
            err = rel_fro(out, ops.reference(a, sa, w2d.to(device), exps, g))
        except Exception as exc:  # noqa: BLE001 - a failure is the check's result
            rows.append(row(False, error=f"{type(exc).__name__}: {exc}"[:300]))
            continue
        ok = err <= TOL
        rows.append(row(ok, err, None if ok else f"wrong numbers: error {err:.3g} > tolerance {TOL:g}"))
    return rows


__all__ = ["CHECK_TOKENS", "CheckpointError", "check_checkpoint", "find_wo_a", "load_shard"]

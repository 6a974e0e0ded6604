"""vLLM's own DeepSeek-V4 o_proj activation path feeding our fp8_einsum dispatcher.

What runs, per recipe x T (TP=2: G=4 groups x 8 heads x head_dim 512 -> R=4096, D=o_lora_rank=1024):

1. **vLLM's** ``fused_inv_rope_fp8_quant`` (vllm 0.32.0,
   ``vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py``, the file itself, unmodified)
   turns a bf16 attention output ``o [T, 32, 512]`` into ``a`` e4m3 ``[T, 4, 4096]`` (group-major
   strides) and its scales: fp32 ``[T, 4, 32]`` (``tma_aligned_scales=False``, recipe (1,128,128))
   or packed-UE8M0 int32 ``[T, 4, 8]`` (``True``, recipe (1,1,128)), both MN-major TMA-padded.
2. The weight: an e4m3 checkpoint ``wo_a`` ``[G*D, R]`` with UE8M0 128x128 block scales
   ``[G*D/128, R/128]``, post-processed the way docs/reference/vllm-code-paths.md#o_proj-scales describes
   vLLM's
   DeepGEMM post-processing (our own code, :func:`postprocess_wo_a`): ``[G, D, R]`` weight and fp32
   ``[G, D/128, R/128]`` scales (SM90 form) or per-row packed int32 ``[G, D, R/512]`` MN-major
   (arch 10/12 form).
3. Our ``Fp8EinsumDispatcher`` (plan from ``SPARKPAIR_FAKE_CAPABILITY=12.1``,
   ``SPARKPAIR_O_PROJ=triton``, ``SPARKPAIR_O_PROJ_RECIPE``) routes the call to our Triton kernel.
4. Checks: the route is ``triton``; the output vs an fp64 einsum of the dequantised ``a`` and ``w``
   (relative Frobenius <= 1e-2); vLLM's quantised activation round-trips (layout and strides as the
   reference page says, zeroed padding rows, power-of-two scales bracketing each block's amax/448, e4m3
   values equal to an fp64 re-quantisation, dequantised error <= 2**-4 relative Frobenius).

How vLLM's code gets here (harness, documented): the GPU machine has no vLLM, and importing the real
package pulls ~600 vLLM modules and dozens of third-party packages (pydantic, fastapi, zmq,
xgrammar, ...), and its platform detection would need vLLM's CUDA build. So this test loads **these
vLLM 0.32.0 source files verbatim** under their real module names:

* ``vllm/models/deepseek_v4/common/ops/fused_inv_rope_fp8_quant.py`` (the kernel, its launcher,
  its custom-op wrapper ``torch.ops.vllm.fused_inv_rope_fp8_quant_kernel``),
* ``vllm/model_executor/warmup/jit_warmup.py`` and ``jit_warmup_triton_helper.py`` (the launch path:
  ``kernel_launcher`` -> ``VllmTritonJitKernel.launch`` -> ``kernel[grid](**kwargs)``),
* ``vllm/envs.py`` and ``vllm/_version.py``,

and stands in for five small vLLM names with shims written in ``tests/gpu/vllm_harness.py`` (shared
with ``test_vllm_router_path.py``; its docstring documents every shim):
``vllm.platforms.current_platform`` (CUDA, dispatch key, ``is_arch_support_pdl`` = cap major >= 9 as
in platforms/cuda.py), ``vllm.triton_utils`` (``triton``, ``tl``, ``HAS_TRITON``),
``vllm.utils.torch_utils.direct_register_custom_op`` (define + impl + fake on a ``vllm`` fragment
library), ``vllm.utils.deep_gemm.get_tma_aligned_size`` (``align(x, 16 // element_size)``), and the
package ``__init__`` files (namespace stand-ins so their heavy imports never run).

Source of those files, first found: ``$SPARKPAIR_VLLM_SRC`` (a ``vllm/`` folder), ``.gpu-carry/vllm``
in the checkout (made by ``python tests/gpu/test_vllm_o_proj_path.py stage`` from an installed vLLM;
it stages the router test's files too; git-ignored through ``.git/info/exclude``, never committed),
or the installed ``vllm`` package's folder (found without importing it). Without CUDA, or without
the sources, the test skips and says why.

``SPARKPAIR_VLLM_O_PROJ_JSON=path`` writes every case's numbers as JSON at the end of the module.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import vllm_harness as vh
from sparkpair_overlay.numerics import fp8_einsum_reference, mn_major_tma, pack_ue8m0, rel_fro

REPO = vh.REPO
CARRY = vh.CARRY

#: vLLM files loaded verbatim (relative to the ``vllm/`` package folder), module name -> path.
VLLM_FILES = dict(vh.O_PROJ.files)
#: Packages stood in by namespace modules (their real ``__init__`` files import half of vLLM).
VLLM_PACKAGES = vh.O_PROJ.packages
SHIMMED = vh.O_PROJ.shims

# DeepSeek-V4-Flash at TP=2 (docs/reference/vllm-code-paths.md#dsv4-shapes)
G, HEADS_PER_GROUP, HEAD_DIM, ROPE_DIM = 4, 8, 512, 64
NOPE_DIM = HEAD_DIM - ROPE_DIM
R = HEADS_PER_GROUP * HEAD_DIM  # 4096
D = 1024  # o_lora_rank
TS = (1, 32, 2048)
TOL = 1e-2
FP8_MAX = 448.0
#: (case id, recipe, weight-scale form). "fp32" = SM90's [G, D/128, R/128]; "int32" = arch 10/12's
#: per-row packed UE8M0 [G, D, R/512]. The third case is what GB10 gets if the plan forces
#: (1,128,128): fp32 activation scales from the quant kernel, DeepGEMM's arch-12 int32 weight scales.
CASES = (
    ("r128-fp32w", (1, 128, 128), "fp32"),
    ("r1-int32w", (1, 1, 128), "int32"),
    ("r128-int32w", (1, 128, 128), "int32"),
)

RESULTS: list[dict[str, Any]] = []


# --------------------------------------------------------------------------- finding/staging vLLM
# (shared with test_vllm_router_path.py: tests/gpu/vllm_harness.py)


def vllm_source_root() -> tuple[Path | None, str]:
    """The ``vllm/`` folder holding :data:`VLLM_FILES`, and where it came from (or None, why)."""
    return vh.vllm_source_root(VLLM_FILES)


def stage(dest: Path = CARRY) -> Path:
    """Copy every harness file (this test's and the router test's) from the installed vLLM into
    ``dest`` (+ MANIFEST.json with sha256)."""
    return vh.stage(dest)


# --------------------------------------------------------------------------- the harness

_ShimPlatform = vh.ShimPlatform


def _install_shims(root: Path, device_type: str) -> dict[str, Any]:
    """Put the shim and namespace modules into ``sys.modules``; return what they replaced."""
    return vh.install_shims(root, vh.O_PROJ, device_type)


def _restore(state: dict[str, Any]) -> None:
    vh.restore(state)


def load_vllm_quant(root: Path, device_type: str = "cuda") -> tuple[Any, dict[str, Any]]:
    """Load vLLM's ``fused_inv_rope_fp8_quant`` module (real file) over the shims.

    Returns (module, state); pass state to :func:`_restore` when done (the shims stay in
    ``sys.modules`` until then: the kernel imports ``vllm.utils.deep_gemm`` at call time).
    """
    state = vh.load(root, vh.O_PROJ, device_type)
    return state["modules"]["vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant"], state


# --------------------------------------------------------------------------- operands and maths


def rope_cache(max_pos: int, rope_dim: int, base: float = 10000.0):  # noqa: ANN201
    """fp32 ``[max_pos, rope_dim]`` = cos || sin, the layout the kernel reads."""
    import torch

    inv = 1.0 / base ** (torch.arange(0, rope_dim, 2, dtype=torch.float64) / rope_dim)
    f = torch.arange(max_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cat([f.cos(), f.sin()], -1).float()


def inverse_rope_fp64(o, positions, cache, nope_dim: int):  # noqa: ANN001, ANN201
    """fp64 inverse RoPE of interleaved pairs (x0, x1) -> (x0 c + x1 s, x1 c - x0 s) on the rope dims."""
    x = o.double().clone()
    half = cache.shape[1] // 2
    c = cache[positions].double()[:, None, :half]
    s = cache[positions].double()[:, None, half:]
    x0, x1 = x[..., nope_dim::2].clone(), x[..., nope_dim + 1::2].clone()
    x[..., nope_dim::2] = x0 * c + x1 * s
    x[..., nope_dim + 1::2] = x1 * c - x0 * s
    return x


def decode_act_scales(sa, r: int):  # noqa: ANN001, ANN201
    """vLLM's activation scales -> fp32 ``[T, G, r/128]`` (fp32 as is; int32 packed UE8M0 decoded)."""
    import torch
    from sparkpair_overlay.kernels.fp8_einsum import decode_ue8m0, unpack_ue8m0_int32

    if sa.dtype == torch.float32:
        return sa.float()
    return decode_ue8m0(unpack_ue8m0_int32(sa, r // 128))


def make_checkpoint_wo_a(g: int, d: int, r: int, device: str, seed: int = 0):  # noqa: ANN201
    """Checkpoint-form ``wo_a``: e4m3 ``[g*d, r]``, UE8M0 exponent bytes ``[g*d/128, r/128]``
    (each 128x128 block's scale = 2**ceil(log2(amax/448)), as the DSv4 checkpoint's e8m0 scales),
    and the fp64 unquantised weight it came from."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    w_hp = torch.randn(g * d, r, generator=gen, dtype=torch.float64) * 0.02
    w_hp *= torch.exp2(torch.randint(-3, 4, (g * d // 128, r // 128), generator=gen).double()
                       ).repeat_interleave(128, 0).repeat_interleave(128, 1)
    amax = w_hp.abs().view(g * d // 128, 128, r // 128, 128).amax(dim=(1, 3))
    e = torch.ceil(torch.log2(amax / FP8_MAX)).to(torch.int64)
    s = torch.exp2(e.double()).repeat_interleave(128, 0).repeat_interleave(128, 1)
    w = (w_hp / s).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    return w.to(device), (e + 127).to(torch.uint8).to(device), w_hp.to(device)


def postprocess_wo_a(w2d, exp2d, g: int, form: str):  # noqa: ANN001, ANN201
    """Our version of vLLM's ``wo_a`` post-processing for ``is_bmm``
    (docs/reference/vllm-code-paths.md#o_proj-scales).

    1. weight ``view(g, d, r)``; 2. scales ``view(g, d/128, r/128)``; 3. UE8M0 -> fp32;
    4. ``form="fp32"``: keep fp32 ``[g, d/128, r/128]`` (SM90); ``form="int32"``: broadcast each
    block scale to its 128 rows and pack the UE8M0 bytes four per int32 (block k in byte k%4 of
    word k//4), ``[g, d, ceil(r/512)]`` MN-major with the row count TMA-aligned (arch 10/12).
    Returns ``(w [g, d, r], sw, sw_f32 [g, d/128, r/128])``.
    """
    import torch
    from sparkpair_overlay.kernels.fp8_einsum import decode_ue8m0

    gd, r = w2d.shape
    d = gd // g
    w = w2d.view(g, d, r)
    exps = exp2d.view(g, d // 128, r // 128)
    sw_f = decode_ue8m0(exps)  # the fp32 upcast
    if form == "fp32":
        return w, sw_f.contiguous(), sw_f
    assert form == "int32"
    # fp32 scale -> its exponent byte (the scale is a power of two), broadcast per row
    rows = ((sw_f.view(torch.int32) >> 23) & 0xFF).repeat_interleave(128, 1)[:, :d]  # [g, d, r/128]
    words = pack_ue8m0(rows)  # [g, d, ceil(r/512)]
    sw = mn_major_tma(words.transpose(0, 1)).transpose(0, 1)  # d MN-major, TMA-aligned
    return w, sw, sw_f


def check_activation_roundtrip(o, positions, cache, a, sa, tma: bool, t: int) -> dict[str, Any]:  # noqa: ANN001
    """Layout, padding and value checks on vLLM's quantised activation; returns numbers + failures."""
    import torch

    fails: list[str] = []
    t4 = -(-t // 4) * 4
    inner = R // 128 // (4 if tma else 1)
    if tuple(a.shape) != (t, G, R) or a.dtype != torch.float8_e4m3fn or a.stride() != (R, t * R, 1):
        fails.append(f"a {a.dtype} {tuple(a.shape)} strides {a.stride()}")
    want_dt = torch.int32 if tma else torch.float32
    if tuple(sa.shape) != (t, G, inner) or sa.dtype != want_dt or sa.stride() != (1, inner * t4, t4):
        fails.append(f"sa {sa.dtype} {tuple(sa.shape)} strides {sa.stride()} (T4={t4})")
    full = torch.as_strided(sa, (G, t4, inner), (inner * t4, 1, t4), sa.storage_offset())
    pad_nonzero = int((full[:, t:, :] != 0).sum())
    if pad_nonzero:
        fails.append(f"{pad_nonzero} non-zero scale padding entries")
    x_ref = inverse_rope_fp64(o, positions, cache, NOPE_DIM)  # [T, G*8, 512]
    x_ref = x_ref.view(t, G, R)  # heads of a group are contiguous in the group's 4096 columns
    s = decode_act_scales(sa, R).double()  # [T, G, 32]
    amax = x_ref.abs().view(t, G, R // 128, 128).amax(-1)
    pow2 = bool((torch.frexp(s)[0] == 0.5).all())
    lo_ok = bool((s * FP8_MAX >= amax * (1 - 1e-5)).all())
    hi_ok = bool((s * FP8_MAX <= 2 * amax * (1 + 1e-5)).all())
    if not (pow2 and lo_ok and hi_ok):
        fails.append(f"scales: power of two {pow2}, >= amax/448 {lo_ok}, <= 2 amax/448 {hi_ok}")
    sx = s.repeat_interleave(128, -1)
    requant = (x_ref / sx).clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
    mismatch = float((requant.view(torch.uint8) != a.view(torch.uint8)).double().mean())
    if mismatch > 1e-3:
        fails.append(f"e4m3 values differ from fp64 re-quantisation at {mismatch:.2e} of elements")
    deq = a.double() * sx
    rt = float((deq - x_ref).norm() / x_ref.norm())
    if rt > 2.0**-4:
        fails.append(f"dequantised activation rel fro err {rt:.3g} > 2**-4")
    return {"act_roundtrip_rel_fro": rt, "act_e4m3_mismatch_frac": mismatch, "scale_pad_rows": t4 - t,
            "act_scales_ok": pow2 and lo_ok and hi_ok, "layout_fails": fails, "x_ref": x_ref}


def reference_fp64(a, sa, w, sw_f):  # noqa: ANN001, ANN201
    """out[t,g,d] = sum_r (a * sa)[t,g,r] * (w * sw)[g,d,r] in fp64 from the tensors as handed over."""
    return fp8_einsum_reference(a, decode_act_scales(sa, a.shape[-1]), w, sw_f)


def make_dispatcher(recipe: tuple[int, int, int]):  # noqa: ANN201
    """Our dispatcher as the plugin would build it (plan from the SPARKPAIR_* settings)."""
    from sparkpair_overlay.kernels.fp8_einsum import fp8_einsum
    from sparkpair_overlay.patches.o_proj import Fp8EinsumDispatcher
    from sparkpair_overlay.plugin import make_plan

    env = {"SPARKPAIR_FAKE_CAPABILITY": "12.1", "SPARKPAIR_O_PROJ": "triton",
           "SPARKPAIR_O_PROJ_RECIPE": ",".join(map(str, recipe)), "SPARKPAIR_PLAN_PATH": ""}
    plan = make_plan(env)

    def deepgemm_unavailable(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the dispatcher sent the call to the original (DeepGEMM) fp8_einsum")

    return Fp8EinsumDispatcher(deepgemm_unavailable, plan.o_proj, plan.capability, fp8_einsum), plan


def run_case(quant_mod, t: int, recipe, wform: str, device: str = "cuda", seed: int = 0) -> dict[str, Any]:  # noqa: ANN001
    """One recipe x T through vLLM's quant kernel and our dispatcher; numbers and failures."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(1000 + t + seed)
    n_heads = G * HEADS_PER_GROUP
    o = (torch.randn(t, n_heads, HEAD_DIM, generator=gen)
         * torch.exp2(torch.randint(-4, 3, (t, n_heads, 1), generator=gen).float())).to(torch.bfloat16)
    o = o.to(device)
    max_pos = 65536
    positions = torch.randint(0, max_pos, (t,), generator=gen).to(device)
    cache = rope_cache(max_pos, ROPE_DIM).to(device)
    tma = recipe == (1, 1, 128)
    a, sa = quant_mod.fused_inv_rope_fp8_quant(
        o, positions, cache, G, HEADS_PER_GROUP, nope_dim=NOPE_DIM, rope_dim=ROPE_DIM,
        quant_group_size=recipe[2], tma_aligned_scales=tma)
    rt = check_activation_roundtrip(o, positions, cache, a, sa, tma, t)
    x_ref = rt.pop("x_ref")
    w2d, exp2d, w_hp = make_checkpoint_wo_a(G, D, R, device, seed=7)
    w, sw, sw_f = postprocess_wo_a(w2d, exp2d, G, wform)
    out = torch.full((t, G, D), float("nan"), dtype=torch.bfloat16, device=device)
    disp, plan = make_dispatcher(recipe)
    route = disp.route("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    if device == "cuda":
        disp("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
        torch.cuda.synchronize()
    else:  # CPU smoke test under TRITON_INTERPRET=1 only: the predicate rightly wants CUDA tensors
        disp.kernel("bhr,hdr->bhd", (a, sa), (w, sw), out, recipe=recipe)
    ref = reference_fp64(a, sa, w, sw_f)
    err = rel_fro(out, ref)  # inf on NaN/inf
    e2e = rel_fro(out, torch.einsum("tgr,gdr->tgd", x_ref, w_hp.view(G, D, R)))
    fails = list(rt["layout_fails"])
    if device == "cuda" and (route[0] != "triton" or disp.calls.get("triton") != 1):
        fails.append(f"route {route} calls {dict(disp.calls)}")
    if not err <= TOL:
        fails.append(f"rel fro err {err:.3g} > {TOL}")
    return {
        "recipe": list(recipe), "weight_scale_form": wform, "T": t,
        "a": [list(a.shape), str(a.dtype).replace("torch.", ""), list(a.stride())],
        "sa": [list(sa.shape), str(sa.dtype).replace("torch.", ""), list(sa.stride())],
        "w": [list(w.shape), list(w.stride())],
        "sw": [list(sw.shape), str(sw.dtype).replace("torch.", ""), list(sw.stride())],
        "plan_o_proj": plan.o_proj.label, "route": list(route), "dispatcher_calls": dict(disp.calls),
        "rel_fro_err_vs_fp64_dequant": err, "tol": TOL,
        "rel_fro_err_vs_unquantised_fp64": e2e,
        **{k: v for k, v in rt.items() if k != "layout_fails"},
        "fails": fails, "pass": not fails,
    }


# --------------------------------------------------------------------------- pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def vllm_quant():  # noqa: ANN201
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs an NVIDIA GPU (run on the H200)")
    root, where = vllm_source_root()
    if root is None:
        pytest.skip(where + "; run `python tests/gpu/test_vllm_o_proj_path.py stage` where vLLM is "
                    "installed and carry .gpu-carry, or set SPARKPAIR_VLLM_SRC")
    mod, state = load_vllm_quant(root, "cuda")
    version = sys.modules["vllm"].__version__
    yield mod, where
    _restore(state)
    vh.write_results_json(
        "SPARKPAIR_VLLM_O_PROJ_JSON",
        "vLLM 0.32.0 fused_inv_rope_fp8_quant -> sparkpair Fp8EinsumDispatcher -> Triton fp8_einsum, "
        "TP=2 DeepSeek-V4 o_proj, vs fp64",
        where, version, RESULTS,
    )


@pytest.mark.parametrize("t", TS)
@pytest.mark.parametrize("case,recipe,wform", CASES, ids=[c[0] for c in CASES])
def test_vllm_quant_then_dispatcher(vllm_quant, case, recipe, wform, t) -> None:  # noqa: ANN001
    mod, _ = vllm_quant
    res = run_case(mod, t, recipe, wform)
    RESULTS.append({"case": case, **res})
    print(json.dumps({"case": case, **res}))
    assert res["pass"], res["fails"]


if __name__ == "__main__":
    if sys.argv[1:] == ["stage"]:
        print(stage())
    else:
        raise SystemExit("usage: python tests/gpu/test_vllm_o_proj_path.py stage")

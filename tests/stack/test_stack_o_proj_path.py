"""vLLM 0.33.0's own DeepSeek-V4 o_proj path feeding our fp8_einsum kernel, on the CPU.

What runs, per case, at DeepSeek-V4-Flash TP=2 shapes (G=4 ``wo_a`` groups x 8 heads x head_dim
512 -> R=4096 per group, D=o_lora_rank=1024), T=3 tokens, under ``TRITON_INTERPRET=1``:

1. **vLLM's** ``fused_inv_rope_fp8_quant`` (the installed 0.33.0 module, imported, unmodified)
   quantises a bf16 attention output ``o [T, 32, 512]`` into ``a`` e4m3 ``[T, G, R]`` and its
   scales: packed UE8M0 int32 (``tma_aligned_scales=True``, recipe (1,1,128)) or fp32
   (``False``, recipe (1,128,128)), the way ``deep_gemm_fp8_o_proj`` calls it.
2. **vLLM's** ``deepgemm_post_process_fp8_weight_block(is_bmm=True)`` on the checkpoint-form
   ``wo_a`` (e4m3 ``[G*D, R]``, UE8M0 ``float8_e8m0fnu`` 128x128 block scales, as
   DeepSeek-V4-Flash ships them): it reshapes the weight to ``[G, D, R]`` and the scales to
   ``[G, D/128, R/128]``, upcasts them to fp32 and hands them to DeepGEMM's
   ``transform_sf_into_required_layout``, which needs CUDA. That is as far as it runs here: the
   test records what vLLM hands DeepGEMM and stands in for that one call with the layout the
   GPU tier documents (``tests/gpu/test_vllm_o_proj_path.py`` ``postprocess_wo_a``): per-row
   packed int32 (arch 10/12) or fp32 blocks (SM90).
3. The ``fp8_einsum`` dispatcher the plugin bound in vLLM's o_proj module (loaded by vLLM's own
   ``load_general_plugins``, plan ``SPARKPAIR_O_PROJ=triton`` with the case's recipe on a faked
   12.1), called as vLLM calls it: it routes the call to our Triton kernel (on the CPU under
   ``TRITON_INTERPRET=1``, the device our kernel runs on here), which runs on those operands.
4. Checks, against fp64: the output vs the einsum of the dequantised operands as handed over
   (relative Frobenius <= 1e-2: a bf16 output of fp32 sums), and vs the unquantised ``o`` and
   weight (<= 2**-3: two e4m3 roundings, 3 significand bits each).
"""

from __future__ import annotations

import json

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.slow]

DRIVER = r'''
import json, sys
setup = json.loads(sys.argv[1])
sys.path.insert(0, setup["gpu_tests"])
import test_vllm_o_proj_path as gp  # the GPU tier's operand makers and fp64 maths (one way per thing)
import torch
import vllm
from vllm.plugins import load_general_plugins
load_general_plugins()
from vllm.models.deepseek_v4.nvidia.ops import o_proj as op
from vllm.models.deepseek_v4.common.ops.fused_inv_rope_fp8_quant import fused_inv_rope_fp8_quant
from vllm.model_executor.layers.quantization.utils import fp8_utils

G, HPG, HEAD, ROPE = 4, 8, 512, 64
R, D, T = HPG * HEAD, 1024, 3
recipe, wform = tuple(setup["recipe"]), setup["wform"]
tma = recipe == (1, 1, 128)
report = {"dispatcher": getattr(op.fp8_einsum, "sparkpair", False)}

gen = torch.Generator().manual_seed(0)
o = (torch.randn(T, G * HPG, HEAD, generator=gen) * 2).to(torch.bfloat16)
positions = torch.tensor([0, 5, 17])
cache = gp.rope_cache(64, ROPE)
a, sa = fused_inv_rope_fp8_quant(o, positions, cache, n_groups=G, heads_per_group=HPG, nope_dim=HEAD - ROPE,
                                 rope_dim=ROPE, quant_group_size=recipe[2], tma_aligned_scales=tma)
report["act"] = [list(a.shape), str(a.dtype), list(sa.shape), str(sa.dtype)]

w2d, exp2d, w_hp = gp.make_checkpoint_wo_a(G, D, R, "cpu")
ws = exp2d.view(torch.float8_e8m0fnu)
try:  # vLLM's own post-processing, as far as it runs without CUDA
    fp8_utils.deepgemm_post_process_fp8_weight_block(wq=w2d.clone(), ws=ws.clone(),
                                                     quant_block_shape=(128, 128), use_e8m0=True,
                                                     is_bmm=True, bmm_batch_size=G)
    report["unaided"] = "returned"
except Exception as exc:
    report["unaided"] = type(exc).__name__
handed = {}
def transform_stand_in(sf, mn, k, recipe, num_groups, is_sfa=False):
    handed.update(sf=[list(sf.shape), str(sf.dtype)], mn=mn, k=k, recipe=list(recipe), num_groups=num_groups,
                  is_sfa=is_sfa)
    exps = ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)  # fp32 2**(e-127) -> e
    return gp.postprocess_wo_a(w2d, exps.view(num_groups * mn // 128, k // 128), num_groups, wform)[1]
fp8_utils.transform_sf_into_required_layout = transform_stand_in
w, sw = fp8_utils.deepgemm_post_process_fp8_weight_block(wq=w2d, ws=ws, quant_block_shape=(128, 128),
                                                         use_e8m0=True, is_bmm=True, bmm_batch_size=G)
report["handed_to_deepgemm"] = handed
report["weight"] = [list(w.shape), str(w.dtype), list(sw.shape), str(sw.dtype)]
sw_f = torch.exp2(exp2d.double() - 127).view(G, D // 128, R // 128)

z = torch.empty(T, G, D, dtype=torch.bfloat16)
disp = op.fp8_einsum
report["route"] = list(disp.route("bhr,hdr->bhd", (a, sa), (w, sw), z, recipe=recipe))
disp("bhr,hdr->bhd", (a, sa), (w, sw), z, recipe=recipe)
report["calls"] = dict(disp.calls)
ref_handed = gp.reference_fp64(a, sa, w, sw_f)
o_rot = gp.inverse_rope_fp64(o, positions, cache, HEAD - ROPE).reshape(T, G, R)
ref_true = torch.einsum("tgr,gdr->tgd", o_rot, w_hp.view(G, D, R))
report["err_vs_handed"] = gp.rel_fro(z, ref_handed)
report["err_vs_unquantised"] = gp.rel_fro(z, ref_true)
report["finite"] = bool(torch.isfinite(z.float()).all())
print("REPORT " + json.dumps(report))
'''

#: (case, recipe, weight-scale form DeepGEMM's transform makes): arch 10/12 packs per-row int32
#: for either recipe; SM90's (1,128,128) keeps fp32 blocks.
CASES = (("r1-int32w", (1, 1, 128), "int32"), ("r128-int32w", (1, 128, 128), "int32"),
         ("r128-fp32w", (1, 128, 128), "fp32"))
TOL_HANDED = 1e-2
TOL_UNQUANTISED = 2**-3


@pytest.mark.parametrize("case,recipe,wform", CASES, ids=[c[0] for c in CASES])
def test_vllm_quant_and_weight_post_processing_feed_our_kernel(stack_env, case, recipe, wform):
    # CUDA_VISIBLE_DEVICES="": vLLM's triton_utils keeps real Triton (not its no-op placeholder)
    # when no driver is active only in that case (triton_utils/importing.py, 0.33.0); with
    # TRITON_INTERPRET=1 its kernels then run on the CPU.
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", SPARKPAIR_FAKE_CAPABILITY="12.1",
               SPARKPAIR_O_PROJ="triton", SPARKPAIR_O_PROJ_RECIPE=",".join(map(str, recipe)),
               SPARKPAIR_PLAN_PATH="")
    r, _ = stacklib.run_report(DRIVER, env, json.dumps(
        {"recipe": recipe, "wform": wform, "gpu_tests": str(stacklib.REPO / "tests" / "gpu")}), timeout=900)
    assert r["dispatcher"], "the plugin did not bind its dispatcher in vLLM's o_proj module"
    kb = 4096 // 128
    scales = [[3, 4, kb // 4], "torch.int32"] if recipe == (1, 1, 128) else [[3, 4, kb], "torch.float32"]
    assert r["act"] == [[3, 4, 4096], "torch.float8_e4m3fn", *scales]
    # vLLM's post-processing stops at DeepGEMM's transform without CUDA, after reshaping for bmm:
    assert r["unaided"] != "returned"
    # (vLLM upcasts the checkpoint's e8m0 scales to fp32 before DeepGEMM's transform.)
    assert r["handed_to_deepgemm"] == {"sf": [[4, 8, kb], "torch.float32"], "mn": 1024, "k": 4096,
                                       "recipe": [1, 128, 128], "num_groups": 4, "is_sfa": False}
    assert r["weight"][:2] == [[4, 1024, 4096], "torch.float8_e4m3fn"]
    assert r["route"] == ["triton", "ok"] and r["calls"] == {"triton": 1}
    assert r["finite"]
    assert r["err_vs_handed"] <= TOL_HANDED, r
    assert r["err_vs_unquantised"] <= TOL_UNQUANTISED, r

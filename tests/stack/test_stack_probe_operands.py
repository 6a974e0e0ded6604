"""The probe's o_proj rows and its checkpoint check, built through vLLM 0.33.0's own weight
post-processing and activation quant, on the CPU (Triton's interpreter for vLLM's quant and our kernel).

* ``probe_o_proj`` on every layout the served switches make: vLLM's ``deepgemm_post_process_fp8_weight_block``
  (DeepGEMM's transform stood in, ``stacklib.deepgemm_transform_stand_in``), its
  ``process_fp8_weight_block_strategy`` and ``_upcast_e8m0_to_fp32``, its ``fused_inv_rope_fp8_quant``;
  each row names the layout read off the tensors built, and our kernel matches fp64 on each.
* ``check_checkpoint`` on a safetensors checkpoint written here (the index, one shard file and
  ``config.json`` as DeepSeek-V4 ships them): this rank's shard, every layout, against fp64; and the
  check failing when the post-processing changes the scales (a transform that is off by one exponent).
"""

from __future__ import annotations

import json

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.slow]

DRIVER = r"""
import json, os, sys
setup = json.loads(sys.argv[1])
sys.path.insert(0, setup["stack_dir"])
from stacklib import deepgemm_transform_stand_in
import torch
from safetensors.torch import save_file
from sparkpair_overlay.probe import kernels as kp
from sparkpair_overlay.probe.checkpoint import CheckpointError, check_checkpoint
from sparkpair_overlay.probe.operands import checkpoint_wo_a

report = {}
t_on = deepgemm_transform_stand_in(disable_ue8m0_cast=False)   # VLLM_USE_DEEP_GEMM_E8M0=1 on GB10
t_off = deepgemm_transform_stand_in(disable_ue8m0_cast=True)   # VLLM_USE_DEEP_GEMM_E8M0=0
common = dict(ts=(3,), device="cpu", timer=lambda call: 1.0, use_vllm=True, dims=(256, 512))
on_layouts = ["w3-ue8m0-row", "w2-e8m0-block", "w2-fp32-block"]
report["rows_e8m0_on"] = kp.probe_o_proj(4, on_layouts, transform=t_on, **common)
report["rows_e8m0_off"] = kp.probe_o_proj(4, ["w3-fp32-block"], transform=t_off, **common)

# a checkpoint as DeepSeek-V4 ships it: index + shard + config (o_groups 4; this rank's G = 2 at TP=2)
d = setup["ckpt"]
os.makedirs(d, exist_ok=True)
w2d, exps = checkpoint_wo_a(4, 256, 512, seed=9)
name = "layers.0.attn.wo_a"
save_file({f"{name}.weight": w2d, f"{name}.scale": exps.view(torch.float8_e8m0fnu)},
          os.path.join(d, "model-00001.safetensors"))
shard = "model-00001.safetensors"
json.dump({"weight_map": {f"{name}.weight": shard, f"{name}.scale": shard}},
          open(os.path.join(d, "model.safetensors.index.json"), "w"))
json.dump({"o_groups": 4}, open(os.path.join(d, "config.json"), "w"))
layouts = ["w3-ue8m0-row", "w2-e8m0-block", "w2-fp32-block"]
report["ckpt"] = [c.to_json() for c in check_checkpoint(d, 2, 1, layouts, device="cpu", use_vllm=True,
                                                         transform=t_on)]

def off_by_one(sf, *a, **k):  # a post-processing that changes every scale: the check must fail
    return t_on(sf * 2.0, *a, **k)
report["ckpt_bad"] = [c.to_json() for c in check_checkpoint(d, 2, 1, ["w3-ue8m0-row"], device="cpu",
                                                             use_vllm=True, transform=off_by_one)]
try:
    check_checkpoint(setup["empty"], 2, 0, layouts, device="cpu")
    report["no_wo_a"] = "returned"
except CheckpointError as exc:
    report["no_wo_a"] = str(exc)
print("REPORT " + json.dumps(report))
"""


def test_probe_rows_and_the_checkpoint_check_on_vllms_own_post_processing(stack_env, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "model.safetensors.index.json").write_text('{"weight_map": {"lm_head.weight": "a.safetensors"}}')
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    setup = {
        "stack_dir": str(stacklib.REPO / "tests" / "stack"),
        "ckpt": str(tmp_path / "ckpt"),
        "empty": str(empty),
    }
    r, _ = stacklib.run_report(DRIVER, env, json.dumps(setup), timeout=900)
    rows = r["rows_e8m0_on"] + r["rows_e8m0_off"]
    got = {(x["backend"], tuple(x["recipe"]), x["weight_layout"]) for x in rows}
    assert got == {
        ("triton", (1, 1, 128), "w3-ue8m0-row"),
        ("triton", (1, 128, 128), "w3-ue8m0-row"),
        ("deepgemm", (1, 1, 128), "w3-ue8m0-row"),
        ("triton", (1, 1, 128), "w2-e8m0-block"),
        ("triton", (1, 128, 128), "w2-e8m0-block"),
        ("triton", (1, 1, 128), "w2-fp32-block"),
        ("triton", (1, 128, 128), "w2-fp32-block"),
        ("triton", (1, 1, 128), "w3-fp32-block"),
        ("triton", (1, 128, 128), "w3-fp32-block"),
        ("deepgemm", (1, 128, 128), "w3-fp32-block"),
    }
    for x in rows:
        assert x["source"] == "vllm" and x["groups"] == 2
        assert x["act_layout"] == ("a-ue8m0-tma" if x["recipe"] == [1, 1, 128] else "a-fp32-tma"), x
        if x["backend"] == "triton":
            assert x["ok"] and x["err"] <= 1e-2 and x["us"] == 1.0, x
        else:  # no DeepGEMM on a CPU: a failed row, never a crash of the probe
            assert not x["ok"] and x["us"] is None and x["error"], x
    assert [c["weight_layout"] for c in r["ckpt"]] == ["w3-ue8m0-row", "w2-e8m0-block", "w2-fp32-block"]
    for c in r["ckpt"]:
        assert (
            c["ok"] and c["err"] <= 1e-2 and c["tp_rank"] == 1 and c["tensor"] == "layers.0.attn.wo_a.weight"
        ), c
    bad = r["ckpt_bad"][0]
    assert not bad["ok"] and bad["error"].startswith("wrong numbers: error") and bad["err"] > 0.5, bad
    assert "no tensor named *wo_a.weight" in r["no_wo_a"]

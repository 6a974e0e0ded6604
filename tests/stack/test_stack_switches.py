"""The switches field stacks set, each loaded through vLLM 0.33.0's own plugin loader on a faked
GB10 (12.1): every setting either serves the o_proj and router calls on a path another stack
test proves correct, or refuses at start (plugin load, or the DeepSeek-V4 attention's
construction) with a message naming the switch. None may first fail at the first forward.

"Serves correctly" here means, on a CPU:

* o_proj: the dispatcher in vLLM's o_proj module hands its calls to our Triton kernel with a
  recipe and scale encoding ``test_stack_o_proj_path.py`` checks against fp64 (``(1,1,128)``
  packed int32, ``(1,128,128)`` fp32), or to vLLM's own ``fp8_einsum`` unchanged (``deepgemm``,
  ``upstream``: DeepGEMM's correctness on the device is the probe's question, not this tier's);
* router: ``GateLinear`` built as DeepSeek-V4 builds it holds the plan's decision, and a call
  gives exactly what vLLM's own class gives in the same process.

``--kv-cache-dtype`` is checked where it reaches the o_proj: the KV-cache dtype picks
FlashInfer's fused RoPE+quant epilogue only with 128 local heads (TP=1), never at TP=2; see
docs/reference/vllm-0.33.md. ``--linear-backend``, ``VLLM_USE_DEEP_GEMM_E8M0`` and a top-level
``deep_gemm`` change the ``wo_a`` layout the o_proj gets: every value is walked, with a forward on
vLLM's own post-processed weights, in ``test_stack_serve_matrix.py``; here only the ones that need no
weights (a plugin-load refusal, ``VLLM_USE_DEEP_GEMM=0`` refused at construction).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.per_version, pytest.mark.slow]

DRIVER = r'''
import importlib, json, sys, types
report = {}
import torch
import vllm
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
cap = DeviceCapability(12, 1)
type(current_platform).get_device_capability = classmethod(lambda c, device_id=0: cap)
from vllm.plugins import load_general_plugins
load_general_plugins()
from sparkpair_overlay import plugin
plan = plugin.current_plan()
report["plan"] = {"o_proj": plan.o_proj.label, "router": plan.line().split(" o_proj=")[0].split("router=")[1],
                  "reason": plan.o_proj.reason}
op = importlib.import_module("vllm.models.deepseek_v4.nvidia.ops.o_proj")
fn = op.fp8_einsum
if getattr(fn, "sparkpair", False):
    k = fn.kernel
    report["o_proj_binding"] = {"backend": fn.decision.backend,
        "kernel": None if k is None else f"{k.__module__}.{k.__name__}",
        "original_is_vllm": fn.original.__code__.co_filename.endswith("vllm/utils/deep_gemm.py")}
else:
    report["o_proj_binding"] = {"backend": "vllm's own fp8_einsum",
                                "is_vllm": fn.__code__.co_filename.endswith("vllm/utils/deep_gemm.py")}
# What the DeepSeek-V4 attention's __init__ does first (flashmla.py): ask for its recipe.
fm = importlib.import_module("vllm.models.deepseek_v4.nvidia.flashmla")
try:
    r, tma = fm.compute_fp8_einsum_recipe()
    report["attention_recipe"] = [list(r), tma]
except Exception as exc:
    report["attention_recipe"] = f"{type(exc).__name__}: {exc}"

import tempfile
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
ctx = set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))); ctx.__enter__()
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
    distributed_init_method="file://" + tempfile.mktemp(prefix="sparkpair-dist-"))
initialize_model_parallel(1, 1)
from vllm.model_executor.custom_op import op_registry_oot
from vllm.models.deepseek_v4.nvidia.model import GateLinear
def gate(own):
    saved = op_registry_oot.pop("GateLinear", None) if own else None
    try:
        torch.set_default_dtype(torch.bfloat16)
        g = GateLinear(input_size=256, output_size=16, bias=False, out_dtype=torch.float32, prefix="g")
    finally:
        torch.set_default_dtype(torch.float32)
        if saved is not None:
            op_registry_oot["GateLinear"] = saved
    with torch.no_grad():
        g.weight.copy_(torch.randn(16, 256, generator=torch.Generator().manual_seed(1)).to(g.weight.dtype))
    g.quant_method.process_weights_after_loading(g)
    return g
g, twin = gate(False), gate(True)
x = torch.randn(4, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
d = getattr(g, "sparkpair_router", None)
report["router"] = {"decision": None if d is None else d.label,
                    "equals_vllm": bool(torch.equal(g(x)[0], twin(x)[0]))}
print("REPORT " + json.dumps(report))
'''

TRITON = "sparkpair_overlay.kernels.fp8_einsum.fp8_einsum"
#: (recipe, tma_aligned) pairs test_stack_o_proj_path.py checks our kernel on against fp64.
PROVEN_TRITON_RECIPES = ([[1, 1, 128], True], [[1, 128, 128], False])
VLLM_RECIPE_12 = [[1, 1, 128], True]


def probe_json(tmp_path, fastest: tuple[str, list[int]]) -> str:
    """A probe result (schema sparkpair-probe/2, default switches) where every o_proj candidate is
    correct on the layout GB10 serves by default (per-row int32 weight scales) and ``fastest``
    (backend, recipe) is the fastest."""
    rows = [{"backend": b, "recipe": rc, "t": t, "ok": True, "us": 5.0 if (b, rc) == fastest else 9.0,
             "weight_layout": "w3-ue8m0-row",
             "act_layout": "a-ue8m0-tma" if rc == [1, 1, 128] else "a-fp32-tma"}
            for t in (1, 64) for b in ("deepgemm", "triton") for rc in ([1, 1, 128], [1, 128, 128])]
    switches = {"linear_backend": "auto", "VLLM_USE_DEEP_GEMM": True, "VLLM_USE_DEEP_GEMM_E8M0": True,
                "deepgemm": "vendored", "ckpt_scale": "e8m0"}
    p = tmp_path / f"probe-{fastest[0]}-{'-'.join(map(str, fastest[1]))}.json"
    p.write_text(json.dumps({"schema": "sparkpair-probe/2", "capability": [12, 1], "o_proj": rows,
                             "switches": switches}))
    return str(p)


def run(stack_env: dict[str, str], env: dict[str, str]) -> tuple[int, dict | None, str]:
    full = dict(stack_env, SPARKPAIR_FAKE_CAPABILITY="12.1", SPARKPAIR_PLAN_PATH="", **env)
    proc = subprocess.run([sys.executable, "-c", DRIVER], env=full, capture_output=True, text=True,
                          timeout=600)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT ")]
    return proc.returncode, (json.loads(lines[-1][7:]) if lines else None), proc.stderr


def assert_serves(r: dict) -> None:
    """The o_proj and router calls go down paths this tier proves (see the module docstring)."""
    b = r["o_proj_binding"]
    if b["backend"] == "triton":
        assert b["kernel"] == TRITON and b["original_is_vllm"], b
        assert r["attention_recipe"] in PROVEN_TRITON_RECIPES, r
    elif b["backend"] == "deepgemm":
        assert b["kernel"] is None and b["original_is_vllm"], b
        assert r["attention_recipe"] in (VLLM_RECIPE_12, [[1, 128, 128], False]), r
    else:
        assert b == {"backend": "vllm's own fp8_einsum", "is_vllm": True}, b
        assert r["attention_recipe"] == VLLM_RECIPE_12, r
    assert r["router"]["equals_vllm"], r["router"]


SERVING = {
    "o_proj=auto": ({"SPARKPAIR_O_PROJ": "auto"}, "triton(1,1,128)", "triton"),
    "o_proj=triton": ({"SPARKPAIR_O_PROJ": "triton"}, "triton(1,1,128)", "triton"),
    "o_proj=deepgemm": ({"SPARKPAIR_O_PROJ": "deepgemm"}, "deepgemm(1,1,128)", "deepgemm"),
    "o_proj=upstream": ({"SPARKPAIR_O_PROJ": "upstream"}, "upstream", "vllm's own fp8_einsum"),
    "recipe=1,128,128": ({"SPARKPAIR_O_PROJ_RECIPE": "1,128,128"}, "triton(1,128,128)", "triton"),
    "recipe=1,1,128": ({"SPARKPAIR_O_PROJ_RECIPE": "1,1,128"}, "triton(1,1,128)", "triton"),
    "router=upstream": ({"SPARKPAIR_ROUTER": "upstream"}, "triton(1,1,128)", "triton"),
    "router=triton": ({"SPARKPAIR_ROUTER": "triton"}, "triton(1,1,128)", "triton"),
}


@pytest.mark.parametrize("name", list(SERVING))
def test_a_setting_serves_on_a_proven_path(stack_env, name):
    env, label, backend = SERVING[name]
    rc, r, err = run(stack_env, env)
    assert rc == 0 and r is not None, err[-3000:]
    assert r["plan"]["o_proj"] == label and r["o_proj_binding"]["backend"] == backend, r
    assert_serves(r)
    want_router = "bf16:upstream" if name == "router=upstream" else "bf16:triton-bf16-lowM(M<=32)"
    assert r["plan"]["router"].startswith(want_router), r["plan"]
    assert r["router"]["decision"] == (None if name == "router=upstream" else "triton-bf16-lowM(M<=32)")


@pytest.mark.parametrize("fastest", [("deepgemm", [1, 1, 128]), ("triton", [1, 1, 128]),
                                     ("triton", [1, 128, 128]), ("deepgemm", [1, 128, 128])],
                         ids=lambda f: f"{f[0]}{tuple(f[1])}".replace(" ", ""))
def test_a_probe_picking_each_candidate_serves_it(stack_env, tmp_path, fastest):
    """Each candidate a probe finds fastest is served, except DeepGEMM (1,128,128) on the per-row int32
    weight scales GB10 serves: DeepGEMM rejects those (issue 30), so the plan takes the next candidate
    (all others tie: the preference order's first, triton (1,1,128))."""
    rc, r, err = run(stack_env, {"SPARKPAIR_PROBE_RESULTS": probe_json(tmp_path, fastest)})
    assert rc == 0 and r is not None, err[-3000:]
    served = fastest if fastest != ("deepgemm", [1, 128, 128]) else ("triton", [1, 1, 128])
    label = f"{served[0]}({','.join(map(str, served[1]))})"
    assert r["plan"]["o_proj"] == label and r["plan"]["reason"].startswith("probe on w3-ue8m0-row"), r["plan"]
    assert r["o_proj_binding"]["backend"] == served[0]
    want = [served[1], served[1] == [1, 1, 128]]
    assert r["attention_recipe"] == want, r  # the attention layer asks for, and gets, the probe's recipe
    assert_serves(r)


@pytest.mark.parametrize("env,named", [
    ({"SPARKPAIR_O_PROJ": "cutlass"}, "SPARKPAIR_O_PROJ='cutlass' is not valid"),
    ({"SPARKPAIR_ROUTER": "fast"}, "SPARKPAIR_ROUTER='fast' is not valid"),
    ({"SPARKPAIR_O_PROJ_RECIPE": "1,64,128"}, "SPARKPAIR_O_PROJ_RECIPE='1,64,128' is not valid"),
], ids=["o_proj", "router", "recipe"])
def test_a_bad_value_refuses_at_plugin_load_naming_the_switch(stack_env, env, named):
    rc, r, err = run(stack_env, env)
    assert rc != 0 and r is None and named in err, err[-3000:]


def test_vllm_use_deep_gemm_0_refuses_when_the_dsv4_attention_is_built(stack_env):
    """VLLM_USE_DEEP_GEMM=0 leaves DeepSeek-V4's wo_a 2-D, so its o_proj would fail at the first
    forward; the overlay refuses at model construction instead, naming the switch."""
    rc, r, err = run(stack_env, {"VLLM_USE_DEEP_GEMM": "0"})
    assert rc == 0 and r is not None, err[-3000:]
    assert r["attention_recipe"].startswith("SwitchRefused: sparkpair overlay: refusing to build DeepSeek-V4 "
                                            "attention: VLLM_USE_DEEP_GEMM=0"), r["attention_recipe"]
    assert r["router"]["equals_vllm"]


def test_a_malformed_probe_file_falls_back_to_the_default_and_says_so(stack_env, tmp_path):
    bad = tmp_path / "probe.json"
    bad.write_text('{"schema": "sparkpair-probe/2"}')
    rc, r, err = run(stack_env, {"SPARKPAIR_PROBE_RESULTS": str(bad)})
    assert rc == 0 and r is not None, err[-3000:]
    assert f"SPARKPAIR_PROBE_RESULTS={bad}" in err and r["plan"]["o_proj"] == "triton(1,1,128)"
    assert_serves(r)


def test_kv_cache_dtype_reaches_the_o_proj_only_through_ropequant_at_128_local_heads():
    """vLLM 0.33's own rule: FlashInfer's fused RoPE+FP8 epilogue feeds the o_proj only with 128
    local query heads (TP=1) and an FP8 KV cache; at TP=2 (64 heads) the o_proj input comes from
    fused_inv_rope_fp8_quant whatever --kv-cache-dtype says (the path test_stack_o_proj_path.py runs)."""
    import types

    import torch
    from vllm.models.deepseek_v4.nvidia.ops import o_proj

    def layer(heads: int, kv: torch.dtype) -> types.SimpleNamespace:
        wo_a = types.SimpleNamespace(weight=torch.empty(0, dtype=torch.float8_e4m3fn))
        return types.SimpleNamespace(n_local_heads=heads, kv_cache_torch_dtype=kv, wo_a=wo_a)

    def rope_quant_unsupported_reason(lay: types.SimpleNamespace, lora: bool = False) -> str | None:
        """0.33 takes the layer; 0.34 also the VllmConfig (only its ``lora_config`` is read)."""
        if stacklib.installed_vllm() == "0.33.0":
            assert not lora
            return o_proj.rope_quant_unsupported_reason(lay)
        cfg = types.SimpleNamespace(lora_config=object() if lora else None)
        return o_proj.rope_quant_unsupported_reason(lay, cfg)

    if stacklib.installed_vllm() != "0.33.0":  # 0.34: a LoRA adapter on wo_a needs the BF16 output
        want_lora = "RopeQuant is incompatible with LoRA"
        assert rope_quant_unsupported_reason(layer(128, torch.float8_e4m3fn), lora=True) == want_lora

    for kv in (torch.float8_e4m3fn, torch.bfloat16):
        assert rope_quant_unsupported_reason(layer(64, kv)) == "RopeQuant needs 128 local query heads"
    assert rope_quant_unsupported_reason(layer(128, torch.float8_e4m3fn)) is None
    want = "RopeQuant needs the per-tensor FP8 KV cache"
    assert rope_quant_unsupported_reason(layer(128, torch.bfloat16)) == want

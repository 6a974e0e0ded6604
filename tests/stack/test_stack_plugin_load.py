"""The plugin loaded by vLLM 0.33.0's own loader, in both import orders, on four devices.

One fresh process per case runs ``vllm.plugins.load_general_plugins()`` (vLLM 0.33.0's, which
finds the plugin through the ``vllm.general_plugins`` entry point) either after importing every
DeepSeek-V4 module the overlay patches (the order of vLLM's spawned engine and worker
processes, which unpickle the model config first) or before them (the order under ``fork``,
where the parent loaded plugins first and the patch imports the modules itself).

The device: CPU here, so the capability is faked twice, each the way the reader of it asks:
the overlay's plan through ``SPARKPAIR_FAKE_CAPABILITY`` (its documented test switch), and vLLM's
own code (``compute_fp8_einsum_recipe``, ``GateLinear``'s tier choice) through vLLM's
``current_platform.get_device_capability``. ``is_cuda()`` is left False: vLLM 0.33 modules call
CUDA-only ops at import when it is True, so vLLM's own router tiers stay on their CPU path
(``F.linear``) and a router call can run here.

Each case reports which object every patched name is bound to (``fp8_einsum`` in every consumer
module ``targets.py`` lists, ``compute_fp8_einsum_recipe`` in its consumers,
``op_registry_oot["GateLinear"]``) and which path a router call and an o_proj call take.
"""

from __future__ import annotations

import json

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

DRIVER = r'''
import importlib, json, os, sys, types
setup = json.loads(sys.argv[1])
report = {}
import torch
import vllm
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
cap = DeviceCapability(*setup["cap"])
type(current_platform).get_device_capability = classmethod(lambda c, device_id=0: cap)

from sparkpair_overlay.targets import (FP8_EINSUM_CONSUMERS_OPTIONAL, FP8_EINSUM_CONSUMERS_REQUIRED,
    RECIPE_CONSUMERS_OPTIONAL, RECIPE_CONSUMERS_REQUIRED, GATE_LINEAR_MODULE, FP8_EINSUM_SOURCE)
EINSUM_MODS = FP8_EINSUM_CONSUMERS_REQUIRED + FP8_EINSUM_CONSUMERS_OPTIONAL
RECIPE_MODS = RECIPE_CONSUMERS_REQUIRED + RECIPE_CONSUMERS_OPTIONAL
DSV4 = EINSUM_MODS + RECIPE_MODS + (GATE_LINEAR_MODULE, "vllm.models.deepseek_v4.nvidia.model")

def import_dsv4():
    return {m: importlib.import_module(m) for m in DSV4}

from vllm.plugins import load_general_plugins
before = {}
if setup["order"] == "dsv4-first":
    mods = import_dsv4()
    before = {"einsum": {m: mods[m].fp8_einsum for m in EINSUM_MODS},
              "recipe": {m: mods[m].compute_fp8_einsum_recipe for m in RECIPE_MODS}}
    report["imported_before_plugins"] = sorted(m for m in DSV4 if m in sys.modules)
else:
    report["imported_before_plugins"] = sorted(m for m in DSV4 if m in sys.modules)
    load_general_plugins()
    mods = import_dsv4()
if setup["order"] == "dsv4-first":
    load_general_plugins()
load_general_plugins()  # vLLM's own once-per-process guard

dg = importlib.import_module(FP8_EINSUM_SOURCE)
def is_vllm_fp8_einsum(o):
    return (isinstance(o, types.FunctionType) and o.__name__ == "fp8_einsum"
            and o.__code__.co_filename.endswith("vllm/utils/deep_gemm.py"))
def is_vllm_recipe(o):
    return (isinstance(o, types.FunctionType) and o.__name__ == "compute_fp8_einsum_recipe"
            and o.__code__.co_filename.endswith("deepseek_v4/nvidia/ops/o_proj.py"))

einsum = {}
first = None
for m in EINSUM_MODS:
    o = mods[m].fp8_einsum
    if getattr(o, "sparkpair", False):
        first = first or o
        einsum[m] = {"kind": "dispatcher", "same_dispatcher": o is first,
                     "original_is_vllm": is_vllm_fp8_einsum(o.original),
                     "original_is_pre_plugin_object": (m not in before.get("einsum", {}))
                     or o.original is before["einsum"][m]}
    else:
        einsum[m] = {"kind": "vllm" if is_vllm_fp8_einsum(o) else repr(o)}
report["einsum"] = einsum
recipe = {}
for m in RECIPE_MODS:
    o = mods[m].compute_fp8_einsum_recipe
    if getattr(o, "sparkpair", False):
        recipe[m] = {"kind": "sparkpair", "original_is_vllm": is_vllm_recipe(o.original),
                     "plan_recipe": o.recipe, "value": [list(o()[0]), o()[1]]}
    else:
        recipe[m] = {"kind": "vllm" if is_vllm_recipe(o) else repr(o), "value": [list(o()[0]), o()[1]]}
report["recipe"] = recipe

from vllm.model_executor.custom_op import op_registry_oot
oot = op_registry_oot.get("GateLinear")
report["oot_gate_linear"] = None if oot is None else f"{oot.__module__}.{oot.__name__}"

from sparkpair_overlay import plugin
plan = plugin.current_plan()
report["plan"] = None if plan is None else plan.to_json()

# --- a router call: GateLinear built as DeepSeek-V4 builds it (nvidia/model.py: bias=False,
# out_dtype=fp32, no params_dtype -> the model dtype bf16), through the model module's own name.
import tempfile
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
# GateLinear is a ReplicatedLinear: it asks vLLM's TP group for its rank. The platform here
# (no GPU, no vLLM CPU build) names no device type, so the config names CPU.
ctx = set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))); ctx.__enter__()
init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
    distributed_init_method="file://" + tempfile.mktemp(prefix="sparkpair-dist-"))
initialize_model_parallel(1, 1)
GateLinear = mods["vllm.models.deepseek_v4.nvidia.model"].GateLinear
vllm_forward = GateLinear.forward
trace = []
def traced_vllm_forward(self, x):  # vLLM's own forward, run as is; records that it ran
    trace.append("vllm GateLinear.forward")
    return vllm_forward(self, x)
GateLinear.forward = traced_vllm_forward
from sparkpair_overlay.patches import router as router_patch
kernel_calls = []
if router_patch._KERNEL is not None:
    real_kernel = router_patch._KERNEL
    def counted(*a):
        kernel_calls.append(a[0].shape[0])
        return real_kernel(*a)
    router_patch._KERNEL = counted

def build_gate(own_class):
    saved = op_registry_oot.pop("GateLinear", None) if own_class else None
    try:
        torch.set_default_dtype(torch.bfloat16)
        g = GateLinear(input_size=256, output_size=16, bias=False, out_dtype=torch.float32,
                       prefix="model.layers.0.ffn.gate")
    finally:
        torch.set_default_dtype(torch.float32)
        if saved is not None:
            op_registry_oot["GateLinear"] = saved
    with torch.no_grad():
        g.weight.copy_(torch.randn(16, 256, generator=torch.Generator().manual_seed(1)).to(g.weight.dtype))
    g.quant_method.process_weights_after_loading(g)  # what vLLM's loader does after loading
    return g

gate, twin = build_gate(False), build_gate(True)
x = torch.randn(5, 256, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
y, b = gate(x)
trace_patched = list(trace); trace.clear()
y_twin, _ = twin(x)
d = getattr(gate, "sparkpair_router", None)
report["router"] = {
    "class": f"{type(gate).__module__}.{type(gate).__name__}",
    "isinstance_gate_linear": isinstance(gate, GateLinear),
    "weight_dtype": str(gate.weight.dtype), "out_dtype": str(y.dtype), "bias": b,
    "decision": None if d is None else [d.path, d.max_m],
    "trace": trace_patched, "kernel_calls": kernel_calls,
    "equals_vllm_class_same_process": bool(torch.equal(y, y_twin)),
}

# --- an o_proj call through the o_proj module's own name, with the recipe vLLM's (possibly
# patched) compute_fp8_einsum_recipe gives the attention layer, at DSv4-Flash TP=2 shapes
# (G=4 groups, R=4096, D=1024), T=2 tokens, CPU tensors.
op = mods["vllm.models.deepseek_v4.nvidia.ops.o_proj"]
rcp, tma = mods["vllm.models.deepseek_v4.nvidia.flashmla"].compute_fp8_einsum_recipe()
T, G, R, D = 2, 4, 4096, 1024
a = torch.zeros(T, G, R, dtype=torch.float8_e4m3fn)
w = torch.zeros(G, D, R, dtype=torch.float8_e4m3fn)
if tma:
    sa, sw = torch.zeros(T, G, R // 512, dtype=torch.int32), torch.zeros(G, D, R // 512, dtype=torch.int32)
else:
    sa, sw = torch.ones(T, G, R // 128), torch.ones(G, D // 128, R // 128)
z = torch.empty(T, G, D, dtype=torch.bfloat16)
fn = op.fp8_einsum
route = fn.route("bhr,hdr->bhd", (a, sa), (w, sw), z, recipe=rcp) if getattr(fn, "sparkpair", False) else None
try:
    fn("bhr,hdr->bhd", (a, sa), (w, sw), z, recipe=rcp)
    outcome = "returned"
except Exception as exc:
    outcome = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
report["o_proj"] = {"recipe": [list(rcp), tma], "route": route, "calls": dict(getattr(fn, "calls", {})),
                    "outcome": outcome}
print("REPORT " + json.dumps(report, default=str))
'''

EINSUM = ("vllm.models.deepseek_v4.nvidia.ops.o_proj", "vllm.utils.deep_gemm",
          "vllm.models.deepseek_v41.nvidia.flash_mla_mega_attn",
          "vllm.model_executor.kernels.linear.mxfp8.deep_gemm")
RECIPE = ("vllm.models.deepseek_v4.nvidia.ops.o_proj", "vllm.models.deepseek_v4.nvidia.flashmla",
          "vllm.models.deepseek_v4.nvidia.flashinfer_sparse", "vllm.models.deepseek_v41.nvidia.flashmla",
          "vllm.models.deepseek_v41.nvidia.flashinfer_sparse")
ORDERS = ("dsv4-first", "plugin-first")
CAPS = ((12, 1), (12, 0), (10, 0), (9, 0))
#: vLLM's own recipe (o_proj.py compute_fp8_einsum_recipe): (1,128,128) fp32 scales for major <= 9,
#: else (1,1,128) packed UE8M0 int32 scales.
VLLM_RECIPE = {12: [[1, 1, 128], True], 10: [[1, 1, 128], True], 9: [[1, 128, 128], False]}
#: DeepGEMM's wrapper in vLLM 0.33 on a machine where the vendored DeepGEMM cannot load.
DEEPGEMM_MISSING = "RuntimeError"


@pytest.fixture(scope="module")
def cases(stack_env: dict[str, str]) -> dict:
    """Every (order, capability) case, run once for the module (a vLLM import is the cost)."""
    out = {}
    for order in ORDERS:
        for cap in CAPS:
            env = dict(stack_env, SPARKPAIR_FAKE_CAPABILITY=f"{cap[0]}.{cap[1]}", SPARKPAIR_PLAN_PATH="")
            out[order, cap] = stacklib.run_report(DRIVER, env, json.dumps({"order": order, "cap": cap}))
    return out


def test_the_consumer_lists_are_the_ones_targets_py_names():
    from sparkpair_overlay import targets

    assert set(EINSUM) == set(targets.FP8_EINSUM_CONSUMERS_REQUIRED + targets.FP8_EINSUM_CONSUMERS_OPTIONAL)
    assert set(RECIPE) == set(targets.RECIPE_CONSUMERS_REQUIRED + targets.RECIPE_CONSUMERS_OPTIONAL)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("cap", CAPS[:2], ids=["12.1", "12.0"])
def test_family_120_binds_every_patched_name_to_the_overlay(cases, order, cap):
    r, err = cases[order, cap]
    if order == "dsv4-first":
        assert set(EINSUM) | set(RECIPE) <= set(r["imported_before_plugins"])
    else:
        assert r["imported_before_plugins"] == []
    plan = r["plan"]
    assert plan["vllm_version"] == stacklib.installed_vllm() and plan["version_verified"]
    assert f"vLLM {stacklib.installed_vllm()}: verified to patch (stack tier" in plan["notes"][-1]
    assert plan["capability"] == list(cap) and plan["o_proj"]["label"] == "triton(1,1,128)"
    # fp8_einsum: one dispatcher in every consumer module, wrapping vLLM's own function (the very
    # object the module held before the plugin ran, in the spawn order).
    for m in EINSUM:
        e = r["einsum"][m]
        assert e == {"kind": "dispatcher", "same_dispatcher": True, "original_is_vllm": True,
                     "original_is_pre_plugin_object": True}, (m, e)
    # compute_fp8_einsum_recipe: the overlay's switch guard over vLLM's own function, which
    # still answers (upstream's (1,1,128) is the plan's recipe).
    for m in RECIPE:
        assert r["recipe"][m] == {"kind": "sparkpair", "original_is_vllm": True, "plan_recipe": None,
                                  "value": VLLM_RECIPE[12]}, (m, r["recipe"][m])
    assert r["oot_gate_linear"] == "sparkpair_overlay.patches.router.SparkpairGateLinear"
    # The router call: our class, the bf16 low-M decision; a CPU tensor goes to vLLM's own
    # forward (our Triton tier takes CUDA tensors only) and gives vLLM's result exactly.
    rt = r["router"]
    assert rt["class"] == "sparkpair_overlay.patches.router.SparkpairGateLinear"
    assert rt["isinstance_gate_linear"] and rt["bias"] is None
    assert rt["weight_dtype"] == "torch.bfloat16" and rt["out_dtype"] == "torch.float32"
    assert rt["decision"] == ["triton-bf16-lowM", 32]
    assert rt["trace"] == ["vllm GateLinear.forward"] and rt["kernel_calls"] == []
    assert rt["equals_vllm_class_same_process"]
    # The o_proj call: the dispatcher sees CPU operands and hands them to vLLM's DeepGEMM wrapper,
    # which fails here (no CUDA for the vendored DeepGEMM), as it would without the overlay.
    op = r["o_proj"]
    assert op["recipe"] == VLLM_RECIPE[12]
    assert op["route"] == [
        "deepgemm", "activation is not on a CUDA device (nor on the CPU under TRITON_INTERPRET=1)"]
    assert op["calls"] == {"deepgemm": 1} and op["outcome"].startswith(DEEPGEMM_MISSING), op
    assert "plan says triton but this fp8_einsum call goes to DeepGEMM" in err


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("cap", CAPS[2:], ids=["10.0", "9.0"])
def test_other_devices_leave_every_name_bound_to_vllm(cases, order, cap):
    r, _ = cases[order, cap]
    plan = r["plan"]
    assert plan["capability"] == list(cap) and plan["o_proj"]["label"] == "upstream"
    assert plan["router"]["bfloat16"]["path"] == "upstream"
    assert all(r["einsum"][m] == {"kind": "vllm"} for m in EINSUM), r["einsum"]
    assert all(r["recipe"][m] == {"kind": "vllm", "value": VLLM_RECIPE[cap[0]]} for m in RECIPE), r["recipe"]
    assert r["oot_gate_linear"] is None
    rt = r["router"]
    assert rt["class"] == "vllm.model_executor.layers.fused_moe.router.gate_linear.GateLinear"
    assert rt["decision"] is None and rt["trace"] == ["vllm GateLinear.forward"]
    assert rt["equals_vllm_class_same_process"]
    op = r["o_proj"]
    assert op["recipe"] == VLLM_RECIPE[cap[0]] and op["route"] is None and op["calls"] == {}
    assert op["outcome"].startswith(DEEPGEMM_MISSING), op

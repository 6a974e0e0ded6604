"""The overlay against the real installed vLLM source, one fresh process per case.

Each case starts a Python process that loads plugins the way vLLM does
(``vllm.plugins.load_general_plugins()``, which honours ``VLLM_PLUGINS``), with the device
capability faked through ``SPARKPAIR_FAKE_CAPABILITY`` (there is no GPU here) or through
vLLM's own ``current_platform``, and reports what really happened to vLLM's modules: which
object each consumer module's ``fp8_einsum`` and ``compute_fp8_einsum_recipe`` is, which
class ``GateLinear(...)`` builds, what a real call through the patched names does, the
plan JSON and the plan line. Nothing of vLLM is mocked; a process per case keeps patched
globals from leaking between cases.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm_real

DRIVER = r'''
import importlib, json, os, sys, types
setup = json.loads(sys.argv[1])
report = {}
import vllm
if setup.get("version"):
    vllm.__version__ = setup["version"]
import importlib.machinery
class VendoredDeepGemm:
    """The image's vLLM (0.33) vendors DeepGEMM at vllm.third_party.deep_gemm; this 0.32 CPU build has
    none, which the overlay's construction check would (rightly) refuse. This finder makes that package
    findable (never imported), as it is in the image."""
    def find_spec(self, name, path=None, target=None):
        if name in ("vllm.third_party", "vllm.third_party.deep_gemm"):
            return importlib.machinery.ModuleSpec(name, None, is_package=True)
        return None
if setup.get("vendored_deepgemm", True):
    sys.meta_path.insert(0, VendoredDeepGemm())
from sparkpair_overlay.targets import (FP8_EINSUM_CONSUMERS_OPTIONAL, FP8_EINSUM_CONSUMERS_REQUIRED,
    RECIPE_CONSUMERS_OPTIONAL, RECIPE_CONSUMERS_REQUIRED, GATE_LINEAR_MODULE)
EINSUM_MODS = FP8_EINSUM_CONSUMERS_REQUIRED + FP8_EINSUM_CONSUMERS_OPTIONAL
RECIPE_MODS = RECIPE_CONSUMERS_REQUIRED + RECIPE_CONSUMERS_OPTIONAL
if setup.get("preimport"):
    # The spawn order (docs/reference/vllm-code-paths.md#plugin-load-order): DSv4 modules are imported
    # before plugins load.
    for m in EINSUM_MODS + RECIPE_MODS + (GATE_LINEAR_MODULE,):
        importlib.import_module(m)
if setup.get("platform_cap"):
    # Fake the device the way a real GB10 reports it: a CUDA platform with capability 12.1.
    # Done after the imports above: some vLLM modules probe CUDA-only ops at import time.
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability
    cap = DeviceCapability(*setup["platform_cap"])
    cls = type(current_platform)
    cls.get_device_capability = classmethod(lambda c, device_id=0: cap)
    cls.is_cuda = classmethod(lambda c: True)
try:
    import sparkpair_overlay.kernels.router_gemm, sparkpair_overlay.kernels.fp8_einsum  # noqa
    report["kernels_import_error"] = None
except Exception as exc:
    report["kernels_import_error"] = f"{type(exc).__name__}: {exc}"

from vllm.plugins import load_general_plugins
load_general_plugins()
load_general_plugins()  # vLLM's own guard
import sparkpair_overlay
from sparkpair_overlay import plugin
if plugin.current_plan() is not None:
    sparkpair_overlay.register()  # our guard: a second call changes nothing

import torch
from vllm.model_executor.layers.fused_moe.router.gate_linear import GateLinear

def einsum_state():
    objs = {m: importlib.import_module(m).fp8_einsum for m in EINSUM_MODS}
    first = objs[EINSUM_MODS[0]]
    kinds = {m: ("dispatcher" if getattr(o, "sparkpair", False) else
                 "vllm" if isinstance(o, types.FunctionType) and o.__module__ == "vllm.utils.deep_gemm"
                 and o.__name__ == "fp8_einsum" else repr(o)) for m, o in objs.items()}
    orig = getattr(first, "original", None)
    return {"kinds": kinds, "same_object": all(o is first for o in objs.values()),
            "original_is_vllm": orig is not None and orig.__module__ == "vllm.utils.deep_gemm"
            and isinstance(orig, types.FunctionType)}

def recipe_state():
    objs = {m: importlib.import_module(m).compute_fp8_einsum_recipe for m in RECIPE_MODS}
    out = {}
    for m, o in objs.items():
        if getattr(o, "sparkpair", False) and o.recipe is None:
            # the switch guard over vLLM's own answer (not called: vLLM's asks for a CUDA device)
            vllm_mod = "vllm.models.deepseek_v4.nvidia.ops.o_proj"
            out[m] = {"patched": True, "value": None, "original_is_vllm": o.original.__module__ == vllm_mod}
        elif getattr(o, "sparkpair", False):
            try:  # the attention __init__'s call: the construction check runs first
                out[m] = {"patched": True, "value": [list(o()[0]), o()[1]], "value_64": list(o(64)[0])}
            except Exception as exc:
                out[m] = {"patched": True, "refused": f"{type(exc).__name__}: {exc}"}
        else:
            out[m] = {"patched": False,
                      "is_vllm": o.__module__ == "vllm.models.deepseek_v4.nvidia.ops.o_proj"}
    return out

def init_dist():
    # GateLinear is a ReplicatedLinear: it asks vLLM's TP group for its rank (linear.py:300).
    import tempfile
    from vllm.config import VllmConfig, set_current_vllm_config
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    ctx = set_current_vllm_config(VllmConfig())
    ctx.__enter__()
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
        distributed_init_method="file://" + tempfile.mktemp(prefix="sparkpair-dist-"))
    initialize_model_parallel(1, 1)

init_dist()

from vllm.model_executor.custom_op import op_registry_oot

def build_gate(dtype, w, own_class):
    """GateLinear(...) as vLLM resolves it (ours when registered), or vLLM's own class."""
    saved = op_registry_oot.pop("GateLinear", None) if own_class else None
    try:
        g = GateLinear(64, 8, bias=False, out_dtype=torch.float32, params_dtype=dtype)
    finally:
        if saved is not None:
            op_registry_oot["GateLinear"] = saved
    with torch.no_grad():
        g.weight.copy_(w)
    g.quant_method.process_weights_after_loading(g)  # what vLLM's loader does (CPU gemm setup)
    return g

# Relative max error of the CPU forward vs an fp64 reference: a bf16 weight runs a bf16 GEMM
# (8-bit significand: 2**-7 leaves room for rounding of the inputs' products and the output);
# an fp32 weight runs an fp32 GEMM over K=64 (1e-5).
GATE_TOL = {torch.bfloat16: 2**-7, torch.float32: 1e-5}

def gate_state():
    torch.manual_seed(0)
    res = {}
    for dtype in (torch.bfloat16, torch.float32):
        w = torch.randn(8, 64).to(dtype)
        x = torch.randn(3, 64, dtype=torch.bfloat16)
        ref = x.double() @ w.double().T
        g, twin = build_gate(dtype, w, False), build_gate(dtype, w, True)
        try:
            y, bias = g(x)
            y_twin, _ = twin(x)
        except Exception as exc:  # a faked CUDA platform sends CPU tensors down CUDA-only tiers
            res[str(dtype)] = {"class": type(g).__name__, "forward_error": f"{type(exc).__name__}: {exc}"}
            continue
        d = getattr(g, "sparkpair_router", None)
        err = float((y.double() - ref).abs().max() / ref.abs().max())
        res[str(dtype)] = {"class": type(g).__name__, "module": type(g).__module__,
                           "isinstance": isinstance(g, GateLinear), "decision": d and [d.path, d.max_m],
                           "twin_class": type(twin).__name__,
                           # the same CPU code in the same process: the overlay changed nothing
                           "cpu_forward_equals_vllm": bool(torch.equal(y, y_twin))
                           and y.dtype == torch.float32,
                           "rel_err_vs_fp64": err, "within_tol": err <= GATE_TOL[dtype],
                           "bias": bias}
    return res

report["einsum"] = einsum_state()
report["recipe"] = recipe_state()
report["gate"] = gate_state()

# A real call through the patched name, with CPU tensors: the dispatcher must hand it to
# vLLM's original wrapper (which then fails: no DeepGEMM on this machine).
op = importlib.import_module("vllm.models.deepseek_v4.nvidia.ops.o_proj")
x = torch.zeros(2, 4, 512, dtype=torch.float8_e4m3fn); sa = torch.zeros(2, 4, 1, dtype=torch.int32)
w = torch.zeros(4, 256, 512, dtype=torch.float8_e4m3fn); sw = torch.zeros(4, 256, 1, dtype=torch.int32)
z = torch.empty(2, 4, 256, dtype=torch.bfloat16)
try:
    op.fp8_einsum("bhr,hdr->bhd", (x, sa), (w, sw), z, recipe=(1, 1, 128))
    report["call"] = "returned"
except Exception as exc:
    report["call"] = f"{type(exc).__name__}: {exc}"
report["call_routes"] = dict(getattr(op.fp8_einsum, "calls", {}))

from sparkpair_overlay import plugin
plan = plugin.current_plan()
report["plan"] = None if plan is None else plan.to_json()
if plan is not None and plan.patches_router:
    from sparkpair_overlay.patches import router
    from sparkpair_overlay.patches import o_proj as o_proj_patch
    # Idempotent re-application, then a full restore to vLLM's own objects.
    before = router.registered_class()
    router.apply(plan, object())
    report["reapply_same_class"] = router.registered_class() is before
    disp = op.fp8_einsum
    o_proj_patch.apply(plan.o_proj, plan.capability, None, plan.o_proj.patch_recipe)
    report["reapply_same_dispatcher"] = op.fp8_einsum is disp
    router.restore(); o_proj_patch.restore()
    report["restored_einsum"] = einsum_state()
    report["restored_recipe"] = recipe_state()
    report["restored_gate_class"] = type(GateLinear(64, 8, bias=False, out_dtype=torch.float32)).__name__
if setup.get("fork"):
    # A fork()ed child inherits vLLM's plugins_loaded guard and never calls register();
    # the overlay's at-fork hook must log the plan line there once.
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        sys.stderr.flush()
        os._exit(0)
    os.waitpid(child, 0)
    report["pids"] = {"parent": os.getpid(), "child": child}
path = os.environ.get("SPARKPAIR_PLAN_PATH")
report["plan_file"] = json.loads(open(path).read()) if path and os.path.exists(path) else None
print("REPORT " + json.dumps(report, default=str))
'''


def run_case(tmp_path: Path, env: dict[str, str], **setup: object) -> tuple[dict, str]:
    """Run the driver in a fresh interpreter; return (report, stderr)."""
    plan_path = tmp_path / "plan.json"
    full = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_") and k != "VLLM_PLUGINS"}
    full.update({"SPARKPAIR_PLAN_PATH": str(plan_path), "VLLM_CONFIGURE_LOGGING": "1"})
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER, json.dumps(setup)],
        env=full, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))
    return json.loads(line[len("REPORT "):]), proc.stderr


def plan_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if "sparkpair overlay plan:" in ln]


def assert_untouched(r: dict) -> None:
    """vLLM's own objects everywhere: fp8_einsum, compute_fp8_einsum_recipe, GateLinear."""
    assert set(r["einsum"]["kinds"].values()) == {"vllm"}, r["einsum"]
    assert r["einsum"]["same_object"]
    assert all(v == {"patched": False, "is_vllm": True} for v in r["recipe"].values()), r["recipe"]
    for g in r["gate"].values():
        assert g["class"] == "GateLinear" and g["module"].startswith("vllm."), g
        assert g["decision"] is None and g["cpu_forward_equals_vllm"] and g["within_tol"], g
    assert r["call"].startswith("RuntimeError"), r["call"]  # vLLM's wrapper: DeepGEMM missing here
    assert r["call_routes"] == {}


def assert_patched(r: dict, *, recipe: list | None) -> None:
    assert set(r["einsum"]["kinds"].values()) == {"dispatcher"}, r["einsum"]
    assert r["einsum"]["same_object"] and r["einsum"]["original_is_vllm"]
    for g in r["gate"].values():
        assert g["class"] == "SparkpairGateLinear" and g["isinstance"], g
        # CPU tensors never reach Triton: super().forward ran vLLM's F.linear tier.
        assert g["twin_class"] == "GateLinear" and g["cpu_forward_equals_vllm"] and g["within_tol"], g
        assert g["bias"] is None, g
    assert r["gate"]["torch.bfloat16"]["decision"][0] == "triton-bf16-lowM"
    assert r["gate"]["torch.float32"]["decision"] == ["triton-fp32-accurate", None]
    # The dispatcher sent the CPU call to vLLM's original, which raised its own error.
    assert r["call_routes"] == {"deepgemm": 1}
    assert r["call"].startswith("RuntimeError"), r["call"]
    for m, v in r["recipe"].items():
        if recipe is None:  # vLLM's recipe, behind the overlay's switch guard
            assert v == {"patched": True, "value": None, "original_is_vllm": True}, (m, v)
        else:
            assert v["patched"] and v["value"] == [recipe, recipe == [1, 1, 128]], (m, v)
    assert r["reapply_same_class"] and r["reapply_same_dispatcher"]
    assert set(r["restored_einsum"]["kinds"].values()) == {"vllm"}
    assert all(not v["patched"] for v in r["restored_recipe"].values())
    assert r["restored_gate_class"] == "GateLinear"


def assert_plan(r: dict, stderr: str, *, router: str, o_proj: str, cap: str) -> None:
    lines = plan_lines(stderr)
    assert len(lines) == 1, lines
    assert f"o_proj={o_proj} " in lines[0] and f"router={router} " in lines[0], lines[0]
    assert f"cap {cap}" in lines[0] and "vllm 0.32.0" in lines[0]
    assert r["plan_file"] == r["plan"], "the plan JSON on disk is not the process's plan"
    assert r["plan_file"]["line"] in lines[0]


def _kernels_ok(r: dict) -> bool:
    return r["kernels_import_error"] is None


FAMILY_120_PATCHED_ROUTER = "bf16:triton-bf16-lowM(M<=32),fp32:triton-fp32-accurate"


def test_gb10_12_1_patches_land_even_when_dsv4_modules_were_imported_first(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.1"}, preimport=True)
    if not _kernels_ok(r):
        # Missing kernels: the plan falls back to upstream and says why; nothing lands.
        assert_untouched(r)
        assert r["kernels_import_error"].split(":")[0] in r["plan"]["o_proj"]["reason"]
        return
    assert_patched(r, recipe=None)
    assert_plan(r, err, router=FAMILY_120_PATCHED_ROUTER, o_proj="triton(1,1,128)",
                cap="12.1 via SPARKPAIR_FAKE_CAPABILITY")
    # The dispatcher warned (once) that a call the plan wanted on Triton went to DeepGEMM.
    assert "activation is not on a CUDA device" in err


def test_rtx_12_0_with_sm90_recipe_patches_compute_fp8_einsum_recipe_everywhere(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.0", "SPARKPAIR_O_PROJ_RECIPE": "1,128,128"})
    if not _kernels_ok(r):
        assert_untouched(r)
        return
    assert_patched(r, recipe=[1, 128, 128])
    assert_plan(r, err, router=FAMILY_120_PATCHED_ROUTER, o_proj="triton(1,128,128)",
                cap="12.0 via SPARKPAIR_FAKE_CAPABILITY")
    assert r["plan"]["o_proj"]["patch_recipe"] is True


def test_gb10_seen_through_vllms_own_current_platform(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_O_PROJ": "deepgemm"}, platform_cap=[12, 1], preimport=True)
    assert r["plan"]["capability"] == [12, 1] and r["plan"]["capability_source"] == "platform"
    if r["kernels_import_error"] is None:
        assert {g["class"] for g in r["gate"].values()} == {"SparkpairGateLinear"}
    assert r["plan"]["o_proj"]["backend"] == "deepgemm"
    assert set(r["einsum"]["kinds"].values()) == {"dispatcher"} and r["einsum"]["original_is_vllm"]
    assert r["call_routes"] == {"deepgemm": 1} and r["call"].startswith("RuntimeError")
    assert "activation is not on a CUDA device" not in err  # deepgemm plan: no Triton was wanted
    lines = plan_lines(err)
    assert len(lines) == 1 and "o_proj=deepgemm(1,1,128)" in lines[0] and "cap 12.1," in lines[0]


@pytest.mark.parametrize("cap", ["10.0", "9.0", "cpu", None])
def test_other_devices_leave_vllm_untouched(tmp_path, cap):
    env = {} if cap is None else {"SPARKPAIR_FAKE_CAPABILITY": cap}
    r, err = run_case(tmp_path, env)
    assert_untouched(r)
    shown = "cpu" if cap in (None, "cpu") else cap
    if cap is not None:
        shown += " via SPARKPAIR_FAKE_CAPABILITY"
    assert_plan(r, err, router="bf16:upstream,fp32:upstream", o_proj="upstream", cap=shown)


def test_upstream_overrides_leave_vllm_untouched_on_gb10(tmp_path):
    """fp8_einsum and GateLinear stay vLLM's own; only the construction check wraps vLLM's
    compute_fp8_einsum_recipe (a switch can break vLLM's own o_proj too), answering vLLM's recipe."""
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.1", "SPARKPAIR_ROUTER": "upstream",
                                 "SPARKPAIR_O_PROJ": "upstream"}, preimport=True)
    guarded = {"patched": True, "value": None, "original_is_vllm": True}
    assert all(v == guarded for v in r["recipe"].values()), r["recipe"]
    assert_untouched(dict(r, recipe={m: {"patched": False, "is_vllm": True} for m in r["recipe"]}))
    assert_plan(r, err, router="bf16:upstream,fp32:upstream", o_proj="upstream",
                cap="12.1 via SPARKPAIR_FAKE_CAPABILITY")
    assert "SPARKPAIR_O_PROJ=upstream" in r["plan"]["o_proj"]["reason"]


def test_vllm_plugins_empty_loads_nothing(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.1", "VLLM_PLUGINS": ""})
    assert_untouched(r)
    assert r["plan"] is None and r["plan_file"] is None
    assert plan_lines(err) == []


def test_unverified_vllm_on_family_120_stops_at_plugin_load_naming_version_and_override(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_") and k != "VLLM_PLUGINS"}
    env["SPARKPAIR_FAKE_CAPABILITY"] = "12.1"
    code = ("import vllm; vllm.__version__ = '0.31.9'\n"
            "from vllm.plugins import load_general_plugins; load_general_plugins()\nprint('LOADED')")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and "LOADED" not in proc.stdout
    assert "UnverifiedVllm" in proc.stderr and "vLLM 0.31.9 is not a verified version" in proc.stderr
    assert "SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1" in proc.stderr and "family 120" in proc.stderr


def test_unverified_vllm_elsewhere_patches_nothing_and_names_the_version(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "9.0"}, version="0.31.9")
    assert_untouched(r)
    assert "vLLM 0.31.9 is not a verified version" in err and "patching nothing" in err
    assert r["plan"]["version_verified"] is False and r["plan"]["patching_allowed"] is False
    assert "0.31.9 is not verified" in r["plan"]["o_proj"]["reason"]


def test_unverified_version_with_override_patches_and_still_logs_the_error(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.1", "SPARKPAIR_ALLOW_UNVERIFIED_VLLM": "1",
                                 "SPARKPAIR_O_PROJ": "deepgemm"}, version="0.99.0")
    assert "vLLM 0.99.0 is not a verified version" in err and "patching anyway" in err
    assert set(r["einsum"]["kinds"].values()) == {"dispatcher"}


def test_bad_setting_stops_vllm_with_a_named_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_")}
    env["SPARKPAIR_O_PROJ"] = "cutlass"
    proc = subprocess.run(
        [sys.executable, "-c", "from vllm.plugins import load_general_plugins; load_general_plugins()"],
        env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0
    want = "SPARKPAIR_O_PROJ='cutlass' is not valid; wanted one of auto, deepgemm, triton, upstream"
    assert want in proc.stderr


def test_forked_child_logs_the_plan_line_once(tmp_path):
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "9.0"}, fork=True)
    lines = plan_lines(err)
    pids = sorted(int(ln.split(" pid=")[1].split(")")[0]) for ln in lines)
    assert pids == sorted(r["pids"].values()), lines
    assert len({ln.split("sparkpair overlay plan:")[1] for ln in lines}) == 1


DISPATCH_OP_DRIVER = r'''
import json, os, torch
from sparkpair_overlay.kernels.router_gemm import router_gemm
from sparkpair_overlay.patches import router
calls = []
def counted(x, w, planes):  # the real kernel (Triton interpreter on CPU), counted
    calls.append(x.shape[0])
    return router_gemm(x, w, planes)
router._KERNEL = counted
router._register_dispatch_op()
router._register_dispatch_op()  # idempotent
op = torch.ops.sparkpair_overlay.router_gemm_dispatch
# The fake implementation (what torch.compile traces): shape and dtype only, any M.
fake = op(torch.empty(7, 64, dtype=torch.bfloat16, device="meta"),
          torch.empty(16, 64, dtype=torch.bfloat16, device="meta"), 4)
torch.manual_seed(0)
x_small, x_big = torch.randn(3, 64, dtype=torch.bfloat16), torch.randn(9, 64, dtype=torch.bfloat16)
w = torch.randn(16, 64, dtype=torch.bfloat16)
w32 = torch.randn(16, 64, dtype=torch.float32)
small = router._router_gemm_dispatch(x_small, w, 4)
try:  # M > max_m: vLLM's cuBLAS call torch.mm(out_dtype=fp32), which exists only on CUDA
    router._router_gemm_dispatch(x_big, w, 4)
    big = "returned"
except NotImplementedError as exc:
    big = str(exc).splitlines()[0]
acc = router._router_gemm_dispatch(x_big, w32, -1)
print("REPORT " + json.dumps({
    "fake": [list(fake.shape), str(fake.dtype), str(fake.device)],
    "kernel_calls": calls,
    "dtypes": [str(small.dtype), str(acc.dtype)],
    # The op returns exactly the kernel's output (its accuracy is the kernel tests' business).
    "small_is_kernel_output": bool(torch.equal(small, router_gemm(x_small, w))),
    "acc_is_kernel_output": bool(torch.equal(acc, router_gemm(x_big, w32))),
    "big": big,
}))
'''


def test_router_dispatch_op_splits_on_m_at_run_time_and_has_a_fake(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARKPAIR_")}
    env["TRITON_INTERPRET"] = "1"
    proc = subprocess.run([sys.executable, "-c", DISPATCH_OP_DRIVER], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    r = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("REPORT "))[7:])
    assert r["fake"] == [[7, 16], "torch.float32", "meta"]
    # M=3 <= 4 -> our kernel; M=9 > 4 -> vLLM's torch.mm(out_dtype=fp32) (CUDA-only op, so it
    # refuses CPU tensors here); max_m=-1 (fp32 weight) -> our kernel for every M.
    assert r["kernel_calls"] == [3, 9]
    assert r["dtypes"] == ["torch.float32"] * 2
    assert "aten::mm.dtype" in r["big"] and "CPU" in r["big"], r["big"]
    assert r["small_is_kernel_output"] and r["acc_is_kernel_output"], r


def test_probe_results_drive_the_plan_and_the_patches(tmp_path):
    """A probe that found DeepGEMM (1,1,128) wrong and Triton (1,128,128) fastest, and the bf16
    router kernel faster than cuBLAS up to M=8: the recipe is patched everywhere and layers get M<=8."""
    rows_r = [{"path": p, "weight_dtype": "bfloat16", "m": m, "ok": True, "us": us, "shape": [8, 64],
               "layout": "x-bf16-rowmajor/w-bf16-rowmajor"}
              for m, ours, theirs in ((1, 4.0, 9.0), (8, 5.0, 9.0), (32, 14.0, 10.0))
              for p, us in (("triton-bf16-lowM", ours), ("cublas", theirs))]
    rows_o = [{"backend": b, "recipe": rc, "t": t, "ok": ok, "us": us, "weight_layout": "w3-ue8m0-row",
               "act_layout": "a-ue8m0-tma" if rc == [1, 1, 128] else "a-fp32-tma"}
              for t in (1, 32, 2048)
              for b, rc, ok, us in (("deepgemm", [1, 1, 128], t != 32, 5.0),
                                    ("triton", [1, 1, 128], True, 9.0),
                                    ("triton", [1, 128, 128], True, 7.0))]
    switches = {"linear_backend": "auto", "VLLM_USE_DEEP_GEMM": True, "VLLM_USE_DEEP_GEMM_E8M0": True,
                "deepgemm": "vendored", "ckpt_scale": "e8m0"}
    probe = tmp_path / "probe.json"
    probe.write_text(json.dumps({"schema": "sparkpair-probe/2", "capability": [12, 1], "router": rows_r,
                                 "o_proj": rows_o, "switches": switches}))
    r, err = run_case(tmp_path, {"SPARKPAIR_FAKE_CAPABILITY": "12.1", "SPARKPAIR_PROBE_RESULTS": str(probe)})
    if not _kernels_ok(r):
        assert_untouched(r)
        return
    assert r["plan"]["o_proj"]["label"] == "triton(1,128,128)" and r["plan"]["o_proj"]["patch_recipe"]
    assert r["plan"]["router"]["bfloat16"]["max_m"] == 8
    assert r["gate"]["torch.bfloat16"]["decision"] == ["triton-bf16-lowM", 8]  # the layer's (8, 64) shape
    assert all(v["patched"] and v["value"] == [[1, 128, 128], False] for v in r["recipe"].values())
    assert_plan(r, err, router="bf16:triton-bf16-lowM(M<=8),fp32:triton-fp32-accurate",
                o_proj="triton(1,128,128)", cap="12.1 via SPARKPAIR_FAKE_CAPABILITY")

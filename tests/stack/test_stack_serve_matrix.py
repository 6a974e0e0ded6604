"""The serve matrix walked on vLLM 0.33.0's real code: every combination is served on operands its
kernel takes (fp64-correct where our kernel runs) or refused by name at construction.

One process (faked GB10: capability 12.1, Triton's interpreter) runs one case per distinct
(route, activation layout, weight layout) of :func:`sparkpair_overlay.serve_matrix.distinct_layouts`
(every other combination repeats one of those), plus the probe files of issue 30's bars. Per case,
in the order DeepSeek-V4's attention ``__init__`` and vLLM's loader run them:

1. the switches: ``VLLM_USE_DEEP_GEMM``/``VLLM_USE_DEEP_GEMM_E8M0`` in the environment, ``--linear-backend``
   in vLLM's own ``KernelConfig`` (the current vLLM config), a top-level ``deep_gemm`` package on
   ``sys.path`` for the shadowing case; the overlay's plan and patches made by the plugin's own
   ``make_plan``/``_apply_patches`` (``SPARKPAIR_O_PROJ``, ``SPARKPAIR_O_PROJ_RECIPE``,
   ``SPARKPAIR_PROBE_RESULTS``);
2. ``wo_a`` built as ``Fp8LinearMethod.create_weights`` builds it (vLLM's ``create_fp8_weight_parameter``
   / ``create_fp8_scale_parameter``, e8m0 128x128 block scales, ``is_bmm``) with the FP8 block kernel vLLM
   0.33 selects for the switches on family 120 (its class, from vLLM's own kernel lists);
3. the construction check: the real SM120 attention module's ``compute_fp8_einsum_recipe()``; a refusal
   ends the case here, before any weight is read;
4. checkpoint-form weights in, then the kernel's own ``process_weights_after_loading`` (vLLM's);
5. a forward through vLLM's own ``deep_gemm_fp8_o_proj``: its ``fused_inv_rope_fp8_quant`` (interpreter),
   then ``fp8_einsum`` as bound in the o_proj module (the overlay's dispatcher, or vLLM's own for
   ``upstream``), compared with fp64 from the checkpoint's bytes and exponents.

What cannot run on a CPU is stood in for at DeepGEMM's C++ entry points only, each with the host
behaviour of DeepGEMM 2.8.1 (vLLM's vendored copy; docs/reference/vllm-code-paths.md#deepgemm-einsum-checks),
with everything vLLM does around them real: its ``transform_sf_into_required_layout`` (GB10: per-row
broadcast + UE8M0 packing, MN-major, TMA-aligned; fp32 block scales kept with ``disable_ue8m0_cast``) and
its ``fp8_einsum``, which first applies DeepGEMM's host checks to the operands vLLM hands it
(:func:`sparkpair_overlay.o_proj_route.deepgemm_rejects`) and raises on a rejection, then writes the fp64
result. The platform answers are GB10's: ``support_deep_gemm()`` (family 120) and ``has_deep_gemm()``.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict

import pytest
import stacklib
from sparkpair_overlay.deepgemm import deepgemm_unsupported
from sparkpair_overlay.serve_matrix import (
    DEEPGEMM_UNSUPPORTED,
    LINEAR_BACKENDS,
    RECIPE_SM90,
    RECIPE_SM100,
    Switches,
    distinct_layouts,
    linear_outcome,
    serve_verdict,
)
from sparkpair_overlay.versions import release

pytestmark = [pytest.mark.stack, pytest.mark.per_version, pytest.mark.slow]

DRIVER = r'''
import importlib, json, os, sys, tempfile, traceback
setup = json.loads(sys.argv[1])
import torch
import vllm
from vllm.platforms import current_platform, PlatformEnum
from vllm.platforms.interface import DeviceCapability
cap = DeviceCapability(12, 1)
P = type(current_platform)
P.get_device_capability = classmethod(lambda c, device_id=0: cap)
P.support_deep_gemm = classmethod(lambda c: True)  # platforms/cuda.py: family 120 is a DeepGEMM device
import vllm.utils.deep_gemm as dg
dg.has_deep_gemm = lambda: True  # the vendored copy imports on a GPU host
from vllm.plugins import load_general_plugins
load_general_plugins()
from sparkpair_overlay import pair, plugin
from sparkpair_overlay.patches import o_proj as o_proj_patch
from sparkpair_overlay.numerics import decode_ue8m0, pack_ue8m0, rel_fro
from sparkpair_overlay.o_proj_route import act_layout_of, deepgemm_rejects, weight_layout
from sparkpair_overlay.probe import operands as ops
import vllm.model_executor.kernels.linear as lin
from vllm.model_executor.kernels.linear.scaled_mm.ScaledMMLinearKernel import FP8ScaledMMLinearLayerConfig
from vllm.model_executor.layers.quantization.utils.quant_utils import GroupShape, create_fp8_quant_key
from vllm.model_executor.layers.quantization.utils.fp8_utils import (create_fp8_scale_parameter,
    create_fp8_weight_parameter)
from vllm.model_executor.parameter import BlockQuantScaleParameter
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.config.kernel import KernelConfig
from vllm.distributed import init_distributed_environment, initialize_model_parallel
with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
    init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
        distributed_init_method="file://" + tempfile.mktemp(prefix="sparkpair-dist-"))
    initialize_model_parallel(1, 1)
fis = importlib.import_module("vllm.models.deepseek_v4.nvidia.flashinfer_sparse")
op = importlib.import_module("vllm.models.deepseek_v4.nvidia.ops.o_proj")

G, HPG, HEAD, ROPE, D, T = 2, 1, 512, 64, 256, 3
R = HPG * HEAD

# ---- DeepGEMM's C++ entry points, stood in with DeepGEMM 2.8.1's host behaviour on arch 12
sys.path.insert(0, setup["stack_dir"])
from stacklib import deepgemm_transform_stand_in
handed = []
transform_stand_in = deepgemm_transform_stand_in(handed)
reached = []
def fp8_einsum_stand_in(expr, a, b, d, c=None, recipe=(1, 128, 128)):
    why = deepgemm_rejects(a, b, d, recipe)
    reached.append({"recipe": list(recipe), "rejected": why, "act": act_layout_of(a[0], a[1]),
                    "weight": weight_layout(b[0], b[1], a[0].shape[1], d.shape[2])})
    if why is not None:
        raise RuntimeError(f"DeepGEMM host check: {why}")
    (x, sa), (w, sw) = a, b
    r = x.shape[-1]
    sa_f = ops._decode_act(sa, r).double().repeat_interleave(128, -1)
    if sw.dtype == torch.int32:
        sw_f = ops._decode_act(sw, r).double().repeat_interleave(128, -1)
    else:
        sw_f = sw.double().repeat_interleave(128, 1).repeat_interleave(128, -1)
    d.copy_(torch.einsum("tgr,gdr->tgd", x.double() * sa_f, w.double() * sw_f).to(d.dtype))
dg._transform_sf_into_required_layout_impl = transform_stand_in
dg._fp8_einsum_impl = fp8_einsum_stand_in
dg._fp8_gemm_nt_impl = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("fp8_gemm_nt is not run here"))

ext_dir = tempfile.mkdtemp(prefix="sparkpair-ext-dg-")
os.makedirs(os.path.join(ext_dir, "deep_gemm"))
open(os.path.join(ext_dir, "deep_gemm", "__init__.py"), "w").write('__version__ = "9.9.9"\n')

w2d, exps = ops.checkpoint_wo_a(G, D, R, seed=3)
kc = FP8ScaledMMLinearLayerConfig(
    weight_quant_key=create_fp8_quant_key(static=True, group_shape=GroupShape(128, 128)),
    activation_quant_key=create_fp8_quant_key(static=False, group_shape=GroupShape(1, 128)),
    weight_shape=(G * D, R), input_dtype=torch.bfloat16, out_dtype=torch.bfloat16)

class HideVendoredDeepGemm:  # "no DeepGEMM installed": find_spec of vLLM's copy fails as when it is absent
    def find_spec(self, name, path=None, target=None):
        if name in ("vllm.third_party.deep_gemm", "deep_gemm"):
            raise ModuleNotFoundError(name)
        return None
hider = HideVendoredDeepGemm()

OWNER = setup["o_proj_owner"]
def build_wo_a():
    """The smallest part that owns the o_proj in this release: a bare module handed to
    deep_gemm_fp8_o_proj (0.33), or 0.34's DeepseekV4GroupedWoA itself (its grouped_forward runs it)."""
    if OWNER == "wo_a.grouped_forward":
        from vllm.models.deepseek_v4.common.grouped_wo_a import DeepseekV4GroupedWoA
        layer = DeepseekV4GroupedWoA(R, G * D, n_groups=G, bias=False, quant_config=None, return_bias=False,
                                     prefix="layers.0.attn.wo_a")
        del layer.weight  # its unquantized weight, replaced by the FP8 parameters Fp8LinearMethod creates
        assert layer.n_local_groups == G
    else:
        layer = torch.nn.Module()
    layer.register_parameter("weight", create_fp8_weight_parameter(G * D, R, lambda *a: None))
    layer.register_parameter("weight_scale_inv", create_fp8_scale_parameter(
        BlockQuantScaleParameter, [G * D], R, [128, 128], lambda *a: None, scale_dtype=torch.float8_e8m0fnu))
    layer.weight_block_size = [128, 128]
    layer.input_scale = None
    layer.is_bmm, layer.bmm_batch_size = True, G
    return layer

def build_kernel(kernel_name):
    kernel = getattr(lin, kernel_name)(kc)
    if kernel_name == "DeepGemmFp8BlockScaledMMKernel":  # its GB10 answers (cached at __init__)
        kernel.is_deep_gemm_supported = dg.is_deep_gemm_supported()
        kernel.use_deep_gemm_e8m0 = dg.is_deep_gemm_e8m0_used()
    return kernel

BASE_CUDA_HOME = os.environ.get("CUDA_HOME", "")
BASE_ENV = {k: v for k, v in os.environ.items()
            if not k.startswith("SPARKPAIR_") and not k.startswith("VLLM_USE_DEEP_GEMM")}
results = []
for case in setup["cases"]:
    rec = {"id": case["id"]}
    results.append(rec)
    handed.clear(); reached.clear()
    env = dict(BASE_ENV)
    env.update(case["env"], SPARKPAIR_FAKE_CAPABILITY="12.1", SPARKPAIR_PLAN_PATH="")
    for k in ("VLLM_USE_DEEP_GEMM", "VLLM_USE_DEEP_GEMM_E8M0", "CUDA_HOME"):
        if k in env or k.startswith("VLLM_"):
            os.environ[k] = env.get(k, "1")
    if case.get("external"):
        sys.path.insert(0, ext_dir)
    if case.get("no_deepgemm"):
        sys.meta_path.insert(0, hider)
    dg.has_deep_gemm = (lambda: False) if case.get("no_deepgemm") else (lambda: True)
    importlib.invalidate_caches()
    dg.is_deep_gemm_supported.cache_clear(); dg.is_deep_gemm_e8m0_used.cache_clear()
    try:
        cfg = VllmConfig(device_config=DeviceConfig(device="cpu"),
                         kernel_config=KernelConfig(linear_backend=case["linear"]))
        with set_current_vllm_config(cfg):
            # vLLM's own narrowing of the CUDA FP8 block kernels for this --linear-backend
            rec["vllm_kernels"] = [k.__name__ for k in lin._filter_kernels_by_backend(
                case["linear"], lin._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA])]
            o_proj_patch.restore(); pair.reset()
            plan = plugin._apply_patches(plugin.make_plan(env))
            rec["plan"] = plan.o_proj.label
            rec["vllm_deepgemm_supported"] = bool(dg.is_deep_gemm_supported())  # this release's own answer
            rec["overlay_switches"] = o_proj_patch.served_switches(case["linear"])[0].to_json()
            layer = build_wo_a()
            try:
                recipe, tma = fis.compute_fp8_einsum_recipe()
            except o_proj_patch.SwitchRefused as exc:
                rec["refused"] = str(exc)
                continue
            rec["recipe"] = [list(recipe), tma]
            kernel = build_kernel(case["kernel"])
            with torch.no_grad():
                layer.weight.copy_(w2d); layer.weight_scale_inv.copy_(exps.view(torch.float8_e8m0fnu))
            kernel.process_weights_after_loading(layer)  # vLLM's post-processing for this kernel
            rec["handed_to_transform"] = list(handed)
            rec["weight_layout"] = weight_layout(layer.weight, layer.weight_scale_inv, G, D)
            gen = torch.Generator().manual_seed(5)
            o = (torch.randn(T, G * HPG, HEAD, generator=gen) * 2).to(torch.bfloat16)
            positions = torch.tensor([0, 5, 17])
            seen = {}
            disp = op.fp8_einsum
            if getattr(disp, "sparkpair", False) and disp.kernel is not None:
                inner = disp.kernel
                def recording(eq, a, b, out, recipe, inner=inner):
                    seen.update(a=a, w=b, recipe=list(recipe))
                    return inner(eq, a, b, out, recipe=recipe)
                disp.kernel = recording
            quant = op.fused_inv_rope_fp8_quant
            def quant_rec(*a, **k):
                res = quant(*a, **k)
                seen["quant"] = res
                return res
            op.fused_inv_rope_fp8_quant = quant_rec
            shape = dict(n_groups=G, heads_per_group=HPG, nope_dim=HEAD - ROPE, rope_dim=ROPE, o_lora_rank=D,
                         einsum_recipe=tuple(recipe), tma_aligned_scales=tma)
            try:
                if OWNER == "wo_a.grouped_forward":
                    z = layer.grouped_forward(o, positions, ops.rope_cache(64), **shape)
                else:
                    z = op.deep_gemm_fp8_o_proj(o, positions, ops.rope_cache(64), layer, lambda t: t, **shape)
            finally:
                op.fused_inv_rope_fp8_quant = quant
            a, sa = seen["quant"]
            ref = ops.reference(a, sa, w2d, exps, G)
            ours = getattr(disp, "sparkpair", False)
            rec["route"] = dict(getattr(disp, "calls", {})) if ours else {"vllm": 1}
            rec["act_layout"] = act_layout_of(a, sa)
            rec["kernel_recipe"] = seen.get("recipe")
            rec["kernel_weight_shape"] = list(seen["w"][0].shape) if "w" in seen else None
            rec["reached_deepgemm"] = list(reached)
            rec["err"] = rel_fro(z.view(T, G, D), ref)
            rec["finite"] = bool(torch.isfinite(z.float()).all())
            rec["served"] = True
    except Exception as exc:
        rec["error"] = f"{type(exc).__name__}: {exc}"
        rec["trace"] = traceback.format_exc()[-1500:]
    finally:
        os.environ["CUDA_HOME"] = BASE_CUDA_HOME
        if case.get("external"):
            sys.path.remove(ext_dir)
        if case.get("no_deepgemm"):
            sys.meta_path.remove(hider)
        importlib.invalidate_caches()
        if getattr(op.fp8_einsum, "sparkpair", False):
            op.fp8_einsum.calls.clear()
print("REPORT " + json.dumps(results))
'''

TOL = 1e-2
W_FOR_DECISION = {"deep_gemm": "w3-ue8m0-row", "cutlass": "w2-e8m0-block", "b12x": "w2-fp32-block",
                  "triton": "w2-e8m0-block"}


def _case_env(s: Switches, backend: str, recipe) -> dict[str, str]:
    env = {"VLLM_USE_DEEP_GEMM": str(int(s.use_deep_gemm)),
           "VLLM_USE_DEEP_GEMM_E8M0": str(int(s.use_deep_gemm_e8m0)), "SPARKPAIR_O_PROJ": backend}
    if backend != "upstream":
        env["SPARKPAIR_O_PROJ_RECIPE"] = ",".join(map(str, recipe))
    return env


def _representatives() -> dict[str, tuple[Switches, str, tuple[int, int, int]]]:
    """One combination per distinct (route, act, weight): the first in matrix order, preferring the
    DeepSeek-V4-Flash checkpoint (e8m0 scales) and vLLM's vendored DeepGEMM where the key allows it."""
    from sparkpair_overlay.serve_matrix import matrix

    keys = distinct_layouts()
    combos = sorted(matrix(),
                    key=lambda c: (c.switches.ckpt_scale != "e8m0", c.switches.deepgemm != "vendored",
                                   c.switches.deepgemm_unsupported is not None))
    out = {}
    for c in combos:
        v = c.verdict
        key = (v.route or "refused", v.act, v.weight)
        name = "/".join(str(k) for k in key)
        if key in keys and name not in out:
            out[name] = (c.switches, c.backend, c.recipe)
    assert len(out) == len(keys)
    return out


def _probe_file(tmp_path, name: str, rows: list[dict], linear: str, decision: dict | None = None,
                identity: str | None = None, e8m0: bool = True) -> str:
    p = tmp_path / f"probe-{name}.json"
    sw = Switches(linear, True, e8m0, "external" if identity else "vendored").to_json()
    p.write_text(json.dumps({"schema": "sparkpair-probe/2", "capability": [12, 1],
                             "vllm": stacklib.installed_vllm(),
                             "switches": sw, "deepgemm_identity": identity, "o_proj": rows,
                             "o_proj_decision": decision}))
    return str(p)


def _rows(backend: str, recipe, weight: str, us: float) -> list[dict]:
    act = "a-ue8m0-tma" if tuple(recipe) == RECIPE_SM100 else "a-fp32-tma"
    return [{"backend": backend, "recipe": list(recipe), "t": t, "ok": True, "us": us,
             "weight_layout": weight, "act_layout": act, "err": 1e-3} for t in (1, 36)]


def _cases(tmp_path) -> tuple[list[dict], dict[str, dict]]:
    cases, expect = [], {}
    for cid, (s, backend, recipe) in _representatives().items():
        v = serve_verdict(s, backend, recipe)
        cases.append({"id": cid, "env": _case_env(s, backend, recipe), "linear": s.linear_backend,
                      "kernel": linear_outcome(s).kernel, "external": s.deepgemm == "external",
                      "no_deepgemm": s.deepgemm == "none"})
        expect[cid] = {"served": v.served and not v.needs_evidence, "route": v.route, "weight": v.weight,
                       "act": v.act, "why": v.why, "needs_evidence": v.needs_evidence}
    # a top-level deep_gemm with the probe's evidence taken with it: served
    ident = "deep_gemm 9.9.9"
    for backend, recipe in (("triton", RECIPE_SM100), ("deepgemm", RECIPE_SM100)):
        probe = _probe_file(tmp_path, f"ext-{backend}", _rows(backend, recipe, "w3-ue8m0-row", 5.0), "auto",
                            identity=ident)
        cid = f"external/{backend}/with-evidence"
        env = {**_case_env(Switches(), backend, recipe), "SPARKPAIR_PROBE_RESULTS": probe}
        cases.append({"id": cid, "env": env, "linear": "auto", "kernel": "DeepGemmFp8BlockScaledMMKernel",
                      "external": True})
        expect[cid] = {"served": True, "route": "triton" if backend == "triton" else "deepgemm",
                       "weight": None, "act": "a-ue8m0-tma"}
    # issue 30, case 1: a probe file that found DeepGEMM (1,128,128) correct and fastest on the served
    # per-row int32 layout; auto never picks it there (the matrix refuses it); forced, it is refused by name
    rows = _rows("deepgemm", RECIPE_SM90, "w3-ue8m0-row", 2.0) + _rows(
        "triton", RECIPE_SM100, "w3-ue8m0-row", 9.0)
    probe = _probe_file(tmp_path, "dg128", rows, "auto")
    cases.append({"id": "probe/deepgemm-1,128,128/auto", "env": {"SPARKPAIR_PROBE_RESULTS": probe},
                  "linear": "auto", "kernel": "DeepGemmFp8BlockScaledMMKernel"})
    expect["probe/deepgemm-1,128,128/auto"] = {"served": True, "route": "triton", "weight": "w3-ue8m0-row",
                                               "act": "a-ue8m0-tma", "plan": "triton(1,1,128)"}
    cases.append({"id": "probe/deepgemm-1,128,128/forced",
                  "env": {"SPARKPAIR_PROBE_RESULTS": probe, "SPARKPAIR_O_PROJ": "deepgemm",
                          "SPARKPAIR_O_PROJ_RECIPE": "1,128,128"},
                  "linear": "auto", "kernel": "DeepGemmFp8BlockScaledMMKernel"})
    expect["probe/deepgemm-1,128,128/forced"] = {"served": False,
                                                 "why_has": "sf.size(-2) == ceil_div(D, 128)"}
    # with VLLM_USE_DEEP_GEMM_E8M0=0 (fp32 block scales) that same choice is DeepGEMM's to serve
    rows = _rows("deepgemm", RECIPE_SM90, "w3-fp32-block", 2.0) + _rows(
        "triton", RECIPE_SM100, "w3-fp32-block", 9.0)
    probe = _probe_file(tmp_path, "dg128-e8m0off", rows, "auto", e8m0=False)
    cid = "probe/deepgemm-1,128,128/e8m0-off"
    cases.append({"id": cid, "env": {"SPARKPAIR_PROBE_RESULTS": probe, "VLLM_USE_DEEP_GEMM_E8M0": "0"},
                  "linear": "auto", "kernel": "DeepGemmFp8BlockScaledMMKernel"})
    expect[cid] = {"served": True, "route": "deepgemm", "weight": "w3-fp32-block", "act": "a-fp32-tma",
                   "plan": "deepgemm(1,128,128)"}
    # issue 30, case 2: a probe that chose each --linear-backend it may pick, served with it
    for lb, weight in W_FOR_DECISION.items():
        dec = {"backend": "triton", "recipe": [1, 1, 128], "weight_layout": weight, "reason": "test"}
        probe = _probe_file(tmp_path, f"lb-{lb}", _rows("triton", RECIPE_SM100, weight, 5.0), lb, dec)
        s = Switches(linear_backend=lb)
        cid = f"probe/linear-backend-{lb}"
        cases.append({"id": cid, "env": {"SPARKPAIR_PROBE_RESULTS": probe}, "linear": lb,
                      "kernel": linear_outcome(s).kernel})
        expect[cid] = {"served": True, "route": "triton", "weight": weight, "act": "a-ue8m0-tma",
                       "plan": "triton(1,1,128)"}
    # a probe decision for the 2-D layout, served with another --linear-backend (the profile's): refused
    dec = {"backend": "triton", "recipe": [1, 1, 128], "weight_layout": "w2-e8m0-block", "reason": "test"}
    probe = _probe_file(tmp_path, "mismatch", _rows("triton", RECIPE_SM100, "w2-e8m0-block", 5.0), "triton",
                        dec)
    cases.append({"id": "probe/decided-on-2d-served-3d", "env": {"SPARKPAIR_PROBE_RESULTS": probe},
                  "linear": "deep_gemm", "kernel": "DeepGemmFp8BlockScaledMMKernel"})
    expect["probe/decided-on-2d-served-3d"] = {"served": False, "why_has": "was not proven on these operands"}
    # DeepGEMM's nvcc, as vLLM itself looks for it (0.34 wants one >= 12.9 and otherwise leaves DeepGEMM
    # as with VLLM_USE_DEEP_GEMM=0; 0.33 does not look): none (an empty CUDA_HOME, really absent), an
    # old one (a script answering 12.8: no older real nvcc ships as a wheel), this venv's real 13.0 one.
    for name, home in _nvcc_homes(tmp_path).items():
        off = deepgemm_unsupported(str(stacklib.installed_vllm()), {"CUDA_HOME": home, "PATH": os.defpath})
        for lb in ("auto", "triton", "deep_gemm"):
            sw = Switches(linear_backend=lb, deepgemm_unsupported=off)
            v = serve_verdict(sw, "triton", RECIPE_SM100)
            cid = f"nvcc-{name}/linear-backend-{lb}"
            cases.append({"id": cid, "env": {**_case_env(sw, "triton", RECIPE_SM100), "CUDA_HOME": home},
                          "linear": lb, "kernel": linear_outcome(sw).kernel, "nvcc": name, "off": off})
            expect[cid] = {"served": v.served, "route": v.route, "weight": v.weight, "act": v.act,
                           "why": v.why}
    return cases, expect


def _nvcc_homes(tmp_path) -> dict[str, str]:
    """CUDA_HOME folders: no toolkit, a toolkit whose nvcc is 12.8, and (where the release's requirements
    install it) the real nvcc 13.0 of this venv."""
    none = tmp_path / "cuda-none"
    none.mkdir(exist_ok=True)
    old = tmp_path / "cuda-12.8"
    (old / "bin").mkdir(parents=True, exist_ok=True)
    nvcc = old / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'nvcc: NVIDIA (R) Cuda compiler driver'\n"
                    "echo 'Cuda compilation tools, release 12.8, V12.8.93'\n")
    nvcc.chmod(0o755)
    homes = {"none": str(none), "old": str(old)}
    if stacklib.image_cuda_home() is not None:
        homes["image"] = str(stacklib.image_cuda_home())
    return homes


def test_every_combination_is_served_correctly_or_refused_by_name_at_construction(stack_env, tmp_path):
    cases, expect = _cases(tmp_path)
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="", SPARKPAIR_FAKE_CAPABILITY="12.1",
               SPARKPAIR_PLAN_PATH="")
    rel = release(str(stacklib.installed_vllm()))
    assert rel is not None
    setup = {"cases": cases, "stack_dir": str(stacklib.REPO / "tests" / "stack"),
             "o_proj_owner": rel.o_proj_owner}
    report, _ = stacklib.run_report(DRIVER, env, json.dumps(setup), timeout=1500)
    by_id = {r["id"]: r for r in report}
    assert set(by_id) == set(expect)
    served_layouts = set()
    for cid, want in expect.items():
        r = by_id[cid]
        # nothing but a serve or a named refusal
        assert "error" not in r, (cid, r.get("error"), r.get("trace"))
        case = next(c for c in cases if c["id"] == cid)
        # the overlay's reading of DeepGEMM's availability is this release's own (is_deep_gemm_supported)
        sw = r["overlay_switches"]
        ours = (sw["VLLM_USE_DEEP_GEMM"] and sw["deepgemm"] in ("vendored", "external")
                and sw["deepgemm_unsupported"] is None)
        assert ours == r["vllm_deepgemm_supported"], (cid, sw, r["vllm_deepgemm_supported"])
        if "nvcc" in case:
            assert sw["deepgemm_unsupported"] == case["off"], (cid, sw)
        if case["kernel"] is not None:  # the kernel is one vLLM's own list keeps for this --linear-backend
            assert case["kernel"] in r["vllm_kernels"], (cid, r["vllm_kernels"])
        if not want["served"]:
            assert "refused" in r, (cid, r)
            msg = r["refused"]
            assert msg.startswith("sparkpair overlay: refusing to build DeepSeek-V4 attention: "), msg
            assert "wanted" in msg, msg  # the way out is named
            if "why" in want and not want.get("needs_evidence"):
                assert want["why"] in msg, (cid, msg)
            if "why_has" in want:
                assert want["why_has"] in msg, (cid, msg)
            continue
        assert r.get("served"), (cid, r)
        assert r["finite"] and r["err"] <= TOL, (cid, r["err"])
        if "plan" in want:
            assert r["plan"] == want["plan"], (cid, r["plan"])
        assert r["act_layout"] == want["act"], (cid, r)
        if want["weight"] is not None:
            assert r["weight_layout"] == want["weight"], (cid, r)
        if want["route"] == "triton":
            assert r["route"] == {"triton": 1} and not r["reached_deepgemm"], (cid, r)
            if r["weight_layout"] in ("w2-e8m0-block", "w2-fp32-block"):  # the same bytes viewed [G, D, R]
                assert r["kernel_weight_shape"] == [2, 256, 512] and r["kernel_recipe"] == [1, 128, 128], r
        else:
            assert [x["rejected"] for x in r["reached_deepgemm"]] == [None], (cid, r["reached_deepgemm"])
        if r["handed_to_transform"]:  # vLLM's DeepGEMM post-processing: what it hands DeepGEMM
            h = r["handed_to_transform"][0]
            assert h["sf"] == [[2, 2, 4], "torch.float32"] and h["recipe"] == [1, 128, 128] and h["mn"] == 256
            assert h["num_groups"] == 2 and not h["is_sfa"]
        served_layouts.add((want["route"], r["act_layout"], r["weight_layout"]))
    # every layout our kernel reads was run, with both activation layouts
    assert {(a, w) for route, a, w in served_layouts if route == "triton"} >= {
        (a, w) for a in ("a-ue8m0-tma", "a-fp32-tma")
        for w in ("w3-ue8m0-row", "w3-fp32-block", "w2-e8m0-block", "w2-fp32-block")}


def test_the_matrix_names_every_linear_backend_and_kernel_as_vllm_033_does():
    """The matrix's --linear-backend values and FP8 block kernel per value are vLLM 0.33's own."""
    import typing

    import vllm.model_executor.kernels.linear as lin
    from sparkpair_overlay.serve_matrix import FP8_BLOCK_KERNEL
    from vllm.config.kernel import LinearBackend
    from vllm.platforms import PlatformEnum

    assert LINEAR_BACKENDS == typing.get_args(LinearBackend)
    cuda = lin._POSSIBLE_FP8_BLOCK_KERNELS[PlatformEnum.CUDA]
    for lb in LINEAR_BACKENDS:
        narrowed = [k.__name__ for k in cuda if k in lin._LINEAR_BACKEND_KERNEL_MAP.get(lb, set())]
        assert narrowed == ([FP8_BLOCK_KERNEL[lb]] if lb in FP8_BLOCK_KERNEL else []), (lb, narrowed)
    # the automatic order the matrix follows: DeepGEMM's kernel is the first one GB10 supports
    assert [k.__name__ for k in cuda][:2] == ["FlashInferFp8DeepGEMMDynamicBlockScaledKernel",
                                              "DeepGemmFp8BlockScaledMMKernel"]


def test_the_kernels_the_matrix_refuses_are_the_ones_vllm_033_says():
    """On capability 12.1, vLLM 0.33's own predicates refuse torch's block path and FlashInfer's block-scale
    GEMM (SM90-only), run with the platform answering as GB10 does; read from the source (they need CUDA to
    run): Marlin's post-processing repacks the weight, and only DeepGEMM's FP8 block kernel reshapes an
    is_bmm layer."""
    import inspect

    from vllm.model_executor.kernels.linear.scaled_mm import deep_gemm, marlin, pytorch
    from vllm.platforms import current_platform
    from vllm.platforms.interface import DeviceCapability
    from vllm.utils import flashinfer as fi_utils

    cls = type(current_platform)
    saved = {n: cls.__dict__.get(n) for n in ("get_device_capability", "is_cuda", "is_cuda_alike")}
    try:
        cls.get_device_capability = classmethod(lambda c, device_id=0: DeviceCapability(12, 1))
        cls.is_cuda = classmethod(lambda c: True)
        cls.is_cuda_alike = classmethod(lambda c: True)
        ok, why = pytorch.BlockWiseTorchFP8ScaledMMLinearKernel.is_supported(121)
        assert not ok and "compute capability 90" in why
        assert fi_utils.has_flashinfer_fp8_blockscale_gemm() is False
    finally:
        for n, v in saved.items():
            if v is None:
                delattr(cls, n)
            else:
                setattr(cls, n, v)
    dg_post = deep_gemm.DeepGemmFp8BlockScaledMMKernel.process_weights_after_loading
    assert "is_bmm" in inspect.getsource(dg_post)
    marlin_post = marlin.MarlinFP8ScaledMMLinearKernel.process_weights_after_loading
    assert "marlin" in inspect.getsource(marlin_post).lower()


def test_the_matrix_verdicts_are_total_and_every_refusal_names_its_way_out():
    from sparkpair_overlay.serve_matrix import matrix

    n = 0
    for c in matrix():
        n += 1
        v = c.verdict
        assert v.served or "wanted" in v.why, asdict(c)
        if v.served:
            assert v.route in ("triton", "deepgemm") and v.weight is not None
    assert n == len(LINEAR_BACKENDS) * 2 * 2 * 4 * 2 * len(DEEPGEMM_UNSUPPORTED) * 5

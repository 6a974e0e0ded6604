"""vLLM's own ``GateLinear`` with our plugin's subclass registered, routing to our router kernel.

What runs (DeepSeek-V4-Flash gate: hidden K=4096 -> N=256 routed experts, ``out_dtype=fp32``):

1. **vLLM's** ``GateLinear`` (vllm 0.32.0,
   ``vllm/model_executor/layers/fused_moe/router/gate_linear.py``, the file itself, unmodified), on
   the real ``ReplicatedLinear`` / ``UnquantizedLinearMethod`` (``model_executor/layers/linear.py``)
   and the real ``PluggableLayer`` (``model_executor/custom_op.py``), under a platform shim that
   reports capability 12.1 (GB10), the same value the plan gets from ``SPARKPAIR_FAKE_CAPABILITY``.
2. Our plugin's plan and patch step, as vLLM's plugin loader would run it:
   ``sparkpair_overlay.plugin.make_plan(env)`` then ``plugin._apply_patches(plan)``, which calls
   ``patches/router.py`` ``apply(plan, router_gemm)`` -> ``GateLinear.register_oot(SparkpairGateLinear)``
   -> ``op_registry_oot["GateLinear"]`` (custom_op.py:82-99).
3. The gate is built the way DeepSeek-V4 builds it (models/deepseek_v4/nvidia/model.py:724-730:
   ``GateLinear(input_size=hidden, output_size=n_routed_experts, bias=False, out_dtype=fp32,
   prefix=...)``) inside vLLM's loader context (model_loader/base_loader.py:72-74: default dtype =
   model dtype bf16, default device = the GPU), so ``PluggableLayer.__new__`` (custom_op.py:46-65)
   allocates our subclass. Weight ``[256, 4096]``:

   * ``bf16w``: bf16 (``params_dtype=None`` -> ``torch.get_default_dtype()``, linear.py:283-285);
   * ``fp32w``: fp32, from ``force_fp32_compute=True`` (as nemotron_h.py:160-166 passes): off
     Hopper / family 100 there is no specialised kernel, so ``GateLinear`` stores the weight in fp32
     (gate_linear.py:80-87).

   Weights go in through vLLM's ``ReplicatedLinear.weight_loader`` (linear.py:389-397) and
   ``UnquantizedLinearMethod.process_weights_after_loading`` (vLLM's own is a no-op on CUDA,
   linear.py:206-227; for an fp32-accurate gate our subclass wraps it to make the BF16x3 planes).
4. ``layer(x)``, ``x [M, 4096] bf16``, M in {1, 8, 32, 512}: returns ``(logits [M, 256] fp32, None)``.

Checks, per case:

* plan with ``SPARKPAIR_FAKE_CAPABILITY=12.1`` (default ``SPARKPAIR_ROUTER=auto``, no probe):
  ``bf16w`` -> ``triton-bf16-lowM(M<=32)``: ``torch.ops.sparkpair_overlay.router_gemm_dispatch`` is
  called once per forward, our kernel ``sparkpair_overlay.kernels.router_gemm.router_gemm`` for
  M <= 32 and vLLM's cuBLAS tier ``torch.mm(x, w.T, out_dtype=fp32)`` (gate_linear.py:283-285)
  inside the op for M=512 (output bitwise equal to that call); ``bf16w-maxm512``
  (``SPARKPAIR_ROUTER_MAX_M=512``) -> our kernel for every M; ``fp32w`` -> ``triton-fp32-accurate``:
  our kernel for every M, each call carrying the BF16x3 planes the subclass made when the loader
  called ``process_weights_after_loading`` (``kernel_calls_with_planes``); and
  :func:`test_fp32_planes_follow_a_weight_reload`: a second load refreshes the planes in place and
  the output follows the new weight. Where our kernel ran: max|out - ref| / max|ref| <= 1e-5 (bf16 weight),
  2e-6 (fp32 weight), ref = ``x.double() @ w.double().T``. Evidence: ``type(layer).__name__ ==
  "SparkpairGateLinear"``, ``layer.sparkpair_router.path``, calls into the bound kernel (a counting
  wrapper put in ``patches.router._KERNEL``), dispatcher-level op calls (a ``TorchDispatchMode``).
* plan with ``SPARKPAIR_ROUTER=upstream``: nothing is registered, ``type(layer) is GateLinear``
  (vLLM's class, its own ``forward``); no call to our op or kernel; the output is bitwise vLLM's tier
  for GB10: ``bf16w`` tier 5 ``torch.mm(x, w.T, out_dtype=fp32)``; ``fp32w`` tier 6
  ``F.linear(x.to(fp32), w)`` (gate_linear.py:287-302 -> linear.py:411-421 -> linear.py:229-240 ->
  ``default_unquantized_gemm``, layers/utils.py:83-89).

The construction and plan checks (marked ``cpu_ok``) run without CUDA too; the forward checks skip
without CUDA. How vLLM's files get here (which are loaded verbatim, which vLLM names are shims and
why): ``tests/gpu/vllm_harness.py`` (set :data:`vllm_harness.ROUTER`). Files loaded verbatim,
under ``vllm/``: ``_version.py``, ``envs.py``, ``model_executor/utils.py``,
``model_executor/custom_op.py``, ``model_executor/parameter.py``, ``model_executor/layers/linear.py``,
``model_executor/layers/fused_moe/router/bf16x3_router_gemm_rocm.py``,
``model_executor/layers/fused_moe/router/gate_linear.py``. Source: ``$SPARKPAIR_VLLM_SRC``,
``.gpu-carry/vllm`` (``python tests/gpu/test_vllm_router_path.py stage`` where vLLM is installed),
or the installed ``vllm`` package.

``SPARKPAIR_VLLM_ROUTER_JSON=path`` writes every forward case's numbers as JSON at the end.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import vllm_harness as vh

pytestmark = pytest.mark.gpu

HIDDEN, N_EXPERTS = 4096, 256  # DeepSeek-V4-Flash gate (docs/reference/vllm-code-paths.md#dsv4-shapes)
MS = (1, 8, 32, 512)
FAKE_CAPABILITY = "12.1"
TOL = {"bf16": 1e-5, "fp32": 2e-6}  # max|err| / max|ref| vs fp64 (tests/gpu/test_router_gemm.py)
GATE_FILE = "vllm.model_executor.layers.fused_moe.router.gate_linear"
DISPATCH_OP = "sparkpair_overlay.router_gemm_dispatch"

#: (case id, extra SPARKPAIR_* settings, weight kind, expected path, expected max_m)
CASES = (
    ("bf16w", {}, "bf16", "triton-bf16-lowM", 32),
    ("bf16w-maxm512", {"SPARKPAIR_ROUTER_MAX_M": "512"}, "bf16", "triton-bf16-lowM", 512),
    ("fp32w", {}, "fp32", "triton-fp32-accurate", None),
)
KINDS = ("bf16", "fp32")

RESULTS: list[dict[str, Any]] = []


# --------------------------------------------------------------------------- helpers


@pytest.fixture(scope="module")
def vllm_router():  # noqa: ANN201
    """vLLM's router files loaded over the shims (platform capability 12.1); torn down after."""
    root, where = vh.vllm_source_root(vh.ROUTER.files)
    if root is None:
        pytest.skip(where + "; run `python tests/gpu/test_vllm_router_path.py stage` where vLLM is "
                    "installed and carry .gpu-carry, or set SPARKPAIR_VLLM_SRC")
    cap = tuple(int(v) for v in FAKE_CAPABILITY.split("."))
    state = vh.load(root, vh.ROUTER, "cuda", cap)  # type: ignore[arg-type]
    state["root"], state["where"] = root, where
    version = sys.modules["vllm"].__version__
    yield state
    _unpatch()
    vh.restore(state)
    vh.write_results_json(
        "SPARKPAIR_VLLM_ROUTER_JSON",
        "vLLM 0.32.0 GateLinear (verbatim) + sparkpair SparkpairGateLinear (plan at fake cap 12.1) -> "
        "router_gemm_dispatch -> Triton router_gemm, DeepSeek-V4 gate 4096->256, vs fp64; and "
        "SPARKPAIR_ROUTER=upstream -> vLLM's own tiers",
        where, version, RESULTS,
    )


def _unpatch() -> None:
    """Unregister our subclass and forget what ``patches.router`` bound to this load of vLLM.

    ``_SUBCLASS`` subclasses the ``GateLinear`` class of one load; a later load (another module,
    another session step) must build its own.
    """
    from sparkpair_overlay.patches import router as router_patch

    if "vllm.model_executor.custom_op" in sys.modules:
        router_patch.restore()
    router_patch._SUBCLASS = None
    router_patch._PLAN = None
    router_patch._KERNEL = None


def plan_and_patch(router_mode: str = "auto", extra: dict[str, str] | None = None):  # noqa: ANN201
    """The plugin's steps 3-4 (plugin.py ``register``): ``make_plan`` then ``_apply_patches``."""
    from sparkpair_overlay import plugin

    _unpatch()
    env = {"SPARKPAIR_FAKE_CAPABILITY": FAKE_CAPABILITY, "SPARKPAIR_ROUTER": router_mode,
           "SPARKPAIR_O_PROJ": "upstream", "SPARKPAIR_PLAN_PATH": "", **(extra or {})}
    plan = plugin.make_plan(env)
    assert plan.patching_allowed, plan.line()
    return plugin._apply_patches(plan)


def build_gate(gl: Any, kind: str, device: str):  # noqa: ANN201
    """``GateLinear`` as DeepSeek-V4 builds it, in vLLM's loader context (bf16 default dtype, device)."""
    import torch

    kw = {"force_fp32_compute": True} if kind == "fp32" else {}
    prev = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device(device):
            return gl.GateLinear(input_size=HIDDEN, output_size=N_EXPERTS, bias=False,
                                 out_dtype=torch.float32, prefix="model.layers.3.ffn.gate", **kw)
    finally:
        torch.set_default_dtype(prev)


def load_weight(layer: Any, seed: int = 0):  # noqa: ANN201
    """Random checkpoint weight (scale K**-0.5) through vLLM's weight_loader; returns ``layer.weight``."""
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    w = torch.randn(N_EXPERTS, HIDDEN, generator=gen) * HIDDEN**-0.5
    layer.weight_loader(layer.weight, w.to(layer.weight.dtype).to(layer.weight.device))
    layer.quant_method.process_weights_after_loading(layer)
    return layer.weight


def counting_kernel():  # noqa: ANN201
    """Wrap the kernel ``patches.router`` bound (``_KERNEL``) with a call counter; returns the counter."""
    from sparkpair_overlay.patches import router as router_patch

    inner = router_patch._KERNEL
    calls = Counter()

    def kernel(x, weight, planes):  # noqa: ANN001, ANN202
        calls["router_gemm"] += 1
        calls["with_planes"] += planes is not None
        if inner is None:
            raise AssertionError("our router kernel was called but none is bound (upstream plan)")
        return inner(x, weight, planes)

    router_patch._KERNEL = kernel
    return calls


def op_counter():  # noqa: ANN201
    """A ``TorchDispatchMode`` that records every op reaching the dispatcher's Python key."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class OpCounter(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.ops: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
            self.ops.append(str(func))
            return func(*args, **(kwargs or {}))

        def count(self, prefix: str) -> int:
            return sum(o.startswith(prefix) for o in self.ops)

    return OpCounter()


def needs_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("the forward pass needs an NVIDIA GPU (our Triton kernel, CUDA-key dispatch op); "
                    "construction and plan checks above ran")


def _x(m: int, seed: int):  # noqa: ANN202
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(m, HIDDEN, generator=gen).to(torch.bfloat16).cuda()


def _max_rel(out, ref) -> float:  # noqa: ANN001
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


# --------------------------------------------------------------------------- CPU-runnable checks


@pytest.mark.cpu_ok
def test_vllm_files_loaded_verbatim(vllm_router) -> None:  # noqa: ANN001
    root: Path = vllm_router["root"]
    for name, rel in vh.ROUTER.files.items():
        mod = vllm_router["modules"][name]
        assert Path(mod.__file__).resolve() == (root / rel).resolve(), (name, mod.__file__)
    manifest = root / "MANIFEST.json"
    if manifest.is_file():  # a staged copy: the bytes are the installed vLLM's
        sums = json.loads(manifest.read_text())["files"]
        for rel in vh.ROUTER.files.values():
            assert hashlib.sha256((root / rel).read_bytes()).hexdigest() == sums[rel], rel
    loaded = vh.loaded_vllm_modules()
    want = {*vh.ROUTER.files, *vh.ROUTER.packages, *vh.ROUTER.shims}
    assert set(loaded) == want, f"unexpected vLLM modules: {sorted(set(loaded) ^ want)}"
    assert all(loaded[n] == "shim" for n in vh.ROUTER.shims)
    from sparkpair_overlay.versions import public_version

    assert public_version(sys.modules["vllm"].__version__) == "0.32.0"
    plat = sys.modules["vllm.platforms"].current_platform
    assert plat.is_cuda() and tuple(plat.get_device_capability()) == (12, 1)
    assert plat.is_device_capability_family(120) and not plat.is_device_capability_family(100)
    assert not plat.is_device_capability((9, 0))


@pytest.mark.cpu_ok
def test_plan_at_fake_capability_12_1(vllm_router) -> None:  # noqa: ANN001
    from sparkpair_overlay import plugin

    plan = plugin.make_plan({"SPARKPAIR_FAKE_CAPABILITY": FAKE_CAPABILITY, "SPARKPAIR_O_PROJ": "upstream",
                             "SPARKPAIR_PLAN_PATH": ""})
    assert plan.capability == (12, 1) and plan.capability_source == "SPARKPAIR_FAKE_CAPABILITY"
    assert plan.version_verified and plan.patching_allowed, plan.line()
    assert plan.router_kernel_error is None, plan.router_kernel_error
    assert (plan.router_bf16.path, plan.router_bf16.max_m) == ("triton-bf16-lowM", 32), plan.line()
    assert plan.router_fp32.path == "triton-fp32-accurate", plan.line()
    assert plan.patches_router
    up = plugin.make_plan({"SPARKPAIR_FAKE_CAPABILITY": FAKE_CAPABILITY, "SPARKPAIR_ROUTER": "upstream",
                           "SPARKPAIR_O_PROJ": "upstream", "SPARKPAIR_PLAN_PATH": ""})
    assert up.router_bf16.path == up.router_fp32.path == "upstream" and not up.patches_router


@pytest.mark.cpu_ok
@pytest.mark.parametrize("case,extra,kind,path,max_m", CASES, ids=[c[0] for c in CASES])
def test_gate_constructs_as_our_subclass(vllm_router, case, extra, kind, path, max_m) -> None:  # noqa: ANN001
    import torch
    from sparkpair_overlay.patches import router as router_patch

    gl = vllm_router["modules"][GATE_FILE]
    custom_op = vllm_router["modules"]["vllm.model_executor.custom_op"]
    plan = plan_and_patch("auto", extra)
    assert plan.patches_router, plan.line()
    sub = custom_op.op_registry_oot.get("GateLinear")
    assert sub is not None and sub is router_patch._SUBCLASS and sub is router_patch.registered_class()
    assert issubclass(sub, gl.GateLinear) and sub.__name__ == "SparkpairGateLinear"
    layer = build_gate(gl, kind, "cpu")
    assert type(layer).__name__ == "SparkpairGateLinear" and type(layer) is sub
    assert isinstance(layer, gl.GateLinear)
    want_dtype = torch.bfloat16 if kind == "bf16" else torch.float32
    assert layer.weight.dtype == want_dtype and tuple(layer.weight.shape) == (N_EXPERTS, HIDDEN)
    assert layer.out_dtype == torch.float32 and layer.is_unquantized and layer.bias is None
    decision = layer.sparkpair_router
    assert (decision.path, decision.max_m) == (path, max_m), decision
    assert layer._sparkpair_max_m == (-1 if max_m is None else max_m)
    # vLLM's own tier flags as on GB10 (gate_linear.py:63-188): no Hopper/family-100 tiers
    assert not layer.allow_specialized_router_gemm and not layer.allow_ll_bf16_gemm
    assert not layer.allow_fp32_router_gemm and not layer.allow_bf16x3_router_gemm
    assert not layer.allow_rocm_bf16x3_router_gemm
    assert layer.allow_cublas_router_gemm == (kind == "bf16")
    _unpatch()
    assert type(build_gate(gl, kind, "cpu")) is gl.GateLinear  # unregistered: vLLM's class again


@pytest.mark.cpu_ok
@pytest.mark.parametrize("kind", KINDS, ids=[f"{k}w" for k in KINDS])
def test_upstream_keeps_vllms_class(vllm_router, kind) -> None:  # noqa: ANN001
    import torch

    gl = vllm_router["modules"][GATE_FILE]
    custom_op = vllm_router["modules"]["vllm.model_executor.custom_op"]
    plan = plan_and_patch("upstream")
    assert not plan.patches_router and plan.router_bf16.path == "upstream"
    assert "GateLinear" not in custom_op.op_registry_oot
    layer = build_gate(gl, kind, "cpu")
    assert type(layer) is gl.GateLinear and type(layer).forward is gl.GateLinear.forward
    assert not hasattr(layer, "sparkpair_router")
    assert layer.weight.dtype == (torch.bfloat16 if kind == "bf16" else torch.float32)


# --------------------------------------------------------------------------- forward on the GPU


@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("case,extra,kind,path,max_m", CASES, ids=[c[0] for c in CASES])
def test_forward_through_our_kernel(vllm_router, case, extra, kind, path, max_m, m) -> None:  # noqa: ANN001
    needs_cuda()
    import torch

    gl = vllm_router["modules"][GATE_FILE]
    plan_and_patch("auto", extra)
    kcalls = counting_kernel()
    layer = build_gate(gl, kind, "cuda")
    w = load_weight(layer, seed=7)
    x = _x(m, seed=100 + m)
    with op_counter() as ops:
        res = layer(x)
    torch.cuda.synchronize()
    out, bias = res
    ref = x.double() @ w.double().T
    expect_kernel = max_m is None or m <= max_m
    fails = []
    if type(layer).__name__ != "SparkpairGateLinear" or layer.sparkpair_router.path != path:
        fails.append(f"layer {type(layer).__name__} path {layer.sparkpair_router.label}")
    if bias is not None or out.dtype != torch.float32 or tuple(out.shape) != (m, N_EXPERTS):
        fails.append(f"output {out.dtype} {tuple(out.shape)} bias {bias}")
    if ops.count(DISPATCH_OP) != 1:
        fails.append(f"{DISPATCH_OP} called {ops.count(DISPATCH_OP)} times (ops {ops.ops})")
    if kcalls["router_gemm"] != int(expect_kernel):
        fails.append(f"kernel called {kcalls['router_gemm']} times, wanted {int(expect_kernel)}")
    err = _max_rel(out, ref)
    if expect_kernel and not err <= TOL[kind]:
        fails.append(f"max rel err {err:.3g} > {TOL[kind]}")
    want_planes = int(expect_kernel and w.dtype == torch.float32)  # made by the loader hook
    if kcalls["with_planes"] != want_planes:
        fails.append(f"kernel got the BF16x3 planes {kcalls['with_planes']} times, wanted {want_planes}")
    equal_cublas = None
    if not expect_kernel:  # the op's M > max_m branch: vLLM's tier 5 call, bitwise
        equal_cublas = bool(torch.equal(out, torch.mm(x, w.T, out_dtype=torch.float32)))
        if not equal_cublas:
            fails.append("M > max_m output differs from torch.mm(x, w.T, out_dtype=fp32)")
    rec = {"case": case, "M": m, "weight_dtype": str(w.dtype).replace("torch.", ""),
           "layer_class": type(layer).__name__, "path": layer.sparkpair_router.label,
           "dispatch_op_calls": ops.count(DISPATCH_OP), "kernel_calls": kcalls["router_gemm"],
           "kernel_calls_with_planes": kcalls["with_planes"],
           "ran": "triton router_gemm" if expect_kernel else "cuBLAS torch.mm inside router_gemm_dispatch",
           "max_rel_err_vs_fp64": err, "tol": TOL[kind] if expect_kernel else None,
           "equal_to_vllm_cublas_tier": equal_cublas, "fails": fails, "pass": not fails}
    RESULTS.append(rec)
    print(json.dumps(rec))
    assert not fails, fails


@pytest.mark.parametrize("m", MS)
@pytest.mark.parametrize("kind", KINDS, ids=[f"{k}w" for k in KINDS])
def test_upstream_forward_is_vllms(vllm_router, kind, m) -> None:  # noqa: ANN001
    needs_cuda()
    import torch

    gl = vllm_router["modules"][GATE_FILE]
    plan_and_patch("upstream")
    kcalls = counting_kernel()
    layer = build_gate(gl, kind, "cuda")
    w = load_weight(layer, seed=7)
    x = _x(m, seed=200 + m)
    with op_counter() as ops:
        out, bias = layer(x)
    torch.cuda.synchronize()
    if kind == "bf16":  # tier 5, gate_linear.py:283-285
        want, tier = torch.mm(x, w.T, out_dtype=torch.float32), "5: torch.mm(x, w.T, out_dtype=fp32)"
    else:  # tier 6, gate_linear.py:287-302 (x.to(fp32), ReplicatedLinear -> F.linear)
        want, tier = torch.nn.functional.linear(x.to(torch.float32), w), "6: F.linear(x.float(), w)"
    fails = []
    if type(layer) is not gl.GateLinear:
        fails.append(f"layer class {type(layer).__qualname__}")
    if ops.count(DISPATCH_OP) or kcalls["router_gemm"]:
        fails.append(f"our op called {ops.count(DISPATCH_OP)}x, kernel {kcalls['router_gemm']}x")
    if bias is not None or out.dtype != torch.float32 or not torch.equal(out, want):
        fails.append(f"output ({out.dtype}) differs from vLLM's tier {tier}")
    rec = {"case": f"upstream-{kind}w", "M": m, "weight_dtype": str(w.dtype).replace("torch.", ""),
           "layer_class": type(layer).__qualname__, "vllm_tier": tier,
           "dispatch_op_calls": ops.count(DISPATCH_OP), "kernel_calls": kcalls["router_gemm"],
           "aten_ops": sorted(set(ops.ops)),
           "max_rel_err_vs_fp64": _max_rel(out, x.double() @ w.double().T),
           "fails": fails, "pass": not fails}
    RESULTS.append(rec)
    print(json.dumps(rec))
    assert not fails, fails


if __name__ == "__main__":
    if sys.argv[1:] == ["stage"]:
        print(vh.stage())
    else:
        raise SystemExit("usage: python tests/gpu/test_vllm_router_path.py stage")


def test_fp32_planes_follow_a_weight_reload(vllm_router) -> None:  # noqa: ANN001
    """A second load through vLLM's loader refreshes the layer's BF16x3 planes in place (a captured
    graph keeps reading the same buffer) and the output follows the new weight."""
    needs_cuda()
    import torch

    gl = vllm_router["modules"][GATE_FILE]
    plan_and_patch("auto", {})
    layer = build_gate(gl, "fp32", "cuda")
    w = load_weight(layer, seed=1)
    planes = layer.sparkpair_planes
    assert planes is not None and torch.equal(planes.double().sum(0), w.double())
    x = _x(8, seed=3)
    first = layer(x)[0]
    w = load_weight(layer, seed=2)
    assert layer.sparkpair_planes is planes, "refreshed in place"
    assert torch.equal(planes.double().sum(0), w.double())
    second = layer(x)[0]
    assert not torch.equal(first, second)
    assert _max_rel(second, x.double() @ w.double().T) <= TOL["fp32"]

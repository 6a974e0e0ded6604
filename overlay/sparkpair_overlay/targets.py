"""Every upstream symbol the overlay patches or relies on, and a source-level checker.

One list serves three readers: the patches import their module lists from here, the
ledger (``overlay/PATCHES.md``) names the same targets, and the version proof
runs :func:`check_source` against each installed vLLM's source files (0.32.0 in
``tests/vllm_real/test_version_proof.py``, 0.33.0 in ``tests/stack/test_stack_version.py``): a
fast check that names the target that moved, beside the tiers' tests that import and run the
patched code. This module imports neither vLLM nor torch.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from dataclasses import dataclass

# Modules whose global ``fp8_einsum`` the o_proj patch rebinds
# (docs/reference/vllm-code-paths.md#o_proj-callers
# must rebind", items 1-2). The first two are required; the others only if present.
FP8_EINSUM_SOURCE = "vllm.utils.deep_gemm"
FP8_EINSUM_CONSUMERS_REQUIRED: tuple[str, ...] = (
    "vllm.models.deepseek_v4.nvidia.ops.o_proj",
    FP8_EINSUM_SOURCE,
)
FP8_EINSUM_CONSUMERS_OPTIONAL: tuple[str, ...] = (
    "vllm.models.deepseek_v41.nvidia.flash_mla_mega_attn",
    "vllm.model_executor.kernels.linear.mxfp8.deep_gemm",
)
# Modules that bind ``compute_fp8_einsum_recipe`` by name and call it in ``__init__``
# (docs/reference/vllm-code-paths.md#o_proj-callers); patched only when the plan selects a non-upstream
# recipe.
RECIPE_SOURCE = "vllm.models.deepseek_v4.nvidia.ops.o_proj"
RECIPE_CONSUMERS_REQUIRED: tuple[str, ...] = (
    RECIPE_SOURCE,
    "vllm.models.deepseek_v4.nvidia.flashmla",
    "vllm.models.deepseek_v4.nvidia.flashinfer_sparse",
)
RECIPE_CONSUMERS_OPTIONAL: tuple[str, ...] = (
    "vllm.models.deepseek_v41.nvidia.flashmla",
    "vllm.models.deepseek_v41.nvidia.flashinfer_sparse",
)
GATE_LINEAR_MODULE = "vllm.model_executor.layers.fused_moe.router.gate_linear"
CUSTOM_OP_MODULE = "vllm.model_executor.custom_op"
# The DeepSeek-V4 attention modules whose ``_o_proj`` runs the grouped ``wo_a`` einsum, and vLLM 0.34's
# grouped ``wo_a`` layer they call it through (docs/reference/vllm-0.34.md#o_proj-owner).
O_PROJ_ATTENTION_MODULES: tuple[str, ...] = RECIPE_CONSUMERS_REQUIRED[1:]
GROUPED_WO_A_MODULE = "vllm.models.deepseek_v4.common.grouped_wo_a"
#: What vLLM's ``is_deep_gemm_supported`` may ask that the serve matrix models
#: (:class:`sparkpair_overlay.serve_matrix.Switches`): the platform (family 120 is a DeepGEMM
#: device), ``VLLM_USE_DEEP_GEMM``, an importable DeepGEMM, and (vLLM 0.34) an ``nvcc`` for its JIT.
DEEPGEMM_CONDITIONS_MODELLED = frozenset({"support_deep_gemm", "VLLM_USE_DEEP_GEMM", "has_deep_gemm", "nvcc"})


def module_path(module: str) -> str:
    """``vllm.utils.deep_gemm`` -> ``vllm/utils/deep_gemm.py`` (path inside a wheel)."""
    return module.replace(".", "/") + ".py"


@dataclass(frozen=True)
class Finding:
    """One failed check: which target, in which file, what was wrong."""

    target: str
    path: str
    problem: str

    def __str__(self) -> str:
        return f"{self.target} ({self.path}): {self.problem}"


Reader = Callable[[str], "str | None"]


def _find_def(tree: ast.AST, name: str, cls: str | None = None) -> ast.FunctionDef | None:
    scope: list[ast.stmt]
    if cls is None:
        scope = tree.body  # type: ignore[attr-defined]
    else:
        c = _find_class(tree, cls)
        if c is None:
            return None
        scope = c.body
    for node in scope:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    return None


def _find_class(tree: ast.AST, name: str) -> ast.ClassDef | None:
    for node in tree.body:  # type: ignore[attr-defined]
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def _arg_names(fn: ast.FunctionDef) -> list[str]:
    a = fn.args
    return [x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs)] + (
        [f"*{a.vararg.arg}"] if a.vararg else []) + ([f"**{a.kwarg.arg}"] if a.kwarg else [])


def _imports_from(tree: ast.AST, module: str, name: str) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == module:
            if any(alias.name == name and alias.asname in (None, name) for alias in node.names):
                return True
    return False


def _calls(node: ast.AST, func_name: str) -> list[ast.Call]:
    out = []
    for n in ast.walk(node):
        if isinstance(n, ast.Call):
            f = n.func
            if (isinstance(f, ast.Name) and f.id == func_name) or (
                isinstance(f, ast.Attribute) and f.attr == func_name
            ):
                out.append(n)
    return out


def _uses_attr(node: ast.AST, obj: str, attr: str) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr == attr
        and isinstance(n.value, ast.Name) and n.value.id == obj
        for n in ast.walk(node)
    )


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _module_assigns(tree: ast.AST, name: str) -> bool:
    for node in tree.body:  # type: ignore[attr-defined]
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets):
            return True
    return False


class _Checker:
    def __init__(self, read: Reader) -> None:
        self.read = read
        self.findings: list[Finding] = []
        self.checked: list[str] = []
        self._trees: dict[str, ast.AST | None] = {}

    def tree(self, module: str, target: str, required: bool = True) -> ast.AST | None:
        path = module_path(module)
        if path not in self._trees:
            text = self.read(path)
            self._trees[path] = ast.parse(text, filename=path) if text is not None else None
        t = self._trees[path]
        if t is None and required:
            self.fail(target, module, "module file is missing")
        return t

    def fail(self, target: str, module: str, problem: str) -> None:
        self.findings.append(Finding(target, module_path(module), problem))

    def ok(self, target: str) -> None:
        self.checked.append(target)


def _check_custom_op(c: _Checker) -> None:
    m = CUSTOM_OP_MODULE
    t = c.tree(m, "PluggableLayer")
    if t is None:
        return
    tgt = "custom_op.op_registry_oot"
    if _module_assigns(t, "op_registry_oot"):
        c.ok(tgt)
    else:
        c.fail(tgt, m, "module-level dict op_registry_oot not found")
    tgt = "PluggableLayer.__new__ looks up cls.__name__ in op_registry_oot"
    new = _find_def(t, "__new__", "PluggableLayer")
    if new is None:
        c.fail(tgt, m, "PluggableLayer.__new__ not found")
    elif _uses_attr(new, "cls", "__name__") and "op_registry_oot" in _names(new):
        c.ok(tgt)
    else:
        c.fail(tgt, m, "__new__ no longer keys op_registry_oot by cls.__name__")
    tgt = "PluggableLayer.register_oot keyed by cls.__name__"
    reg = _find_def(t, "register_oot", "PluggableLayer")
    if reg is None:
        c.fail(tgt, m, "PluggableLayer.register_oot not found")
    else:
        args = _arg_names(reg)
        if args[:3] != ["cls", "_decorated_layer_cls", "name"]:
            c.fail(tgt, m, f"signature is {args}; wanted (cls, _decorated_layer_cls=None, name=None)")
        elif not (_uses_attr(reg, "cls", "__name__") and "op_registry_oot" in _names(reg)):
            c.fail(tgt, m, "register_oot no longer stores under cls.__name__ in op_registry_oot")
        else:
            c.ok(tgt)


def _check_gate_linear(c: _Checker) -> None:
    m = GATE_LINEAR_MODULE
    t = c.tree(m, "GateLinear")
    if t is None:
        return
    tgt = "GateLinear class (PluggableLayer 'gate_linear', ReplicatedLinear subclass)"
    cls = _find_class(t, "GateLinear")
    if cls is None:
        c.fail(tgt, m, "class GateLinear not found")
        return
    bases = {b.id for b in cls.bases if isinstance(b, ast.Name)}
    decorated = any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Attribute) and d.func.attr == "register"
        and isinstance(d.func.value, ast.Name) and d.func.value.id == "PluggableLayer"
        for d in cls.decorator_list
    )
    if "ReplicatedLinear" in bases and decorated:
        c.ok(tgt)
    else:
        c.fail(tgt, m, f"bases {sorted(bases)}, @PluggableLayer.register present={decorated}")
    tgt = "GateLinear.__init__ signature"
    init = _find_def(t, "__init__", "GateLinear")
    want = ["self", "input_size", "output_size", "bias", "out_dtype", "params_dtype"]
    if init is None:
        c.fail(tgt, m, "GateLinear.__init__ not found")
    else:
        args = _arg_names(init)
        missing = [a for a in (*want, "quant_config", "prefix", "return_bias") if a not in args]
        if args[: len(want)] != want or missing:
            c.fail(tgt, m, f"args {args}; wanted to start with {want} and contain quant_config, prefix, "
                   "return_bias")
        else:
            c.ok(tgt)
        tgt = "GateLinear.__init__ sets out_dtype / is_unquantized"
        assigned = {n.attr for n in ast.walk(init) if isinstance(n, ast.Attribute)
                    and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                    and n.value.id == "self"}
        if {"out_dtype", "is_unquantized"} <= assigned:
            c.ok(tgt)
        else:
            c.fail(tgt, m, f"self.out_dtype/self.is_unquantized not both assigned (saw {sorted(assigned)})")
    tgt = "GateLinear.forward(self, x) with cuBLAS torch.mm(x, weight.T, out_dtype=fp32) tier"
    fwd = _find_def(t, "forward", "GateLinear")
    if fwd is None:
        c.fail(tgt, m, "GateLinear.forward not found")
    else:
        mm = [k for call in _calls(fwd, "mm") for k in call.keywords if k.arg == "out_dtype"]
        if _arg_names(fwd) != ["self", "x"]:
            c.fail(tgt, m, f"forward args {_arg_names(fwd)}; wanted ['self', 'x']")
        elif not mm:
            c.fail(tgt, m, "no torch.mm(..., out_dtype=...) call in forward (our high-M fallback mirrors it)")
        else:
            c.ok(tgt)


def _check_deep_gemm(c: _Checker) -> None:
    m = FP8_EINSUM_SOURCE
    t = c.tree(m, "vllm.utils.deep_gemm.fp8_einsum")
    if t is None:
        return
    tgt = "vllm.utils.deep_gemm.fp8_einsum(*args, **kwargs)"
    fn = _find_def(t, "fp8_einsum")
    if fn is None:
        c.fail(tgt, m, "fp8_einsum not found")
    elif _arg_names(fn) != ["*args", "**kwargs"] or "_fp8_einsum_impl" not in _names(fn):
        c.fail(tgt, m, f"signature {_arg_names(fn)} / _fp8_einsum_impl not used")
    else:
        c.ok(tgt)
    tgt = "vllm.utils.deep_gemm._fp8_einsum_impl + _lazy_init (never pre-set)"
    if _module_assigns(t, "_fp8_einsum_impl") and _find_def(t, "_lazy_init") is not None:
        c.ok(tgt)
    else:
        c.fail(tgt, m, "_fp8_einsum_impl global or _lazy_init missing")


def _check_einsum_consumer(c: _Checker, module: str, required: bool) -> None:
    tgt = f"{module}.fp8_einsum (bound by name, called with recipe=)"
    t = c.tree(module, tgt, required=required)
    if t is None:
        if not required:
            c.ok(f"{module} absent (optional)")
        return
    calls = _calls(t, "fp8_einsum")
    if not _imports_from(t, FP8_EINSUM_SOURCE, "fp8_einsum"):
        c.fail(tgt, module, "no `from vllm.utils.deep_gemm import fp8_einsum`")
    elif not calls:
        c.fail(tgt, module, "no fp8_einsum(...) call")
    elif not all(any(k.arg == "recipe" for k in call.keywords) and len(call.args) == 4 for call in calls):
        c.fail(tgt, module, "an fp8_einsum call is not (equation, a, b, out, recipe=...)")
    else:
        c.ok(tgt)


def _check_o_proj(c: _Checker) -> None:
    m = RECIPE_SOURCE
    t = c.tree(m, "o_proj")
    if t is None:
        return
    tgt = "o_proj.deep_gemm_fp8_o_proj calls fp8_einsum('bhr,hdr->bhd', ...)"
    fn = _find_def(t, "deep_gemm_fp8_o_proj")
    eq_calls = [] if fn is None else [
        call for call in _calls(fn, "fp8_einsum")
        if call.args and isinstance(call.args[0], ast.Constant) and call.args[0].value == "bhr,hdr->bhd"
    ]
    if fn is None:
        c.fail(tgt, m, "deep_gemm_fp8_o_proj not found")
    elif not eq_calls:
        c.fail(tgt, m, "no fp8_einsum('bhr,hdr->bhd', ...) call inside deep_gemm_fp8_o_proj")
    else:
        c.ok(tgt)
    tgt = "o_proj.compute_fp8_einsum_recipe(block_size=128) -> (recipe, tma_aligned)"
    fn = _find_def(t, "compute_fp8_einsum_recipe")
    if fn is None:
        c.fail(tgt, m, "compute_fp8_einsum_recipe not found")
    elif _arg_names(fn) != ["block_size"]:
        c.fail(tgt, m, f"signature {_arg_names(fn)}; wanted (block_size=128)")
    elif "get_device_capability" not in ast.dump(fn):
        c.fail(tgt, m, "no longer derives the recipe from get_device_capability()")
    else:
        c.ok(tgt)


def _check_recipe_consumer(c: _Checker, module: str, required: bool) -> None:
    tgt = f"{module}.compute_fp8_einsum_recipe (bound by name, called in __init__)"
    t = c.tree(module, tgt, required=required)
    if t is None:
        if not required:
            c.ok(f"{module} absent (optional)")
        return
    if not _imports_from(t, RECIPE_SOURCE, "compute_fp8_einsum_recipe"):
        c.fail(tgt, module, "no `from ...o_proj import compute_fp8_einsum_recipe`")
        return
    in_init = [
        fn for node in ast.walk(t) if isinstance(node, ast.ClassDef)
        for fn in node.body if isinstance(fn, ast.FunctionDef) and fn.name == "__init__"
        and _calls(fn, "compute_fp8_einsum_recipe")
    ]
    if in_init:
        c.ok(tgt)
    else:
        c.fail(tgt, module, "compute_fp8_einsum_recipe is not called in any __init__")


def _check_plugins(c: _Checker) -> None:
    m = "vllm.plugins"
    path_mod = "vllm.plugins.__init__"
    t = c.tree(path_mod, "vllm.plugins")
    if t is None:
        return
    tgt = "vllm.plugins: 'vllm.general_plugins' group, load_general_plugins with plugins_loaded guard"
    fn = _find_def(t, "load_general_plugins")
    consts = {n.value for n in ast.walk(t) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    if fn is None or "plugins_loaded" not in _names(fn) or "vllm.general_plugins" not in consts:
        c.fail(tgt, path_mod, f"load_general_plugins/plugins_loaded/group missing in {m}")
    else:
        c.ok(tgt)


def _check_platform(c: _Checker) -> None:
    m = "vllm.platforms.interface"
    t = c.tree(m, "Platform capability API")
    if t is None:
        return
    tgt = "Platform.get_device_capability / is_device_capability_family"
    ok = all(_find_def(t, n, "Platform") is not None for n in ("get_device_capability",
                                                                "is_device_capability_family"))
    if ok:
        c.ok(tgt)
    else:
        c.fail(tgt, m, "Platform.get_device_capability or is_device_capability_family missing")


def _check_weight_post_processing(c: _Checker) -> None:
    m = "vllm.model_executor.layers.quantization.utils.fp8_utils"
    t = c.tree(m, "deepgemm_post_process_fp8_weight_block")
    if t is None:
        return
    tgt = "fp8_utils.deepgemm_post_process_fp8_weight_block(is_bmm=...) (wo_a scale post-processing)"
    fn = _find_def(t, "deepgemm_post_process_fp8_weight_block")
    if fn is None or "is_bmm" not in _arg_names(fn):
        c.fail(tgt, m, "function or its is_bmm parameter missing")
    else:
        c.ok(tgt)


def _o_proj_methods(t: ast.AST) -> list[ast.FunctionDef]:
    return [fn for node in ast.walk(t) if isinstance(node, ast.ClassDef)
            for fn in node.body if isinstance(fn, ast.FunctionDef) and fn.name == "_o_proj"]


def _calls_self_attr(fn: ast.AST, attr: str, method: str) -> bool:
    for call in _calls(fn, method):
        f = call.func
        if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Attribute) and f.value.attr == attr
                and isinstance(f.value.value, ast.Name) and f.value.value.id == "self"):
            return True
    return False


def o_proj_owner(read: Reader) -> str | None:
    """How DeepSeek-V4's attention reaches the o_proj einsum in this tree: ``deep_gemm_fp8_o_proj``
    (every ``_o_proj`` of :data:`O_PROJ_ATTENTION_MODULES` calls it, 0.32/0.33) or
    ``wo_a.grouped_forward`` (every one calls ``self.wo_a.grouped_forward``, whose
    ``DeepseekV4GroupedWoA.grouped_forward`` in :data:`GROUPED_WO_A_MODULE` calls it, 0.34); ``None``
    when neither holds for all of them (the names of
    :data:`sparkpair_overlay.versions.O_PROJ_OWNER_FUNCTION` and ``O_PROJ_OWNER_GROUPED``)."""
    kinds = set()
    for module in O_PROJ_ATTENTION_MODULES:
        text = read(module_path(module))
        if text is None:
            return None
        methods = _o_proj_methods(ast.parse(text))
        if not methods:
            return None
        for fn in methods:
            if _calls(fn, "deep_gemm_fp8_o_proj"):
                kinds.add("deep_gemm_fp8_o_proj")
            elif _calls_self_attr(fn, "wo_a", "grouped_forward"):
                kinds.add("wo_a.grouped_forward")
            else:
                return None
    if kinds == {"wo_a.grouped_forward"}:
        text = read(module_path(GROUPED_WO_A_MODULE))
        fwd = None if text is None else _find_def(ast.parse(text), "grouped_forward", "DeepseekV4GroupedWoA")
        if fwd is None or not _calls(fwd, "deep_gemm_fp8_o_proj"):
            return None
    return next(iter(kinds)) if len(kinds) == 1 else None


def _check_o_proj_owner(c: _Checker) -> None:
    tgt = ("DeepSeek-V4 attention _o_proj reaches o_proj.deep_gemm_fp8_o_proj (directly, or through "
           "wo_a.grouped_forward)")
    if o_proj_owner(c.read) is None:
        c.fail(tgt, O_PROJ_ATTENTION_MODULES[-1], "an _o_proj calls neither deep_gemm_fp8_o_proj nor a "
               "wo_a.grouped_forward that calls it")
    else:
        c.ok(tgt)


def _supported_fn(read: Reader) -> ast.FunctionDef | None:
    text = read(module_path(FP8_EINSUM_SOURCE))
    return None if text is None else _find_def(ast.parse(text), "is_deep_gemm_supported")


def deepgemm_conditions(read: Reader) -> tuple[frozenset[str], tuple[int, int] | None]:
    """What ``vllm.utils.deep_gemm.is_deep_gemm_supported`` asks in this tree, and the oldest ``nvcc``
    it accepts: the functions it calls and the ``envs`` flags it reads (its ``nvcc`` helpers counted as
    ``nvcc``; logging left out), and the ``(major, minor)`` tuple it compares an ``nvcc`` release with
    (``None`` when it has none). Empty set when the function is missing."""
    fn = _supported_fn(read)
    if fn is None:
        return frozenset(), None
    names: set[str] = set()
    for n in ast.walk(fn):
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "logger":
                continue
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            names.add("nvcc" if "nvcc" in name else name)
        elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "envs":
            names.add(n.attr)
    minimum = None
    for n in ast.walk(fn):
        if isinstance(n, ast.Compare):
            for side in (n.left, *n.comparators):
                if (isinstance(side, ast.Tuple) and len(side.elts) == 2
                        and all(isinstance(e, ast.Constant) and isinstance(e.value, int) for e in side.elts)):
                    minimum = (side.elts[0].value, side.elts[1].value)  # type: ignore[attr-defined]
    return frozenset(names - {""}), minimum


def _check_deepgemm_conditions(c: _Checker) -> None:
    tgt = "utils.deep_gemm.is_deep_gemm_supported asks only what the serve matrix models"
    names, _ = deepgemm_conditions(c.read)
    if not names:
        c.fail(tgt, FP8_EINSUM_SOURCE, "is_deep_gemm_supported not found")
    elif not (names <= DEEPGEMM_CONDITIONS_MODELLED and {"support_deep_gemm", "VLLM_USE_DEEP_GEMM"} <= names):
        c.fail(tgt, FP8_EINSUM_SOURCE, f"it asks {sorted(names)}; the matrix models "
               f"{sorted(DEEPGEMM_CONDITIONS_MODELLED)}")
    else:
        c.ok(tgt)


def router_capability_gates(read: Reader) -> frozenset[str]:
    """The device-capability predicates ``gate_linear.py`` gates its GEMM tiers on, as written
    (``is_device_capability((9, 0))``, ``is_device_capability_family(100)``): the upgrade lane reads a
    family-120 tier from them (:func:`router_family_120_tier`)."""
    text = read(module_path(GATE_LINEAR_MODULE))
    if text is None:
        return frozenset()
    out = set()
    for call in ast.walk(ast.parse(text)):
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute) and (
                "capability" in call.func.attr):
            out.add(f"{call.func.attr}({', '.join(ast.unparse(a) for a in call.args)})")
    return frozenset(out)


def router_family_120_tier(read: Reader) -> bool:
    """``gate_linear.py`` gates a tier on family 120 (capability 12.x): ``is_device_capability_family(120)``,
    ``is_device_capability((12, ...))`` or ``has_device_capability(120)``-style predicates."""
    return any(re.search(r"\(\(?12[0-9]?\b", g) for g in router_capability_gates(read))


def check_source(read: Reader) -> tuple[list[str], list[Finding]]:
    """Check every patch target against one vLLM source tree.

    Args:
        read: maps a path inside the tree (``vllm/utils/deep_gemm.py``) to its text, or
            ``None`` if the file does not exist. Nothing is imported.

    Returns:
        ``(checked, findings)``: the targets that passed, and one :class:`Finding` per
        target that no longer holds (empty when the tree is safe to patch).
    """
    c = _Checker(read)
    _check_custom_op(c)
    _check_gate_linear(c)
    _check_deep_gemm(c)
    _check_o_proj(c)
    for mod in FP8_EINSUM_CONSUMERS_REQUIRED:
        if mod != FP8_EINSUM_SOURCE:
            _check_einsum_consumer(c, mod, True)
    for mod in FP8_EINSUM_CONSUMERS_OPTIONAL:
        _check_einsum_consumer(c, mod, False)
    for mod in RECIPE_CONSUMERS_REQUIRED:
        if mod != RECIPE_SOURCE:
            _check_recipe_consumer(c, mod, True)
    for mod in RECIPE_CONSUMERS_OPTIONAL:
        _check_recipe_consumer(c, mod, False)
    _check_o_proj_owner(c)
    _check_deepgemm_conditions(c)
    _check_plugins(c)
    _check_platform(c)
    _check_weight_post_processing(c)
    return c.checked, c.findings

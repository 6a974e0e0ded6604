"""Which device this process runs on, as the plan sees it.

The capability comes from ``SPARKPAIR_FAKE_CAPABILITY`` when set (testing: CI has no GPU,
and the H200 pretends to be 12.1), else from vLLM's ``current_platform``
(``Platform.get_device_capability``, platforms/interface.py:517-529 in 0.32.0; on CUDA it
reads NVML and does not initialise CUDA, so it is safe before vLLM forks).
"""

from __future__ import annotations

from collections.abc import Mapping

from . import envs


def detect(environ: Mapping[str, str] | None = None) -> tuple[str, tuple[int, int] | None, str]:
    """Return ``(platform, capability, source)``.

    ``platform`` is ``cuda`` | ``rocm`` | ``cpu`` | another vLLM platform name;
    ``capability`` is ``(major, minor)`` or ``None`` (no CUDA device); ``source`` is
    ``platform`` or ``SPARKPAIR_FAKE_CAPABILITY``.

    Raises:
        envs.EnvError: ``SPARKPAIR_FAKE_CAPABILITY`` is malformed.
    """
    fake = envs.read("SPARKPAIR_FAKE_CAPABILITY", environ)
    if fake != "":
        return ("cuda" if fake is not None else "cpu"), fake, "SPARKPAIR_FAKE_CAPABILITY"
    from vllm.platforms import current_platform

    if current_platform.is_cuda():
        platform = "cuda"
    elif current_platform.is_rocm():
        platform = "rocm"
    else:
        platform = str(getattr(current_platform, "device_name", "") or "other").lower() or "other"
        if current_platform.is_cpu():
            platform = "cpu"
    cap = current_platform.get_device_capability()
    capability = None if cap is None else (int(cap.major), int(cap.minor))
    return platform, capability, "platform"

"""The health package runs in a slim client: importing it must not import vLLM or torch."""

from __future__ import annotations

import subprocess
import sys

MODULES = [
    "sparkpair_health",
    "sparkpair_health.suite",
    "sparkpair_health.checks",
    "sparkpair_health.sse",
    "sparkpair_health.logscan",
    "sparkpair_health.report",
    "sparkpair_health.render",
    "sparkpair_health.client",
    "sparkpair_serving.profile",
    "sparkpair_serving.inputs",
    "sparkpair_serving.apikey",
    "sparkpair_serving.waiting",
    "sparkpair_cli.cmd_health",
    "sparkpair_cli.cmd_logscan",
]


def test_importing_the_health_suite_imports_neither_vllm_nor_torch() -> None:
    code = (
        "import importlib, sys\n"
        f"for m in {MODULES!r}: importlib.import_module(m)\n"
        "heavy = ('vllm', 'torch', 'transformers', 'triton')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)\n"
        "print(len(sys.modules)); assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]

"""The gateway, the DSv4 checks and the stability check run in the slim client: no vLLM, no torch."""

from __future__ import annotations

import subprocess
import sys

CODE = """
import sys
from sparkpair_health import checks, gateway, stability
from sparkpair_serving import apikey, profile
import sparkpair_cli.cmd_gateway
checks.check_list(profile.load_profile('deepseek-v4-flash'))
gateway.Gateway(gateway.GatewaySettings(stability={"nodes": [{"name": "head"}]}))
import docker  # the SDK the stability check uses
heavy = ('vllm', 'torch', 'transformers', 'triton')
bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy)
assert not bad, bad
print("ok")
"""


def test_gateway_checks_and_stability_import_neither_vllm_nor_torch() -> None:
    r = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]

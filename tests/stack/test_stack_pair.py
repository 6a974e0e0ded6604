"""One decision for the pair, on vLLM 0.33.0's own distributed setup: two ranks (two processes, gloo,
vLLM's ``init_distributed_environment`` / ``initialize_model_parallel(2)``), each with its own probe
file and settings as the head and the worker node have, reach the DeepSeek-V4 attention's
construction (its ``compute_fp8_einsum_recipe()``, where the overlay's check runs). They end with one
plan on both, or both refuse naming every difference per rank.

Cases, run in the same order on both ranks:

* ``near-tie``: the two probes found different winners by 2 % (timing noise): both keep the
  candidate first in the preference order; one plan, both serve;
* ``different-plans``: the probes found different winners by 2x: both refuse, naming ``o_proj``;
* ``different-switches``: the same probe, but the worker has ``VLLM_USE_DEEP_GEMM_E8M0=0``: both
  refuse, naming the switch.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile

import pytest

pytestmark = [pytest.mark.stack, pytest.mark.slow]

DRIVER = r"""
import json, os, sys
setup = json.loads(sys.argv[1])
rank = setup["rank"]
import torch
import vllm
from vllm.platforms import current_platform
from vllm.platforms.interface import DeviceCapability
cap = DeviceCapability(12, 1)
type(current_platform).get_device_capability = classmethod(lambda c, device_id=0: cap)
from vllm.plugins import load_general_plugins
load_general_plugins()
from sparkpair_overlay import pair, plugin
from sparkpair_overlay.patches import o_proj as o_proj_patch
import importlib
fis = importlib.import_module("vllm.models.deepseek_v4.nvidia.flashinfer_sparse")
from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config
from vllm.distributed import init_distributed_environment, initialize_model_parallel
with set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu"))):
    init_distributed_environment(world_size=2, rank=rank, local_rank=0, backend="gloo",
                                 distributed_init_method=setup["init"])
    initialize_model_parallel(2, 1)
base = {k: v for k, v in os.environ.items()
        if not k.startswith("SPARKPAIR_") and not k.startswith("VLLM_USE_DEEP")}
out = []
for case in setup["cases"]:
    env = dict(base, SPARKPAIR_FAKE_CAPABILITY="12.1", SPARKPAIR_PLAN_PATH="", **case["env"][rank])
    for k in ("VLLM_USE_DEEP_GEMM", "VLLM_USE_DEEP_GEMM_E8M0"):
        os.environ[k] = env.get(k, "1")
    o_proj_patch.restore(); pair.reset()
    plan = plugin._apply_patches(plugin.make_plan(env))
    rec = {"id": case["id"], "plan": plan.o_proj.label}
    try:
        rec["recipe"] = list(fis.compute_fp8_einsum_recipe()[0])
    except Exception as exc:
        rec["refused"] = f"{type(exc).__name__}: {exc}"
    out.append(rec)
print("REPORT " + json.dumps(out))
"""


def _probe(tmp_path, name: str, us: dict[str, float]) -> str:
    rows = [
        {
            "backend": b,
            "recipe": [1, 1, 128],
            "t": t,
            "ok": True,
            "us": us[b],
            "weight_layout": "w3-ue8m0-row",
            "act_layout": "a-ue8m0-tma",
        }
        for b in ("triton", "deepgemm")
        for t in (1, 36)
    ]
    sw = {
        "linear_backend": "auto",
        "VLLM_USE_DEEP_GEMM": True,
        "VLLM_USE_DEEP_GEMM_E8M0": True,
        "deepgemm": "vendored",
        "ckpt_scale": "e8m0",
    }
    p = tmp_path / f"{name}.json"
    p.write_text(
        json.dumps({"schema": "sparkpair-probe/2", "capability": [12, 1], "o_proj": rows, "switches": sw})
    )
    return str(p)


def test_head_and_worker_end_with_one_plan_or_refuse_naming_the_difference(stack_env, tmp_path):
    near = [
        _probe(tmp_path, "near-head", {"triton": 10.0, "deepgemm": 9.8}),
        _probe(tmp_path, "near-worker", {"triton": 9.8, "deepgemm": 10.0}),
    ]
    far = [
        _probe(tmp_path, "far-head", {"triton": 10.0, "deepgemm": 5.0}),
        _probe(tmp_path, "far-worker", {"triton": 5.0, "deepgemm": 10.0}),
    ]

    def files(a: str, b: str, **worker: str) -> list[dict[str, str]]:
        return [{"SPARKPAIR_PROBE_RESULTS": a}, {"SPARKPAIR_PROBE_RESULTS": b, **worker}]

    cases = [
        {"id": "near-tie", "env": files(near[0], near[1])},
        {"id": "different-plans", "env": files(far[0], far[1])},
        {"id": "different-switches", "env": files(near[0], near[0], VLLM_USE_DEEP_GEMM_E8M0="0")},
    ]
    init = "file://" + tempfile.mktemp(prefix="sparkpair-pair-")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", DRIVER, json.dumps({"rank": r, "init": init, "cases": cases})],
            env=stack_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in (0, 1)
    ]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-4000:]
        line = next(ln for ln in out.splitlines() if ln.startswith("REPORT "))
        reports.append({r["id"]: r for r in json.loads(line[len("REPORT ") :])})
    head, worker = reports
    # near-equal candidates: one plan on both (the preference order, not the clock), both serve
    assert head["near-tie"]["plan"] == worker["near-tie"]["plan"] == "triton(1,1,128)"
    assert head["near-tie"]["recipe"] == worker["near-tie"]["recipe"] == [1, 1, 128]
    # different plans: both refuse, naming the difference per rank and the way out
    for rep, rank in ((head, 0), (worker, 1)):
        msg = rep["different-plans"]["refused"]
        want = f"PairMismatch: sparkpair overlay: refusing to build the model on rank {rank}"
        assert msg.startswith(want), msg
        want = "o_proj: rank 0 deepgemm(1,1,128) on w3-ue8m0-row, rank 1 triton(1,1,128) on w3-ue8m0-row"
        assert want in msg, msg
        assert "wanted one plan and the same vLLM switches on every node" in msg
        msg = rep["different-switches"]["refused"]
        assert "VLLM_USE_DEEP_GEMM_E8M0: rank 0 1, rank 1 0" in msg, msg

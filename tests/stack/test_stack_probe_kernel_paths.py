"""The probe's kernel-path step on vLLM 0.33.0's own operands, on the CPU (Triton's interpreter).

``probe_kernel_paths`` builds ``wo_a`` through vLLM's ``deepgemm_post_process_fp8_weight_block`` (DeepGEMM's
transform stood in, ``stacklib.deepgemm_transform_stand_in``) and the activation through vLLM's
``fused_inv_rope_fp8_quant``, hands them to each config of every kernel path as the dispatcher does (per-row
scales read as block scales), and checks each against fp64: every path is correct on the served layout and
its rows name that layout and Triton's version; the per-range choice is made from them. The same step with a
post-processing that changes every scale (off by one exponent) marks every row wrong, and the choice then
keeps the built-in table, naming the token counts. Shapes are cut down (D = 256, R = 512, two token counts,
one config per path) for the interpreter: about 2 minutes.
"""

from __future__ import annotations

import json

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.slow]

DRIVER = r"""
import json, sys
setup = json.loads(sys.argv[1])
sys.path.insert(0, setup["stack_dir"])
from stacklib import deepgemm_transform_stand_in
import triton
from sparkpair_overlay.o_proj_configs import choose_config_ranges
from sparkpair_overlay.probe.kernel_paths import probe_kernel_paths
from sparkpair_overlay.kernel_path_row import KernelPathRow
from sparkpair_overlay.jsonio import Fields

CONFIGS = ["dec_t16_d64_k4_w4", "t16_d64_r4_s4", "t64_d64_s4", "mxd_t16_d64_k512_w4", "mx_t64_d64_k128_w4_s4",
           "mx_t64_d64_k128_w4_s4_acc"]
US = {name: 10.0 + i for i, name in enumerate(CONFIGS)}
US["mx_t64_d64_k128_w4_s4_acc"] = 5.0  # the fastest where it runs (T >= 17)

def timer(call):  # the config the probe times is the partial's last argument
    return US[call.args[-1]]

t_on = deepgemm_transform_stand_in(disable_ue8m0_cast=False)  # VLLM_USE_DEEP_GEMM_E8M0=1 on GB10
common = dict(configs=CONFIGS, device="cpu", timer=timer, use_vllm=True, dims=(256, 512))
report = {"triton": triton.__version__}
rows = probe_kernel_paths(4, "w3-ue8m0-row", (1, 1, 128), (3, 20), transform=t_on, **common)
report["rows"] = rows
parsed = [KernelPathRow.from_json(Fields(r, "row")) for r in rows]
report["choice"] = choose_config_ranges(parsed, "w3-ue8m0-row/a-ue8m0-tma").to_json()

def off_by_one(sf, *a, **k):  # a post-processing that changes every scale: every row must fail
    return t_on(sf * 2.0, *a, **k)
bad = probe_kernel_paths(4, "w3-ue8m0-row", (1, 1, 128), (3,), transform=off_by_one, **common)
report["bad"] = bad
report["bad_choice"] = choose_config_ranges([KernelPathRow.from_json(Fields(r, "row")) for r in bad],
                                            "w3-ue8m0-row/a-ue8m0-tma").to_json()
print("REPORT " + json.dumps(report))
"""


def test_every_kernel_path_on_vllms_operands_against_fp64_and_the_choice_made_from_them(stack_env):
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    setup = {"stack_dir": str(stacklib.REPO / "tests" / "stack")}
    r, _ = stacklib.run_report(DRIVER, env, json.dumps(setup), timeout=900)
    rows = r["rows"]
    # each config at the token counts of its candidate range: decode tiles and split tiles at both,
    # the 64-token tile loops from 17
    got = {(x["config"], x["tokens"]) for x in rows}
    assert got == {
        ("dec_t16_d64_k4_w4", 3),
        ("dec_t16_d64_k4_w4", 20),
        ("t16_d64_r4_s4", 3),
        ("t16_d64_r4_s4", 20),
        ("mxd_t16_d64_k512_w4", 3),
        ("mxd_t16_d64_k512_w4", 20),
        ("t64_d64_s4", 20),
        ("mx_t64_d64_k128_w4_s4", 20),
        ("mx_t64_d64_k128_w4_s4_acc", 20),
    }, got
    assert {x["path"] for x in rows} == {
        "decode",
        "tile-split",
        "mx-decode",
        "tile",
        "mx-tile",
        "mx-tile-acc",
    }
    for x in rows:
        assert x["layout"] == "w3-ue8m0-row/a-ue8m0-tma" and x["source"] == "vllm", x
        assert x["ok"] and x["err"] <= 1e-2 and x["us"] is not None, x
        assert x["triton"] == r["triton"] and x["instructions"] == [], x  # the interpreter compiles no PTX
    choice = r["choice"]
    assert choice["source"] == "probe" and choice["layout"] == "w3-ue8m0-row/a-ue8m0-tma"
    # T = 3: the decode tile (10 us, the fastest of three); T = 20 and on: the MMA-accumulated tile (5 us)
    assert [(x["t_max"], x["config"]) for x in choice["ranges"]] == [
        (3, "dec_t16_d64_k4_w4"),
        (1 << 62, "mx_t64_d64_k128_w4_s4_acc"),
    ]
    for x in r["bad"]:
        assert not x["ok"] and x["us"] is None and x["error"].startswith("wrong numbers: error"), x
    assert (
        r["bad_choice"]["source"] == "default" and "no correct config at T=[3]" in r["bad_choice"]["reason"]
    )


def test_vllm_033_keeps_gb10_on_the_2048_token_api_server_batch(monkeypatch):
    """The probe's prefill chunk without ``--max-num-batched-tokens``: vLLM 0.33's OpenAI server batch on
    GB10 (capability 12.1 with ~120 GiB) is 2048 tokens; a device of the same memory that is not GB10
    gets 8192 (so the device check, not the memory, decides)."""
    import vllm.engine.arg_utils as au
    from sparkpair_overlay.probe.kernel_paths import DEFAULT_PREFILL_CHUNK
    from vllm.usage.usage_lib import UsageContext

    plat = au.current_platform
    for name in ("is_tpu", "is_cpu"):
        monkeypatch.setattr(plat, name, lambda *a, **k: False)
    monkeypatch.setattr(plat, "get_device_total_memory", lambda *a, **k: 120 << 30)
    for cap, name, want in (((12, 1), "NVIDIA GB10", DEFAULT_PREFILL_CHUNK), ((9, 0), "NVIDIA H100", 8192)):
        monkeypatch.setattr(plat, "get_device_name", lambda *a, _n=name, **k: _n)
        monkeypatch.setattr(plat, "is_device_capability", lambda c, *a, _c=cap, **k: tuple(c) == _c)
        tokens, _ = au.EngineArgs.get_batch_defaults(2)
        assert tokens[UsageContext.OPENAI_API_SERVER] == want, (name, tokens)

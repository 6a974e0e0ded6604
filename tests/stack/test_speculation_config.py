"""vLLM 0.33 takes the DSpark profile as sparkpair renders it, and exports the speculation
counters under the names the health checks and the bench read (docs/reference/speculation.md)."""

from __future__ import annotations

import inspect
import json

import prometheus_client
import pytest
import stacklib
from pydantic import ValidationError
from sparkpair_health.checks.speculation import parse_spec_counters
from sparkpair_serving.profile import load_profile

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

PARSE = r"""
import json, sys
from sparkpair_cli.deploy import launch
from sparkpair_cli.deploy.nodeenv import load_node_env, parse_env_file
from sparkpair_serving.profile import load_profile
# No GPU here: vLLM's platform has no device type, and the parser's config defaults need one.
from vllm.platforms import current_platform
type(current_platform).device_type = "cpu"
from vllm.engine.arg_utils import EngineArgs
from vllm.entrypoints.common.cli_args import make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser
env = load_node_env(parse_env_file(sys.argv[1] + "/configs/node.env.example"))
argv = launch.serve_argv(env, load_profile("deepseek-v4-flash"), python="py")
assert argv[3] == "serve", argv
ns = make_arg_parser(FlexibleArgumentParser()).parse_args(argv[5:])
ns.model = argv[4]
ea = EngineArgs.from_cli_args(ns)
print("REPORT " + json.dumps({"speculative_config": ea.speculative_config,
      "max_cudagraph_capture_size": ea.max_cudagraph_capture_size, "max_num_seqs": ea.max_num_seqs,
      "revision": ea.revision, "max_model_len": ea.max_model_len, "kv_cache_dtype": ea.kv_cache_dtype}))
"""


def test_vllm_033_parser_takes_the_rendered_dspark_serve_command(stack_env: dict[str, str]) -> None:
    rep, _ = stacklib.run_report(PARSE, stack_env, str(stacklib.REPO), timeout=240)
    assert rep["speculative_config"] == {
        "method": "dspark",
        "num_speculative_tokens": 5,
        "draft_sample_method": "probabilistic",
    }
    assert rep["max_cudagraph_capture_size"] == rep["max_num_seqs"] * (5 + 1) == 36
    assert rep["revision"] == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert rep["kv_cache_dtype"] == "fp8_ds_mla"


def test_vllm_033_speculative_config_accepts_the_profile_fields_and_refuses_a_typo() -> None:
    from vllm.config.speculative import SpeculativeConfig

    spec = json.loads(load_profile("deepseek-v4-flash").server.speculation.config_json())  # type: ignore[union-attr]
    # Every field validates; the only complaint is the missing target model, which vllm serve
    # supplies (for DSpark the draft is the target checkpoint itself).
    with pytest.raises(ValidationError) as ok:
        SpeculativeConfig(**spec)
    assert [e["loc"] for e in ok.value.errors()] == [()], ok.value.errors()
    assert "target_model_config must be present for dspark" in str(ok.value)
    with pytest.raises(ValidationError) as bad:
        SpeculativeConfig(**{**spec, "draft_sample_method": "probabilistc"})
    assert bad.value.errors()[0]["loc"] == ("draft_sample_method",)


def test_the_dspark_draft_runs_the_targets_decoder_layer_so_its_router_and_o_proj_are_ours() -> None:
    from vllm.models.deepseek_v4.nvidia import dspark, model

    assert dspark.DeepseekV4DecoderLayer is model.DeepseekV4DecoderLayer
    assert "DeepseekV4DecoderLayer(" in inspect.getsource(dspark.DSparkDeepseekV4Model)


def test_vllm_033_exports_the_speculation_counters_the_checks_and_the_bench_read() -> None:
    from sparkpair_cli.bench.server_metrics import parse_metrics, summarize_samples
    from vllm.v1.spec_decode.metrics import SpecDecodingProm, SpecDecodingStats

    class _Config:  # SpecDecodingProm reads only num_speculative_tokens from its config
        num_speculative_tokens = 5

    reg = prometheus_client.CollectorRegistry()

    class _Counter(prometheus_client.Counter):
        def __init__(self, *a: object, **kw: object) -> None:
            super().__init__(*a, registry=reg, **kw)  # type: ignore[misc]

    class _Prom(SpecDecodingProm):
        _counter_cls = _Counter

    prom = _Prom(_Config(), ["model_name", "engine"], {0: ["m", "0"]})  # type: ignore[arg-type]
    before = prometheus_client.generate_latest(reg).decode()
    stats = SpecDecodingStats.new(5)
    stats.observe_draft(num_draft_tokens=5, num_accepted_tokens=3)
    stats.observe_draft(num_draft_tokens=5, num_accepted_tokens=1)
    prom.observe(stats)
    text = prometheus_client.generate_latest(reg).decode()
    c = parse_spec_counters(text)
    assert c is not None and (c.drafts, c.draft_tokens, c.accepted_tokens) == (2, 10, 4)
    assert c.acceptance_rate == pytest.approx(0.4) and c.mean_accepted_length == pytest.approx(3.0)
    s = summarize_samples([{"values": parse_metrics(before)}, {"values": parse_metrics(text)}])
    assert s["spec_acceptance_rate"] == pytest.approx(0.4) and s["spec_acceptance_length"] == pytest.approx(
        3.0
    )


def _capture_sizes(compilation_config: str, max_size: int) -> tuple[list[int], int]:
    """The capture sizes the release's own ``VllmConfig._set_cudagraph_sizes`` settles on for the
    profile's 6 sequences x (5 + 1) tokens (the rest of VllmConfig is not needed by it)."""
    from types import MethodType, SimpleNamespace

    from vllm.config import VllmConfig
    from vllm.config.compilation import CompilationConfig

    cc = CompilationConfig(**json.loads(compilation_config), max_cudagraph_capture_size=max_size)

    class _Config(SimpleNamespace):
        """The fields set here; any other name is VllmConfig's own method or property, on these
        fields (vLLM 0.34's ``_set_cudagraph_sizes`` calls ``get_decode_cudagraph_query_lens`` and
        ``_split_cudagraph_capture_sizes``, which 0.33's did not have)."""

        def __getattr__(self, name: str) -> object:
            attr = getattr(VllmConfig, name)
            if isinstance(attr, property) and attr.fget is not None:
                return attr.fget(self)
            return MethodType(attr, self) if callable(attr) else attr

    cfg = _Config(
        model_config=SimpleNamespace(enforce_eager=False),
        compilation_config=cc,
        scheduler_config=SimpleNamespace(max_num_seqs=6, max_num_batched_tokens=8192),
        speculative_config=None,
        uniform_decode_query_len=6,
        performance_mode="balanced",
        num_speculative_tokens=5,
    )
    VllmConfig._set_cudagraph_sizes(cfg)  # type: ignore[arg-type]
    return list(cc.cudagraph_capture_sizes), int(cc.max_cudagraph_capture_size)


def test_vllm_033_captures_the_full_verify_step_only_with_the_listed_sizes() -> None:
    from sparkpair_serving.profile import arg_value

    server = load_profile("deepseek-v4-flash").server
    comp = arg_value(server.args, "--compilation-config")
    cap = int(arg_value(server.args, "--max-cudagraph-capture-size") or 0)
    assert comp is not None and cap == server.verify_tokens() == 36
    sizes, top = _capture_sizes(comp, cap)
    assert top == 36 and all(n * 6 in sizes for n in range(1, 7)), sizes
    # Without the list vLLM truncates the max to 32: a full verify step would run uncaptured.
    bare, bare_top = _capture_sizes('{"cudagraph_mode": "PIECEWISE"}', cap)
    assert bare_top == 32 and 36 not in bare, bare


def test_flashinfer_072_has_the_decode_specialisation_the_dspark_draft_asks_for() -> None:
    """With DSpark the draft's non-causal SWA attention asks FlashInfer's SM120 DSv4 decode table
    for top_k = vLLM's padded DSpark width of the 128-token window plus k, not the window alone."""
    from sparkpair_cli.preflight.toolchain import dsv4_decode_pair
    from vllm.utils.flashinfer import has_flashinfer_sparse_mla_sm120_config
    from vllm.v1.attention.backends.mla.compressor_utils import get_dspark_swa_index_width

    server = load_profile("deepseek-v4-flash").server
    k = server.speculation.num_speculative_tokens  # type: ignore[union-attr]
    heads, window = dsv4_decode_pair(server.tensor_parallel_size)
    width = get_dspark_swa_index_width(window, k)
    assert (heads, window, width) == (32, 128, 192)
    assert has_flashinfer_sparse_mla_sm120_config(heads, window)
    assert has_flashinfer_sparse_mla_sm120_config(heads, width)

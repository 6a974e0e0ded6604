"""The argv sparkpair bench builds is valid for the installed vLLM's ``bench serve``, and the request hook restores vLLM."""

# ruff: noqa: E501
from __future__ import annotations

import json
from pathlib import Path

import pytest
from sparkpair_cli.bench.runner import BACKEND, _request_hook, vllm_argv
from sparkpair_cli.bench.workload import load_workload

pytestmark = pytest.mark.vllm_real


def test_every_cells_argv_parses_with_vllms_own_bench_serve_parser(tmp_path: Path) -> None:
    serve = pytest.importorskip("vllm.benchmarks.serve")
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    wl = load_workload("dsv4-pair")
    for cell in wl.cells()[:3] + wl.cells()[-3:]:
        for phase in ("warmup", "measured"):
            argv = vllm_argv(
                cell, phase, workload=wl, base_url="http://127.0.0.1:9", model_root="/models/dsv4",
                served_model_name="deepseek-v4-flash", tokenizer="/models/dsv4", tokenizer_mode="deepseek_v4",
                result_dir=tmp_path,
            )  # fmt: skip
            parser = FlexibleArgumentParser(prog="vllm bench serve")
            serve.add_cli_args(parser)
            args = parser.parse_args(argv)
            assert args.backend == "openai-chat" and args.endpoint == "/v1/chat/completions"
            assert args.dataset_name == "random" and float(args.random_range_ratio) == 0.0  # parsed later by vLLM
            assert (
                args.random_input_len == cell.context_tokens and args.random_output_len == cell.output_tokens
            )
            assert args.seed == cell.seed(phase)
            assert args.num_warmups == 0 and args.ignore_eos and args.save_detailed
            if phase == "measured":
                assert args.num_prompts == cell.num_requests and args.max_concurrency == cell.concurrency
            else:
                assert args.num_prompts == cell.warmup_requests
            assert args.extra_body == {"chat_template_kwargs": {"thinking": cell.thinking == "on"}}
            assert args.temperature == 1.0 and args.top_p == 1.0
            assert json.loads(json.dumps(args.extra_body))  # JSON-clean for the result file


def test_request_hook_sees_every_request_and_restores_vllms_function() -> None:
    erf = pytest.importorskip("vllm.benchmarks.lib.endpoint_request_func")
    original = erf.ASYNC_REQUEST_FUNCS[BACKEND]
    seen = []
    with _request_hook(lambda inp, out, cancelled: seen.append((inp, out, cancelled)), lambda x: x):
        assert erf.ASYNC_REQUEST_FUNCS[BACKEND] is not original
    assert erf.ASYNC_REQUEST_FUNCS[BACKEND] is original
    with pytest.raises(RuntimeError, match="boom"), _request_hook(lambda *a: None):
        raise RuntimeError("boom")
    assert erf.ASYNC_REQUEST_FUNCS[BACKEND] is original

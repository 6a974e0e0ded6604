"""The DSpark default profile renders its serve command with DSpark k=5 and a CUDA-graph capture
size of max_num_seqs x (k + 1) (the schema that refuses a profile contradicting itself:
tests/unit/serving/test_profile_speculation_schema.py)."""

from __future__ import annotations

import json
from pathlib import Path

from sparkpair_cli.deploy import launch
from sparkpair_cli.deploy.nodeenv import load_node_env, parse_env_file
from sparkpair_serving.profile import load_profile

REPO = Path(__file__).resolve().parents[3]
ENV = load_node_env(parse_env_file(REPO / "configs" / "node.env.example"))


def value(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, f"{name} appears {argv.count(name)} times in {argv}"
    return argv[argv.index(name) + 1]


def test_the_default_dsv4_profile_serves_dspark_k5_probabilistic_capturing_seqs_times_k_plus_1() -> None:
    p = load_profile("deepseek-v4-flash")
    argv = launch.serve_argv(ENV, p, python="py")
    spec = json.loads(value(argv, "--speculative-config"))
    assert spec == {"method": "dspark", "num_speculative_tokens": 5, "draft_sample_method": "probabilistic"}
    seqs = int(value(argv, "--max-num-seqs"))
    assert int(value(argv, "--max-cudagraph-capture-size")) == seqs * (5 + 1) == 36
    assert value(argv, "--revision") == "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    assert value(argv, "--kv-cache-dtype") == "fp8_ds_mla" and value(argv, "--max-model-len") == "524288"
    assert p.server.verify_tokens() == 36


def test_the_default_profile_captures_every_uniform_verify_batch_up_to_seqs_times_k_plus_1() -> None:
    # The CUDA-graph sizes tests/gpu/test_capture_sizes.py captures and replays with our kernels:
    # every uniform verify batch n x (k + 1), n = 1 .. max_num_seqs, up to the capture maximum.
    p = load_profile("deepseek-v4-flash")
    argv = launch.serve_argv(ENV, p, python="py")
    sizes = json.loads(value(argv, "--compilation-config"))["cudagraph_capture_sizes"]
    seqs, k = int(value(argv, "--max-num-seqs")), 5
    top = seqs * (k + 1)
    assert max(sizes) == top == int(value(argv, "--max-cudagraph-capture-size")), sizes
    missing = [n * (k + 1) for n in range(1, seqs + 1) if n * (k + 1) not in sizes]
    assert not missing, f"capture sizes {sizes} lack the verify batches {missing}"


def test_the_comparison_profile_serves_without_speculation_and_keeps_capture_size_12() -> None:
    p = load_profile("deepseek-v4-flash-nospec")
    argv = launch.serve_argv(ENV, p, python="py")
    assert "--speculative-config" not in argv and p.server.speculation is None
    assert value(argv, "--max-cudagraph-capture-size") == "12"

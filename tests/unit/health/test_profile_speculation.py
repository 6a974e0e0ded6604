"""The DSpark default profile renders its serve command with DSpark k=5 and a CUDA-graph capture
size of max_num_seqs x (k + 1); the schema refuses a profile that contradicts itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from sparkpair_cli.deploy import launch
from sparkpair_cli.deploy.nodeenv import load_node_env, parse_env_file
from sparkpair_serving.profile import ProfileError, load_profile

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


def test_every_server_value_of_the_default_profile_has_a_reason_comment_close_above_it() -> None:
    lines = [x.strip() for x in (REPO / "configs/profiles/deepseek-v4-flash.yaml").read_text().splitlines()]
    server = [x for x in lines[lines.index("server:") + 1 : lines.index("checks:")] if x]
    for i, s in enumerate(server):
        if s.startswith("- --") or s.split(":")[0] in ("model", "max_model_len", "speculation"):
            assert any(x.startswith("#") for x in server[max(0, i - 4) : i]), f"no reason comment above {s!r}"


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            lambda d: d["server"]["args"].__setitem__(d["server"]["args"].index("36"), "12"),
            "--max-cudagraph-capture-size is 12; wanted max_num_seqs x (k + 1) = 6 x (5 + 1) = 36",
        ),
        (
            lambda d: d["server"]["args"].extend(["--speculative-config", "{}"]),
            "wanted only server.speculation",
        ),
        (
            lambda d: d["server"]["speculation"].__setitem__("draft_sample_method", "random"),
            "server.speculation.draft_sample_method",
        ),
        (
            lambda d: d["server"]["speculation"].__setitem__("num_speculative_tokens", 0),
            "server.speculation.num_speculative_tokens",
        ),
    ],
    ids=["capture-size", "two-spec-configs", "sample-method", "k-zero"],
)
def test_a_profile_contradicting_its_speculation_is_refused_naming_the_value(
    tmp_path: Path,
    change,
    fragment: str,  # type: ignore[no-untyped-def]
) -> None:
    d = yaml.safe_load((REPO / "configs/profiles/deepseek-v4-flash.yaml").read_text())
    change(d)
    f = tmp_path / "p.yaml"
    f.write_text(yaml.safe_dump(d))
    with pytest.raises(ProfileError) as e:
        load_profile(f)
    assert fragment in str(e.value) and str(f) in str(e.value)


@pytest.mark.parametrize(
    ("spec", "fragment"),
    [
        (
            {"method": "ngram", "num_speculative_tokens": 5, "extra": {"num_speculative_tokens": 40}},
            "speculation.extra sets ['num_speculative_tokens']",
        ),
        ({"method": " dspark\n", "num_speculative_tokens": 5}, "should match pattern"),
        ({"method": "dspark", "num_speculative_tokens": True}, "valid integer"),
    ],
    ids=["extra-overrides-k", "method-with-spaces", "k-is-a-bool"],
)
def test_a_speculation_block_that_would_render_something_else_is_refused(spec: dict, fragment: str) -> None:
    from sparkpair_serving.profile import SpeculationSpec

    with pytest.raises(ValueError, match=re.escape(fragment)):
        SpeculationSpec.model_validate(spec)

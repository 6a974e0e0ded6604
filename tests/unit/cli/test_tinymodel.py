"""The generated demo model is a well-formed checkpoint, and bad specs are refused."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from sparkpair_cli.tinymodel import TinyModelSpec, _to_bf16_bytes, generate_tiny_model


def _read_safetensors_header(path: Path) -> dict:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n])


def test_generated_checkpoint_has_config_tokenizer_template_and_weights(tmp_path: Path) -> None:
    out = generate_tiny_model(tmp_path / "m")
    config = json.loads((out / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert config["head_dim"] >= 32
    assert config["hidden_size"] == config["num_attention_heads"] * config["head_dim"]
    tok_cfg = json.loads((out / "tokenizer_config.json").read_text())
    assert "<tool_call>" in tok_cfg["chat_template"]
    header = _read_safetensors_header(out / "model.safetensors")
    names = {k for k in header if k != "__metadata__"}
    assert "model.embed_tokens.weight" in names and "lm_head.weight" in names
    assert header["model.embed_tokens.weight"]["shape"] == [config["vocab_size"], config["hidden_size"]]
    data_len = (out / "model.safetensors").stat().st_size - 8 - struct.unpack(
        "<Q", (out / "model.safetensors").read_bytes()[:8]
    )[0]
    assert max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__") == data_len


def test_tool_call_markers_are_single_tokens(tmp_path: Path) -> None:
    from tokenizers import Tokenizer

    out = generate_tiny_model(tmp_path / "m")
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    for marker in ("<tool_call>", "</tool_call>"):
        assert len(tok.encode(marker).ids) == 1, marker


def test_second_generation_reuses_the_model(tmp_path: Path) -> None:
    out = generate_tiny_model(tmp_path / "m")
    mtime = (out / "model.safetensors").stat().st_mtime_ns
    generate_tiny_model(tmp_path / "m")
    assert (out / "model.safetensors").stat().st_mtime_ns == mtime


def test_bf16_rounding_is_round_to_nearest_even() -> None:
    x = np.array([1.0, 1.0 + 2**-8, 1.0 + 3 * 2**-8, -2.5], np.float32)
    got = np.frombuffer(_to_bf16_bytes(x), np.uint16)
    # 1+2^-8 is a tie -> even (1.0); 1+3*2^-8 is a tie -> even (1+2^-6... i.e. 0x3F82)
    assert list(got) == [0x3F80, 0x3F80, 0x3F82, 0xC020]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (TinyModelSpec(hidden_size=100), "must equal"),
        (TinyModelSpec(hidden_size=64, num_attention_heads=4, head_dim=16), "needs >= 32"),
    ],
)
def test_bad_specs_are_refused_with_the_value_seen(tmp_path: Path, spec: TinyModelSpec, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_tiny_model(tmp_path / "bad", spec)

"""Generate a tiny Llama-style checkpoint that a real vLLM server can load and serve.

The checkpoint is made entirely on this machine: a byte-level BPE tokenizer trained
with the ``tokenizers`` library on an embedded corpus, a chat template (Jinja, with
Hermes-style ``<tool_call>`` markup so vLLM's ``hermes`` tool parser can run), a
``config.json`` for ``LlamaForCausalLM`` and random bf16 weights written with
``safetensors``. Nothing is downloaded.

Sizes (defaults): 2 layers, hidden 128, 4 attention heads of head_dim 32 (vLLM's CPU
attention needs head_dim >= 32, see ``shared/DESIGN.md``), 2 KV heads, vocabulary
about 1 k tokens, ``max_position_embeddings`` 4096. The weights are random, so the
model's text is gibberish: the demo profile skips semantic checks for that reason.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|im_start|>",
    "<|im_end|>",
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
]
"""Added tokens. ``<tool_call>``/``</tool_call>`` must be single tokens: vLLM's
``hermes`` tool parser looks their ids up in the vocabulary at construction."""

CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- if tools %}"
    "<|im_start|>system\nYou may call these tools:\n"
    "{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n"
    "Reply with <tool_call>{\"name\": ..., \"arguments\": ...}</tool_call>.<|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "<|im_start|>tool\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.tool_calls is defined and message.tool_calls %}"
    "<|im_start|>assistant\n"
    "{%- for tc in message.tool_calls %}"
    "<tool_call>{\"name\": \"{{ tc.function.name }}\", \"arguments\": "
    "{{ tc.function.arguments if tc.function.arguments is string "
    "else tc.function.arguments | tojson }}}</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- else %}"
    "<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)

_CORPUS = """
The capital of France is Paris. The capital of Germany is Berlin.
A pair of DGX Spark boxes serves a model with tensor parallel size two over RoCE.
Tool calls are JSON objects with a name and arguments: {"name": "get_weather", "arguments": {"city": "Paris"}}.
The quick brown fox jumps over the lazy dog. Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.
vLLM serves OpenAI compatible chat completions with streaming and usage statistics.
Health checks must judge a real decode, not only an HTTP status code.
"""


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the generated model.

    Attributes:
        num_hidden_layers: transformer blocks.
        hidden_size: model width; must equal ``num_attention_heads * head_dim``.
        num_attention_heads: query heads.
        num_key_value_heads: KV heads (GQA).
        head_dim: per-head width; >= 32 for vLLM's CPU attention backend.
        intermediate_size: MLP width.
        vocab_size: BPE vocabulary target (the trained size may be smaller).
        max_position_embeddings: longest sequence in tokens.
        seed: seed of the random weights (numpy ``default_rng``).
    """

    num_hidden_layers: int = 2
    hidden_size: int = 128
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 32
    intermediate_size: int = 256
    vocab_size: int = 1024
    max_position_embeddings: int = 4096
    seed: int = 0

    def fingerprint(self) -> str:
        """Stable hash of the spec and the template, used to reuse a generated model."""
        blob = json.dumps(asdict(self), sort_keys=True) + CHAT_TEMPLATE + _CORPUS
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _train_tokenizer(out: Path, vocab_size: int) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([_CORPUS] * 4, trainer=trainer)
    tok.save(str(out / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": "<|begin_of_text|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|end_of_text|>",
        "model_max_length": 1_000_000,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {
                "content": t,
                "special": t not in ("<tool_call>", "</tool_call>", "<think>", "</think>"),
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "single_word": False,
            }
            for t in SPECIAL_TOKENS
        },
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    (out / "special_tokens_map.json").write_text(
        json.dumps(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": "<|im_end|>",
                "pad_token": "<|end_of_text|>",
            }
        )
    )
    return int(tok.get_vocab_size())


def _weights(spec: TinyModelSpec, vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    h, i, d = spec.hidden_size, spec.intermediate_size, spec.head_dim
    q, kv = spec.num_attention_heads * d, spec.num_key_value_heads * d

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    t: dict[str, np.ndarray] = {
        "model.embed_tokens.weight": w(vocab, h),
        "model.norm.weight": np.ones(h, np.float32),
        "lm_head.weight": w(vocab, h),
    }
    for n in range(spec.num_hidden_layers):
        p = f"model.layers.{n}."
        t[p + "input_layernorm.weight"] = np.ones(h, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(h, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(q, h)
        t[p + "self_attn.k_proj.weight"] = w(kv, h)
        t[p + "self_attn.v_proj.weight"] = w(kv, h)
        t[p + "self_attn.o_proj.weight"] = w(h, q)
        t[p + "mlp.gate_proj.weight"] = w(i, h)
        t[p + "mlp.up_proj.weight"] = w(i, h)
        t[p + "mlp.down_proj.weight"] = w(h, i)
    return t


def _to_bf16_bytes(a: np.ndarray) -> bytes:
    """Round fp32 to bf16 (round-to-nearest-even) and return the raw little-endian bytes."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return rounded.tobytes()


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """Write bf16 tensors in the safetensors format (8-byte header length, JSON, data)."""
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        raw = _to_bf16_bytes(tensors[name])
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(raw)],
        }
        blobs.append(raw)
        offset += len(raw)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    with path.open("wb") as f:
        f.write(len(head).to_bytes(8, "little"))
        f.write(head)
        for b in blobs:
            f.write(b)


def generate_tiny_model(out_dir: Path, spec: TinyModelSpec | None = None) -> Path:
    """Write a servable tiny Llama checkpoint to ``out_dir`` and return that path.

    Reuses ``out_dir`` when it already holds a model of the same spec fingerprint.

    Raises:
        ValueError: if ``hidden_size != num_attention_heads * head_dim`` or ``head_dim < 32``.
    """
    spec = spec or TinyModelSpec()
    if spec.hidden_size != spec.num_attention_heads * spec.head_dim:
        raise ValueError(
            f"tiny model: hidden_size={spec.hidden_size} must equal "
            f"num_attention_heads*head_dim={spec.num_attention_heads * spec.head_dim}"
        )
    if spec.head_dim < 32:
        raise ValueError(f"tiny model: head_dim={spec.head_dim}; vLLM's CPU attention needs >= 32")
    out_dir = Path(out_dir)
    stamp = out_dir / ".sparkpair-tiny-model"
    if stamp.exists() and stamp.read_text().strip() == spec.fingerprint():
        return out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab = _train_tokenizer(out_dir, spec.vocab_size)
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(out_dir / "tokenizer.json"))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": spec.hidden_size,
        "intermediate_size": spec.intermediate_size,
        "num_hidden_layers": spec.num_hidden_layers,
        "num_attention_heads": spec.num_attention_heads,
        "num_key_value_heads": spec.num_key_value_heads,
        "head_dim": spec.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": spec.max_position_embeddings,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "vocab_size": vocab,
        "bos_token_id": tok.token_to_id("<|begin_of_text|>"),
        "eos_token_id": tok.token_to_id("<|im_end|>"),
        "pad_token_id": tok.token_to_id("<|end_of_text|>"),
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=2))
    (out_dir / "generation_config.json").write_text(
        json.dumps({"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]})
    )
    _write_safetensors(out_dir / "model.safetensors", _weights(spec, vocab))
    stamp.write_text(spec.fingerprint())
    return out_dir

"""With speculative decoding on, vLLM 0.33 returns the **target** model's logprobs for the tokens it
accepts, which the health suite's tolerant comparison reads (docs/reference/numerics.md, "vLLM
returns the target model's logprobs with speculation on").

The code path DSpark's verify step takes in the default model runner
(``v1/worker/gpu_model_runner.py`` -> ``v1/sample/rejection_sampler.py`` ``RejectionSampler``) is
run on CPU torch, its Triton kernel under ``TRITON_INTERPRET=1``: a greedy request whose draft
proposed two tokens, the first of which the target agrees with and the second it does not,
with a draft distribution (DSpark's ``draft_sample_method: probabilistic``) unlike the target's.
"""

from __future__ import annotations

import pytest
import stacklib

pytestmark = pytest.mark.stack

DRIVER = r'''
import json, torch
from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.sample.sampler import Sampler
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.logits_processor import LogitsProcessors
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

V = 16
torch.manual_seed(0)
meta = SpecDecodeMetadata.make_dummy([[3, 7]], torch.device("cpu"))
meta.target_logits_indices = torch.tensor([0, 1], dtype=torch.int32)
meta.bonus_logits_indices = torch.tensor([2], dtype=torch.int32)
logits = torch.randn(3, V) * 2
logits[0, 3] += 8   # the target agrees with draft token 0 ...
logits[1, 5] += 8   # ... and prefers 5 to draft token 7 at position 1
draft_probs = torch.full((2, V), 0.01)
draft_probs[0, 3] = draft_probs[1, 7] = 0.86   # the draft's own (other) distribution
sm = SamplingMetadata(
    temperature=None, all_greedy=True, all_random=False, top_p=None, top_k=None, generators={},
    max_num_logprobs=5, no_penalties=True, prompt_token_ids=None,
    frequency_penalties=torch.zeros(1), presence_penalties=torch.zeros(1),
    repetition_penalties=torch.ones(1), output_token_ids=[[]], allowed_token_ids_mask=None,
    bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
)
out = RejectionSampler(Sampler())(meta, draft_probs, logits, sm)
print("REPORT " + json.dumps({
    "sampled": out.sampled_token_ids.tolist(),
    "ids": out.logprobs_tensors.logprob_token_ids.tolist(),
    "lps": out.logprobs_tensors.logprobs.tolist(),
    "target": torch.log_softmax(logits.float(), -1).tolist(),
    "draft": torch.log(draft_probs).tolist(),
}))
'''


def test_accepted_and_corrected_tokens_carry_the_target_models_logprobs(stack_env: dict[str, str]) -> None:
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    r, _ = stacklib.run_report(DRIVER, env, timeout=600)
    assert r["sampled"] == [[3, 5, -1]], "draft token 3 accepted, 7 rejected and replaced by the target's 5"
    for pos, tok in ((0, 3), (1, 5)):
        ids, lps, target = r["ids"][pos], r["lps"][pos], r["target"][pos]
        assert ids[0] == tok, "the sampled token comes first (the API's order)"
        assert lps[0] == pytest.approx(target[tok], abs=1e-5), (pos, lps[0], target[tok])
        top5 = sorted(range(len(target)), key=lambda i: -target[i])[:5]
        assert ids[1:] == top5 and lps[1:] == pytest.approx([target[i] for i in top5], abs=1e-5)
        assert abs(lps[0] - r["draft"][pos][tok]) > 0.05, "not the draft's logprob"

"""With speculative decoding on, vLLM returns the **target** model's logprobs for the tokens it
accepts and for the token that replaces a rejected draft, which the health suite's tolerant
comparison reads (docs/reference/numerics.md, "vLLM returns the target model's logprobs with
speculation on"). Runs on every release the stack tier runs (marker ``per_version``).

Each release's own verify step is run on CPU torch, its Triton kernels under ``TRITON_INTERPRET=1``,
on the same case: one greedy request whose draft proposed two tokens, the first of which the target
agrees with and the second it does not, with a draft distribution (DSpark's
``draft_sample_method: probabilistic``) unlike the target's. One driver per release, because the
interface moved (docs/reference/vllm-0.34.md, "Renamed or re-signed names the tests call"):

* 0.33.0: ``v1/sample/rejection_sampler.py`` ``RejectionSampler`` (what the default model runner,
  ``v1/worker/gpu_model_runner.py``, calls), given ``SpecDecodeMetadata``, the draft's
  probabilities, the target's logits and ``SamplingMetadata``.
* 0.34.0: ``v1/worker/gpu/spec_decode/rejection_sampler.py`` ``RejectionSampler.__call__`` whole
  (the draft-token gather, ``rejection_sample``'s kernels, ``compute_topk_scores``, the
  sampled/rejected counts), with the release's own ``Sampler``, ``RequestState`` and
  ``DraftLogitsCache`` as the model runner (``v1/worker/gpu/model_runner.py``) builds them, and an
  ``InputBatch`` of one decode step. Not covered on 0.34.0: how the model runner fills that batch
  (positions, logits indices) and the draft cache from a real DSpark draft pass, and the
  ``SpeculativeConfig`` of ``method: dspark`` (it needs the target model's config): the sampler is
  given one of ``method: ngram``, because ``RejectionSampler`` reads only ``num_speculative_tokens``
  and the verification fields (``rejection_sample_method``: ``standard``, the default the DSpark
  profile also gets; adaptive verification off), never the method. This CPU has no pinned-memory
  allocator, and the platform is told so, so vLLM's buffers take their own pageable-memory path
  (``buffer_utils.NonUvaBuffer``) instead of UVA.
"""

from __future__ import annotations

import pytest
import stacklib

pytestmark = [pytest.mark.stack, pytest.mark.per_version]

#: Both drivers: V-token vocabulary, draft tokens 3 and 7; the target's logits favour 3 at the
#: first verified position and 5 (not the draft's 7) at the second.
CASE = r'''
import json, torch
V = 16
torch.manual_seed(0)
logits = torch.randn(3, V) * 2
logits[0, 3] += 8   # the target agrees with draft token 0 ...
logits[1, 5] += 8   # ... and prefers 5 to draft token 7 at position 1
draft_probs = torch.full((2, V), 0.01)
draft_probs[0, 3] = draft_probs[1, 7] = 0.86   # the draft's own (other) distribution
'''

REPORT = r'''
print("REPORT " + json.dumps({
    "sampled": sampled,
    "ids": out.logprobs_tensors.logprob_token_ids.tolist(),
    "lps": out.logprobs_tensors.logprobs.tolist(),
    "target": torch.log_softmax(logits.float(), -1).tolist(),
    "draft": draft_logprobs.tolist(),
}))
'''

DRIVER_033 = CASE + r'''
from vllm.v1.sample.rejection_sampler import RejectionSampler
from vllm.v1.sample.sampler import Sampler
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.logits_processor import LogitsProcessors
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata

meta = SpecDecodeMetadata.make_dummy([[3, 7]], torch.device("cpu"))
meta.target_logits_indices = torch.tensor([0, 1], dtype=torch.int32)
meta.bonus_logits_indices = torch.tensor([2], dtype=torch.int32)
sm = SamplingMetadata(
    temperature=None, all_greedy=True, all_random=False, top_p=None, top_k=None, generators={},
    max_num_logprobs=5, no_penalties=True, prompt_token_ids=None,
    frequency_penalties=torch.zeros(1), presence_penalties=torch.zeros(1),
    repetition_penalties=torch.ones(1), output_token_ids=[[]], allowed_token_ids_mask=None,
    bad_words_token_ids={}, logitsprocs=LogitsProcessors(),
)
out = RejectionSampler(Sampler())(meta, draft_probs, logits, sm)
sampled = [[t for t in row if t != -1] for row in out.sampled_token_ids.tolist()]
draft_logprobs = torch.log(draft_probs)
''' + REPORT

DRIVER_034 = CASE + r'''
import numpy as np
from vllm.platforms import current_platform
type(current_platform).device_type = "cpu"
# torch here refuses pin_memory=True (no accelerator): say so, so UVA buffers fall back to pageable.
type(current_platform).is_pin_memory_available = classmethod(lambda c: False)
from vllm.config import DeviceConfig, SpeculativeConfig, VllmConfig
from vllm.sampling_params import SamplingParams
from vllm.v1.worker.gpu.input_batch import InputBatch
from vllm.v1.worker.gpu.sample.sampler import Sampler
from vllm.v1.worker.gpu.spec_decode.draft_logits import DraftLogitsCache
from vllm.v1.worker.gpu.spec_decode.rejection_sampler import RejectionSampler
from vllm.v1.worker.gpu.states import RequestState

K, CPU = 2, torch.device("cpu")
spec = SpeculativeConfig(method="ngram", num_speculative_tokens=K, prompt_lookup_max=2, prompt_lookup_min=1)
assert spec.rejection_sample_method == "standard" and not spec.enable_adaptive_verification
req = RequestState(max_num_reqs=2, max_model_len=32, max_num_batched_tokens=32,
                   num_speculative_steps=K, vocab_size=V, device=CPU)
sampler = Sampler(VllmConfig(device_config=DeviceConfig(device="cpu")), 2, V, CPU, req,
                  num_speculative_tokens=K + 1)
prompt = [1, 2, 4, 6]
req.add_request("r0", len(prompt), prompt, num_computed_tokens=0, max_tokens=8)
r = req.req_id_to_index["r0"]
sampler.add_request(r, SamplingParams(temperature=0.0, logprobs=5))
req.apply_staged_writes()
sampler.apply_staged_writes()
# The decode step after the prefill: the last sampled token (9) at position 4, then the draft's 3, 7.
i32 = dict(dtype=torch.int32)
batch = InputBatch(
    req_ids=["r0"], num_reqs=1, num_reqs_after_padding=1,
    idx_mapping=torch.tensor([r]), idx_mapping_np=np.array([r], dtype=np.intp),
    expanded_idx_mapping=torch.tensor([r, r, r]), expanded_local_pos=torch.tensor([0, 1, 2], **i32),
    num_scheduled_tokens=np.array([3], dtype=np.int32), num_tokens=3, num_tokens_after_padding=3,
    num_draft_tokens=K, num_draft_tokens_per_req=np.array([K], dtype=np.int32),
    query_start_loc=torch.tensor([0, 3], **i32), query_start_loc_np=np.array([0, 3], dtype=np.int32),
    seq_lens=torch.tensor([7], **i32), seq_lens_cpu_upper_bound=torch.tensor([7], **i32),
    dcp_local_seq_lens=None, num_computed_tokens_np=np.array([4], dtype=np.int32),
    prefill_len_np=np.array([4], dtype=np.int32),
    num_computed_prefill_tokens_np=np.array([4], dtype=np.int32),
    is_prefilling_np=np.zeros(1, dtype=np.bool_), has_prefill=False, decode_graph_eligible=True,
    input_ids=torch.tensor([9, 3, 7], **i32), positions=torch.tensor([4, 5, 6]),
    is_padding=torch.zeros(3, dtype=torch.bool), logits_indices=torch.tensor([0, 1, 2]),
    cu_num_logits=torch.tensor([0, 3], **i32), cu_num_logits_np=np.array([0, 3], dtype=np.int32),
    has_structured_output_reqs=False, prompt_lens=None,
)
draft = DraftLogitsCache(2, K, V, dtype=torch.float32, fill=0.0, device=CPU)
draft.values[r] = torch.log(draft_probs)   # 0.34 caches the draft's logits, not its probabilities
out = RejectionSampler(sampler, spec, CPU)(logits, batch, draft)
sampled = [out.sampled_token_ids[0, : int(out.num_sampled[0])].tolist()]
assert int(out.num_rejected[0]) == 1, out.num_rejected
draft_logprobs = torch.log_softmax(draft.values[r], -1)
''' + REPORT

#: The driver of each release the stack tier runs (stacklib.STACK_VLLM_VERSIONS).
DRIVERS = {"0.33.0": DRIVER_033, "0.34.0": DRIVER_034}


def test_every_release_of_the_tier_has_a_driver() -> None:
    assert set(DRIVERS) == set(stacklib.STACK_VLLM_VERSIONS), (
        f"drivers for {sorted(DRIVERS)}; the stack tier runs {list(stacklib.STACK_VLLM_VERSIONS)}: "
        "write the new release's driver from its rejection sampler")


def test_accepted_and_corrected_tokens_carry_the_target_models_logprobs(stack_env: dict[str, str]) -> None:
    env = dict(stack_env, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    r, _ = stacklib.run_report(DRIVERS[str(stacklib.installed_vllm())], env, timeout=600)
    assert r["sampled"] == [[3, 5]], "draft token 3 accepted, 7 rejected and replaced by the target's 5"
    for pos, tok in ((0, 3), (1, 5)):
        ids, lps, target = r["ids"][pos], r["lps"][pos], r["target"][pos]
        assert ids[0] == tok, "the sampled token comes first (the API's order)"
        assert lps[0] == pytest.approx(target[tok], abs=1e-5), (pos, lps[0], target[tok])
        top5 = sorted(range(len(target)), key=lambda i: -target[i])[:5]
        assert ids[1:] == top5 and lps[1:] == pytest.approx([target[i] for i in top5], abs=1e-5)
        assert abs(lps[0] - r["draft"][pos][tok]) > 0.05, "not the draft's logprob"

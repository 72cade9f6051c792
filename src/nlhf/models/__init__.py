"""Policies and sampling: any Hugging Face causal LM, its reference, KV-cached decoding.

    from nlhf.models import Policy, PolicyConfig, sample, sample_pair, mixture_logits
    policy = Policy(model, tokenizer, PolicyConfig(lora_r=16))
    y, y_mix = sample_pair(policy, prompt_ids, attention_mask, 32,
                           reference=policy.reference, beta=0.125)

Modules: ``policy`` (Policy, PolicyConfig, the reference), ``logprobs`` (log-probs of given
completions), ``sampling`` (the decode loop, per-row generators), ``mixture`` (π^(1−β) μ^β
per token), ``warping`` (temperature, top-k, top-p, noise), ``text`` (prompts to tokens,
completions to text), ``lm`` (loading and calling HF/peft models), ``kv_cache`` (a KV cache
filled in place), ``tiny`` (random-init models for tests).
Benchmark: ``bench/sampling_speed.py``.
"""

from nlhf.models.lm import AdapterDisabled, load_causal_lm, load_tokenizer
from nlhf.models.logprobs import completion_logprobs, position_ids_from_mask, token_logprobs
from nlhf.models.mixture import mixture_logits
from nlhf.models.policy import Policy, PolicyConfig
from nlhf.models.sampling import SampleOutput, row_generators, sample, sample_pair
from nlhf.models.text import decode_completions, eos_token_ids, pad_token_id, tokenize_prompts
from nlhf.models.warping import SamplingSettings, warp

__all__ = [
    "AdapterDisabled",
    "Policy",
    "PolicyConfig",
    "SampleOutput",
    "SamplingSettings",
    "completion_logprobs",
    "decode_completions",
    "eos_token_ids",
    "load_causal_lm",
    "load_tokenizer",
    "mixture_logits",
    "pad_token_id",
    "position_ids_from_mask",
    "row_generators",
    "sample",
    "sample_pair",
    "token_logprobs",
    "tokenize_prompts",
    "warp",
]

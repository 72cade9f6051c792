"""Tiny policy folders for the tournament tests: a base model, LoRA adapters, a biased model."""

from pathlib import Path

import torch

from nlhf.models import Policy, PolicyConfig
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm


def tiny(tok, seed=0):
    return tiny_causal_lm(
        "gpt2",
        vocab_size=len(tok),
        seed=seed,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )


def build_folders(root: Path) -> dict[str, Path]:
    """base/ (random GPT-2), ad1/ and ad2/ (LoRA on base), aaa/ (a full model that says 'a')."""
    from transformers import AutoModelForCausalLM

    tok = byte_tokenizer()
    paths = {name: root / name for name in ("base", "ad1", "ad2", "aaa")}
    base = tiny(tok)
    base.save_pretrained(paths["base"])
    tok.save_pretrained(paths["base"])
    for seed, name in ((1, "ad1"), (2, "ad2")):
        policy = Policy(
            AutoModelForCausalLM.from_pretrained(paths["base"]), tok, PolicyConfig(lora_r=4)
        )
        torch.manual_seed(seed)
        with torch.no_grad():
            for n, p in policy.model.named_parameters():
                if "lora_B" in n:
                    p.normal_(0.0, 0.3)
        policy.save(paths[name])
    biased = tiny(tok)
    with torch.no_grad():  # the final hidden state becomes the (tied) embedding of 'a'
        a = biased.transformer.wte.weight[tok.encode("a", add_special_tokens=False)[0]]
        biased.transformer.ln_f.weight.zero_()
        biased.transformer.ln_f.bias.copy_(30.0 * a / a.dot(a))
    biased.save_pretrained(paths["aaa"])
    tok.save_pretrained(paths["aaa"])
    return paths

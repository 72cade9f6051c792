"""Tiny random-init causal LMs and a byte-level tokenizer, built in process (no downloads).

For tests, smoke runs and examples where the real model does not matter:

    from nlhf.models.tiny import byte_tokenizer, tiny_byte_lm, tiny_causal_lm
    tok = byte_tokenizer()                    # 256 byte tokens, <|endoftext|> = 256, <pad> = 257
    model = tiny_causal_lm("llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                           pad_token_id=tok.pad_token_id)
    model, tok = tiny_byte_lm("llama")        # the same two in one call
    randomize_lora(policy.model, std=0.3, seed=3)  # a LoRA adapter that changes the logits
"""

from __future__ import annotations

from typing import Literal

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerFast,
)

EOS = "<|endoftext|>"
PAD = "<pad>"


def tiny_causal_lm(
    kind: Literal["gpt2", "llama"] = "gpt2",
    vocab_size: int = 64,
    seed: int = 0,
    layers: int = 2,
    hidden: int = 32,
    heads: int = 2,
    max_positions: int = 128,
    eos_token_id: int | None = 1,
    pad_token_id: int | None = 0,
) -> torch.nn.Module:
    """A freshly initialized GPT-2 or Llama causal LM (eval mode, fp32), seeded."""
    torch.manual_seed(seed)
    ids = {"eos_token_id": eos_token_id, "bos_token_id": eos_token_id, "pad_token_id": pad_token_id}
    if kind == "gpt2":
        config = GPT2Config(
            vocab_size=vocab_size,
            n_layer=layers,
            n_head=heads,
            n_embd=hidden,
            n_positions=max_positions,
            **ids,
        )
        model = GPT2LMHeadModel(config)
    elif kind == "llama":
        config = LlamaConfig(
            vocab_size=vocab_size,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            hidden_size=hidden,
            intermediate_size=2 * hidden,
            max_position_embeddings=max_positions,
            tie_word_embeddings=False,
            **ids,
        )
        model = LlamaForCausalLM(config)
    else:
        raise ValueError(f"kind must be 'gpt2' or 'llama', got {kind!r}")
    return model.eval()


def byte_tokenizer():
    """A byte-level tokenizer: one token per byte (ids 0-255), then EOS (256) and pad (257).

    Left padding, EOS also serving as BOS; any text round-trips exactly.
    """
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    vocab[EOS], vocab[PAD] = len(vocab), len(vocab) + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([EOS, PAD])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=EOS,
        eos_token=EOS,
        unk_token=EOS,
        pad_token=PAD,
        padding_side="left",
    )


def tiny_byte_lm(kind: Literal["gpt2", "llama"] = "gpt2", seed: int = 0, **sizes):
    """A :func:`tiny_causal_lm` sized to :func:`byte_tokenizer`, with its end and pad ids, and
    the tokenizer: ``(model, tokenizer)``.  ``sizes``: layers, hidden, heads, max_positions."""
    tok = byte_tokenizer()
    model = tiny_causal_lm(
        kind,
        vocab_size=len(tok),
        seed=seed,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        **sizes,
    )
    return model, tok


def randomize_lora(model: torch.nn.Module, std: float, seed: int) -> None:
    """Draw every LoRA B matrix of a peft model from N(0, std²) (peft starts them at zero, so
    a fresh adapter leaves the logits as they are)."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, weight in model.named_parameters():
            if "lora_B" in name:
                weight.normal_(0.0, std)

"""Activation checkpointing (``gradient_checkpointing=true``): the same log-probs and gradients
as keeping the activations, on every forward path (distinct prompts, prompts shared by several
completions, LoRA), with fewer bytes saved for the backward pass, and the same training run."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

import tiny_train
from nlhf.config import ConfigError
from nlhf.models import Policy, PolicyConfig
from nlhf.models.lm import drops_cache
from nlhf.models.policy import checkpoint_activations
from nlhf.models.tiny import tiny_causal_lm

VOCAB = 48


def policy(kind: str, checkpointed: bool, lora_r: int = 0) -> Policy:
    model = tiny_causal_lm(kind, vocab_size=VOCAB, layers=3, hidden=32, seed=3)
    config = PolicyConfig(lora_r=lora_r, gradient_checkpointing=checkpointed)
    return Policy(model, None, config)


def batch(copies: int, repeated: bool):
    """Two left-padded prompts, each followed by ``copies`` right-padded completions; with
    ``repeated`` one prompt row per completion, else each prompt once (k per prompt)."""
    ids = torch.tensor([[0, 3, 4, 9], [5, 2, 1, 7]])
    mask = torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])
    rows = 2 * copies
    tokens = torch.randint(2, VOCAB, (rows, 5), generator=torch.Generator().manual_seed(0))
    cmask = torch.ones(rows, 5, dtype=torch.long)
    cmask[0, 3:] = 0
    if repeated:
        ids, mask = ids.repeat(copies, 1), mask.repeat(copies, 1)
    return ids, mask, tokens, cmask


def saved_bytes(fn) -> tuple[torch.Tensor, int]:
    """``fn()``'s result and the bytes of the tensors autograd saved for its backward."""
    total = 0

    def pack(tensor):
        nonlocal total
        total += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        out = fn()
    return out, total


def trained(p: Policy) -> list[nn.Parameter]:
    return [param for param in p.model.parameters() if param.requires_grad]


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize(("copies", "repeated"), [(1, True), (2, True), (2, False)])
@pytest.mark.parametrize("lora_r", [0, 4])
def test_checkpointed_logprobs_and_gradients_equal_the_kept_activations(
    kind, copies, repeated, lora_r
):
    data = batch(copies, repeated)
    results = []
    for checkpointed in (False, True):
        p = policy(kind, checkpointed, lora_r)
        lp, saved = saved_bytes(lambda p=p: p.logprobs(*data))
        grads = torch.autograd.grad((lp * data[3]).sum(), trained(p))
        results.append((lp, grads, saved))
    (lp, grads, saved), (lp_c, grads_c, saved_c) = results
    torch.testing.assert_close(lp_c, lp, rtol=1e-5, atol=1e-6)
    for g_c, g in zip(grads_c, grads, strict=True):
        torch.testing.assert_close(g_c, g, rtol=1e-5, atol=1e-6)
    assert saved_c < saved  # the layers kept their inputs only


def test_a_checkpointed_model_never_shares_a_prompt_cache_across_forwards():
    """Prompts repeated over completions run once, their cache continued by the completions'
    forward, except under checkpointing in train mode, where transformers drops the cache
    (GPT-2 also without autograd): then each completion runs after its own prompt."""
    p = policy("gpt2", checkpointed=True)
    assert p.model.training and drops_cache(p.model)
    assert not drops_cache(p.reference)  # the frozen copy keeps its activations
    assert not drops_cache(policy("gpt2", checkpointed=False).model)
    lora = policy("gpt2", checkpointed=True, lora_r=4)
    assert drops_cache(lora.reference)  # the same layers with the adapter off
    plain = policy("gpt2", checkpointed=False)
    data = batch(2, repeated=False)
    with torch.no_grad():
        torch.testing.assert_close(p.logprobs(*data), plain.logprobs(*data))


def test_an_architecture_without_checkpointing_is_a_config_error():
    model = tiny_causal_lm("gpt2", vocab_size=VOCAB)
    model.supports_gradient_checkpointing = False
    with pytest.raises(ConfigError, match="gradient_checkpointing: GPT2LMHeadModel"):
        checkpoint_activations(model)


@pytest.mark.parametrize("name", ["nash-md", "online-dpo", "ppo"])
def test_a_checkpointed_run_trains_as_the_plain_one(name, tmp_path):
    """Two steps from the same seed: the same logged loss and KL with and without it."""
    logs = []
    for checkpointed in ("false", "true"):
        out = tmp_path / checkpointed
        overrides = ["steps=2", f"gradient_checkpointing={checkpointed}"]
        trainer, config = tiny_train.make(name, str(out), overrides)
        tiny_train.train(name, trainer, config)
        rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
        logs.append([(row["loss"], row["kl"]) for row in rows if "loss" in row])
    assert len(logs[0]) == 2
    for plain, checkpointed in zip(*logs, strict=True):
        assert checkpointed == pytest.approx(plain, rel=1e-4, abs=1e-6)

"""fuse_gelu: GPT-2's tanh-GELU runs as one fused op with the same outputs and gradients."""

import copy

import torch
from transformers.activations import ACT2CLS

from nlhf.models import Policy, PolicyConfig
from nlhf.models.activations import SLOW_GELU_NAMES, fuse_gelu
from nlhf.models.reward_model import RewardModel
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm

SLOW = tuple(ACT2CLS[name] for name in SLOW_GELU_NAMES)
FUSED = ACT2CLS["gelu_pytorch_tanh"]


def count(model, kind):
    return sum(isinstance(m, kind) for m in model.modules())


def loss_and_grads(model, ids):
    model.zero_grad()
    loss = model(ids).logits.logsumexp(-1).mean()
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def test_gpt2_gelu_is_fused_with_the_same_outputs_and_gradients():
    model = tiny_causal_lm("gpt2", vocab_size=64, layers=3, hidden=32)
    assert count(model, SLOW) == 3  # gelu_new, one per block
    slow = copy.deepcopy(model)
    assert fuse_gelu(model) == 3
    assert count(model, SLOW) == 0 and count(model, FUSED) == 3
    assert fuse_gelu(model) == 0  # nothing left to swap
    ids = torch.randint(2, 64, (3, 9))
    loss, grads = loss_and_grads(model, ids)
    loss_slow, grads_slow = loss_and_grads(slow, ids)
    torch.testing.assert_close(loss, loss_slow, rtol=0, atol=1e-6)
    for g, g_slow in zip(grads, grads_slow, strict=True):
        torch.testing.assert_close(g, g_slow, rtol=1e-4, atol=1e-6)


def test_gelu_fast_is_fused_too_and_silu_is_left_alone():
    model = tiny_causal_lm("gpt2", layers=2)
    for block in model.transformer.h:
        block.mlp.act = ACT2CLS["gelu_fast"]()
    assert fuse_gelu(model) == 2
    llama = tiny_causal_lm("llama", layers=2)
    before = [type(m) for m in llama.modules()]
    assert fuse_gelu(llama) == 0
    assert [type(m) for m in llama.modules()] == before


def test_policies_and_judges_run_the_fused_gelu():
    tok = byte_tokenizer()
    for lora_r in (0, 2):
        model = tiny_causal_lm("gpt2", vocab_size=len(tok), layers=2)
        policy = Policy(model, tok, PolicyConfig(lora_r=lora_r))
        assert count(policy.model, SLOW) == 0 and count(policy.model, FUSED) == 2
        if not lora_r:  # the frozen reference copy is made from the fused model
            assert count(policy.reference, SLOW) == 0
    from transformers import GPT2Config, GPT2ForSequenceClassification

    config = GPT2Config(vocab_size=len(tok), n_layer=2, n_embd=16, n_head=2, num_labels=1)
    judge = RewardModel(GPT2ForSequenceClassification(config), tok)
    assert count(judge, SLOW) == 0 and count(judge, FUSED) == 2

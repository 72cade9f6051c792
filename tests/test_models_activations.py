"""fuse_gelu: GPT-2's tanh-GELU runs as one fused op; lean_swiglu: a Llama MLP keeps less for
its backward pass. Both with the same outputs and gradients."""

import copy

import torch
from transformers.activations import ACT2CLS

from nlhf.models import Policy, PolicyConfig
from nlhf.models.activations import SLOW_GELU_NAMES, fuse_gelu, lean_swiglu
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


def assert_same_loss_and_grads(model, other, ids, loss_atol, rtol, atol):
    loss, grads = loss_and_grads(model, ids)
    loss_other, grads_other = loss_and_grads(other, ids)
    torch.testing.assert_close(loss, loss_other, rtol=0, atol=loss_atol)
    for g, g_other in zip(grads, grads_other, strict=True):
        torch.testing.assert_close(g, g_other, rtol=rtol, atol=atol)


def test_gpt2_gelu_is_fused_with_the_same_outputs_and_gradients():
    model = tiny_causal_lm("gpt2", vocab_size=64, layers=3, hidden=32)
    assert count(model, SLOW) == 3  # gelu_new, one per block
    slow = copy.deepcopy(model)
    assert fuse_gelu(model) == 3
    assert count(model, SLOW) == 0 and count(model, FUSED) == 3
    assert fuse_gelu(model) == 0  # nothing left to swap
    ids = torch.randint(2, 64, (3, 9))
    assert_same_loss_and_grads(model, slow, ids, loss_atol=1e-6, rtol=1e-4, atol=1e-6)


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


def llama_with_bias(layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, mlp_bias=True,
    )  # fmt: skip
    return LlamaForCausalLM(config).double()


def saved_elements(model, ids):
    """Elements of the distinct tensors autograd keeps for the backward pass of one loss."""
    seen = {}

    def pack(t):
        seen[(t.untyped_storage().data_ptr(), t.storage_offset(), t.shape)] = t.numel()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids).logits.logsumexp(-1).mean()
    return sum(seen.values())


def test_lean_swiglu_has_the_same_outputs_and_gradients_and_saves_less():
    for model in (tiny_causal_lm("llama", layers=2).double(), llama_with_bias()):
        plain = copy.deepcopy(model)
        assert lean_swiglu(model) == 2
        ids = torch.randint(2, 64, (3, 9))
        assert_same_loss_and_grads(model, plain, ids, loss_atol=1e-12, rtol=1e-9, atol=1e-12)
        # two of the four (rows × positions × intermediate) tensors per MLP are not kept
        width = model.config.intermediate_size
        fewer = saved_elements(plain, ids) - saved_elements(model, ids)
        assert fewer == 2 * 2 * ids.numel() * width


def test_lean_swiglu_leaves_adapters_gpt2_and_the_reference_copy_right():
    tok = byte_tokenizer()
    assert lean_swiglu(tiny_causal_lm("gpt2", layers=2)) == 0
    ids = torch.randint(2, 64, (2, 7))
    for lora_r in (0, 2):
        model = tiny_causal_lm("llama", vocab_size=len(tok), layers=2)
        plain = copy.deepcopy(model)
        policy = Policy(model, tok, PolicyConfig(lora_r=lora_r, reference_dtype="float32"))
        mlp = (
            policy.model.get_base_model().model.layers[0].mlp
            if lora_r
            else model.model.layers[0].mlp
        )
        assert mlp.forward.__func__.__name__ == "_swiglu_forward"
        if lora_r:  # the adapter wraps the projections: the MLP runs as written
            torch.testing.assert_close(policy.model(ids).logits, plain(ids).logits)
            continue
        with torch.no_grad():  # the reference copy's MLPs run its own weights
            for p in policy.model.parameters():
                p.add_(0.5)
        torch.testing.assert_close(policy.reference(ids).logits, plain(ids).logits)

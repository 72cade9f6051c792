"""Token log-probs through the LM head a chunk at a time (nlhf.models.lm_head): the values and
gradients of the full logits' log-softmax, nothing of the logits' size kept for the backward
pass, and the completion log-probs and exact KL of Llama and GPT-2 policies unchanged."""

import pytest
import torch

from nlhf.losses import position_kl
from nlhf.models import Policy, PolicyConfig
from nlhf.models import lm_head as lm_head_module
from nlhf.models import logprobs as logprobs_module
from nlhf.models.lm import AdapterDisabled
from nlhf.models.lm_head import head_kl, head_logprobs, plain_head
from nlhf.models.logprobs import (
    completion_logprobs,
    completion_logprobs_and_kl,
    completion_logprobs_and_logits,
    token_logprobs,
)
from nlhf.models.tiny import byte_tokenizer, randomize_lora, tiny_causal_lm


def head_inputs(n=37, d=8, vocab=50, dtype=torch.float64, bias=True):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(n, d, generator=g, dtype=dtype).requires_grad_()
    weight = (2 * torch.randn(vocab, d, generator=g, dtype=dtype)).requires_grad_()
    b = torch.randn(vocab, generator=g, dtype=dtype).requires_grad_() if bias else None
    tokens = torch.randint(0, vocab, (n,), generator=g)
    return hidden, weight, b, tokens


@pytest.mark.parametrize("chunk_elements", [50, 7 * 50, 1 << 22])  # 1 row, 7 rows, all rows
@pytest.mark.parametrize("bias", [True, False])
def test_head_logprobs_equal_the_full_log_softmax_with_the_same_gradients(
    chunk_elements, bias, monkeypatch
):
    monkeypatch.setattr(lm_head_module, "CHUNK_ELEMENTS", chunk_elements)
    hidden, weight, b, tokens = head_inputs(bias=bias)
    upstream = torch.randn(hidden.shape[0], dtype=torch.float64)
    inputs = [t for t in (hidden, weight, b) if t is not None]

    expected = token_logprobs(torch.nn.functional.linear(hidden, weight, b), tokens)
    grads = torch.autograd.grad((expected * upstream).sum(), inputs)
    lp = head_logprobs(hidden, weight, b, tokens)
    chunked = torch.autograd.grad((lp * upstream).sum(), inputs)
    assert lp.dtype == torch.float32  # log-probs in fp32, as token_logprobs gives them
    torch.testing.assert_close(lp, expected.float())
    for got, want in zip(chunked, grads, strict=True):  # both through fp32 logits
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_nothing_of_the_logits_size_is_kept_for_the_backward_pass(monkeypatch):
    monkeypatch.setattr(lm_head_module, "CHUNK_ELEMENTS", 400)  # 8 rows of 50
    hidden, weight, b, tokens = head_inputs(n=64, d=8, vocab=50, dtype=torch.float32)
    largest = []

    def pack(t):
        largest.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        head_logprobs(hidden, weight, b, tokens)
    assert max(largest) < 64 * 50 // 2  # the weight (400) and hidden (512), not N × V (3200)
    largest.clear()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        token_logprobs(torch.nn.functional.linear(hidden, weight, b), tokens)
    assert max(largest) == 64 * 50  # the full path keeps the logits


def test_head_kl_equals_the_kl_of_the_full_logits(monkeypatch):
    monkeypatch.setattr(lm_head_module, "CHUNK_ELEMENTS", 150)
    hidden, weight, b, _ = head_inputs(dtype=torch.float32)
    reference = torch.randn(hidden.shape[0], weight.shape[0])
    expected = position_kl(torch.nn.functional.linear(hidden, weight, b), reference)
    torch.testing.assert_close(head_kl(hidden, weight, b, reference), expected.detach())


def test_a_bfloat16_heads_weight_gradient_is_summed_in_float32(monkeypatch):
    monkeypatch.setattr(lm_head_module, "CHUNK_ELEMENTS", 50)  # 1024 chunks of one row each
    hidden, weight, _, tokens = head_inputs(n=1024, dtype=torch.float64, bias=False)
    h16 = hidden.detach().bfloat16().requires_grad_()
    w16 = weight.detach().bfloat16().requires_grad_()
    (got,) = torch.autograd.grad(head_logprobs(h16, w16, None, tokens).sum(), w16)
    w64 = w16.detach().double().requires_grad_()
    (want,) = torch.autograd.grad(head_logprobs(h16.double(), w64, None, tokens).sum(), w64)
    assert got.dtype == torch.bfloat16
    # each chunk's gradient rounded to bf16 and the sum once: 0.2% (a bf16 sum: 2%)
    assert float((got.double() - want).norm() / want.norm()) < 5e-3


def test_plain_heads_are_found_for_llama_and_gpt2_only_where_the_body_runs_alone():
    tok = byte_tokenizer()
    for kind in ("llama", "gpt2"):
        model = tiny_causal_lm(kind, vocab_size=len(tok))
        assert plain_head(model)[0] is model.get_output_embeddings().weight
        lora = Policy(tiny_causal_lm(kind, vocab_size=len(tok)), tok, PolicyConfig(lora_r=2))
        assert plain_head(lora.model) is not None  # the adapters sit in the body
        assert isinstance(lora.reference, AdapterDisabled)
        assert plain_head(lora.reference) is None  # switched off around whole calls only
    other = tiny_causal_lm("llama", vocab_size=len(tok))
    other.config.model_type = "gemma"  # a family whose head may scale or cap its logits
    assert plain_head(other) is None


def batch(vocab, prompts):
    """``prompts`` left-padded prompts and six completions (six / prompts per prompt), two of
    them ending early."""
    g = torch.Generator().manual_seed(0)
    prompt_ids = torch.randint(2, vocab, (prompts, 5), generator=g)
    prompt_mask = torch.ones(prompts, 5, dtype=torch.long)
    prompt_mask[0, :2] = 0
    prompt_mask[-1, :1] = 0
    completion_ids = torch.randint(2, vocab, (6, 4), generator=g)
    completion_mask = torch.ones(6, 4, dtype=torch.long)
    completion_mask[1, 2:] = 0
    completion_mask[4, 1:] = 0
    return prompt_ids, prompt_mask, completion_ids, completion_mask


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
@pytest.mark.parametrize("lora_r", [0, 2])
@pytest.mark.parametrize("copies", [1, 2])
def test_completion_logprobs_and_kl_equal_the_general_path_with_the_same_gradients(
    kind, lora_r, copies, monkeypatch
):
    """The chunked head against the full logits (plain_head forced off), fp32: log-probs, the
    exact KL against a reference's logits and every trainable parameter's gradient."""
    monkeypatch.setattr(lm_head_module, "CHUNK_ELEMENTS", 3 * 258)  # 3 positions per chunk
    tok = byte_tokenizer()
    policy = Policy(tiny_causal_lm(kind, vocab_size=len(tok), seed=1), tok, PolicyConfig(lora_r))
    if lora_r:
        randomize_lora(policy.model, 0.3, seed=2)
    args = batch(len(tok), prompts=6 // copies)  # 2 copies: the shared-prompt forward
    completion_mask = args[3]
    other = tiny_causal_lm(kind, vocab_size=len(tok), seed=3)  # a reference that differs
    _, reference_logits = completion_logprobs_and_logits(other, *args)
    params = [p for p in policy.model.parameters() if p.requires_grad]

    def run(lean):
        if not lean:
            monkeypatch.setattr(logprobs_module, "plain_head", lambda model: None)
        lp, kl = completion_logprobs_and_kl(policy.model, *args, reference_logits)
        lp_only = completion_logprobs(policy.model, *args)
        weights = torch.linspace(0.5, 1.5, lp.numel()).view(lp.shape)
        grads = torch.autograd.grad((lp * weights).sum() + lp_only.sum(), params)
        return lp.detach(), lp_only.detach(), kl, grads

    lean, general = run(True), run(False)
    assert float(general[2].max()) > 1e-4  # a KL the comparison can see
    assert bool((lean[0][completion_mask == 0] == 0).all())
    for got, want in zip(lean[:3], general[:3], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for got, want in zip(lean[3], general[3], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)

"""completion_kl, and the same KL from the forwards a step runs anyway
(completion_logprobs_and_kl): the exact KL(π‖μ) of sampled completions from two tiny causal
LMs."""

import itertools

import pytest
import torch

from nlhf.models.logprobs import (
    completion_kl,
    completion_logits,
    completion_logprobs,
    completion_logprobs_and_kl,
    completion_logprobs_and_logits,
    logits_kl,
    shared_prompts,
)
from nlhf.models.sampling import sample
from nlhf.models.tiny import tiny_causal_lm

VOCAB = 6


def models():
    pi = tiny_causal_lm("llama", vocab_size=VOCAB, seed=1, eos_token_id=None, pad_token_id=0)
    mu = tiny_causal_lm("llama", vocab_size=VOCAB, seed=2, eos_token_id=None, pad_token_id=0)
    for model in (pi, mu):  # a sharper head, so the two differ by a KL a test can see
        model.lm_head.weight.data.mul_(6.0)
    return pi, mu


def prompt():
    return torch.tensor([[3, 4]]), torch.ones(1, 2, dtype=torch.long)


def test_exact_kl_of_a_completion_equals_an_enumeration_over_every_sequence():
    """Σ_y π(y)·completion_kl(y) over all 6³ sequences of 3 tokens is KL(π(y)‖μ(y))."""
    pi, mu = models()
    ids, mask = prompt()
    ys = torch.tensor(list(itertools.product(range(VOCAB), repeat=3)))
    with torch.no_grad():
        logp = completion_logprobs(pi, ids, mask, ys).sum(-1)
        logq = completion_logprobs(mu, ids, mask, ys).sum(-1)
    enumerated = float((logp.exp() * (logp - logq)).sum())
    exact = completion_kl(pi, mu, ids, mask, ys, rows=50)
    assert float(logp.exp().sum()) == pytest.approx(1.0, abs=1e-5)
    assert float((logp.exp() * exact).sum()) == pytest.approx(enumerated, rel=1e-4)
    assert enumerated > 0.3


def test_exact_kl_is_the_expectation_of_the_sampled_estimator():
    """Mean of Σ_t log π/μ over 4,000 samples of π lies within 4 standard errors of the mean
    exact KL, and the exact KL varies far less from sample to sample."""
    pi, mu = models()
    ids, mask = prompt()
    n = 4000
    out = sample(
        pi,
        ids.repeat(n, 1),
        mask.repeat(n, 1),
        3,
        reference=mu,
        generator=torch.Generator().manual_seed(0),
        eos_token_id=[],
        pad_token_id=0,
    )
    sampled = (out.policy_logprobs - out.ref_logprobs).sum(-1)
    exact = completion_kl(pi, mu, ids, mask, out.tokens, out.mask, rows=500)
    se = float(sampled.std()) / n**0.5
    assert abs(float(sampled.mean()) - float(exact.mean())) < 4 * se
    assert float(exact.std()) < float(sampled.std())


def test_several_completions_per_prompt_and_masks_give_the_same_kl_as_one_by_one():
    pi, mu = models()
    ids = torch.tensor([[0, 3, 4], [5, 2, 1]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    tokens = torch.randint(1, VOCAB, (4, 3), generator=torch.Generator().manual_seed(0))
    cmask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    together = completion_kl(pi, mu, ids, mask, tokens, cmask, rows=3)
    alone = torch.stack(
        [
            completion_kl(
                pi,
                mu,
                ids[r % 2 : r % 2 + 1],
                mask[r % 2 : r % 2 + 1],
                tokens[r : r + 1],
                cmask[r : r + 1],
            )[0]
            for r in range(4)
        ]
    )
    torch.testing.assert_close(together, alone, rtol=1e-4, atol=1e-5)
    assert completion_logits(pi, ids, mask, tokens, cmask).shape == (4, 3, VOCAB)
    torch.testing.assert_close(completion_kl(pi, pi, ids, mask, tokens, cmask), torch.zeros(4))


@pytest.mark.parametrize("copies", [1, 2])
def test_the_kl_from_the_gradient_forward_equals_completion_kl_and_keeps_the_gradient(copies):
    """One forward of μ (its logits kept) and one of π give completion_kl's KL, and the same
    log-probs, gradient included, as completion_logprobs."""
    pi, mu = models()
    ids = torch.tensor([[0, 3, 4], [5, 2, 1]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1]])
    tokens = torch.randint(1, VOCAB, (2 * copies, 3), generator=torch.Generator().manual_seed(0))
    cmask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])[: 2 * copies]
    ref_lp, ref_logits = completion_logprobs_and_logits(mu, ids, mask, tokens, cmask)
    torch.testing.assert_close(ref_lp, completion_logprobs(mu, ids, mask, tokens, cmask))
    lp, kl = completion_logprobs_and_kl(pi, ids, mask, tokens, cmask, ref_logits)
    expected = completion_kl(pi, mu, ids, mask, tokens, cmask)
    assert (expected > 0.01).all()
    torch.testing.assert_close(kl, expected, rtol=1e-5, atol=1e-7)
    assert not kl.requires_grad
    plain = completion_logprobs(pi, ids, mask, tokens, cmask)
    torch.testing.assert_close(lp, plain)
    grads = [torch.autograd.grad(x.sum(), pi.lm_head.weight)[0] for x in (lp, plain)]
    torch.testing.assert_close(grads[0], grads[1])


def test_repeated_prompt_rows_run_once_with_the_same_logits_and_gradient():
    """Prompt rows that repeat (the same prompt for several completions, in any order) share
    one prompt forward: logits and gradient equal each row's own forward."""
    pi, _ = models()
    ids = torch.tensor([[0, 3, 4], [5, 2, 1], [0, 3, 4], [0, 3, 4]])
    mask = torch.tensor([[0, 1, 1], [1, 1, 1], [0, 1, 1], [0, 1, 1]])
    tokens = torch.randint(1, VOCAB, (4, 3), generator=torch.Generator().manual_seed(1))
    cmask = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1]])
    together = completion_logits(pi, ids, mask, tokens, cmask)
    alone = torch.cat(
        [
            completion_logits(
                pi, ids[r : r + 1], mask[r : r + 1], tokens[r : r + 1], cmask[r : r + 1]
            )
            for r in range(4)
        ]
    )
    torch.testing.assert_close(together, alone, atol=1e-5, rtol=1e-5)
    weights = pi.lm_head.weight
    grads = [
        torch.autograd.grad(x[cmask.bool()].logsumexp(-1).sum(), weights)[0]
        for x in (together, alone)
    ]
    torch.testing.assert_close(grads[0], grads[1], atol=1e-5, rtol=1e-5)
    assert shared_prompts(pi, ids, mask, 4)[0].shape[0] == 2  # two distinct prompts ran
    assert shared_prompts(pi, ids[:2], mask[:2], 2) is None  # distinct rows: nothing to share


def test_the_kl_of_logits_in_chunks_of_rows_equals_one_chunk():
    logits, ref = torch.randn(5, 4, VOCAB), torch.randn(5, 4, VOCAB)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0], [0, 0, 0, 0]])
    torch.testing.assert_close(logits_kl(logits, ref, mask, rows=2), logits_kl(logits, ref, mask))
    assert logits_kl(logits, ref, mask)[4] == 0.0
    with pytest.raises(ValueError, match="share"):
        logits_kl(logits, ref[:, :3], mask)

"""Nash-MD-PG's estimator against the exact gradient on a policy small enough to enumerate.

A tabular autoregressive policy over a vocabulary of 3 and 3 new tokens (27 sequences, or
fewer with an end-of-sequence token): the exact objective P(π_θ ≻ π_β) − τ·KL(π_θ‖μ) and its
gradient come from summing over every sequence; the estimator's mean over many samples must
match it within Monte-Carlo error, and a biased variant must not.  The variant with the exact
per-position KL must match it too, with a smaller spread.
"""

import itertools

import pytest
import torch

from nlhf.losses import masked_sum, nash_md_pg_loss, nash_md_pg_weights, position_kl

V, T, TAU = 3, 3, 0.3


OFFSETS = [sum(V**k for k in range(length)) for length in range(T + 2)]


def code(tokens, length):
    """A unique integer for each token prefix of the given length (batched)."""
    value = torch.zeros(tokens.shape[0], dtype=torch.long)
    for i in range(length):
        value = value * V + tokens[:, i]
    return OFFSETS[length] + value


def prefixes(eos):
    out = [()]
    for length in range(1, T):
        for p in itertools.product(range(V), repeat=length):
            if eos is None or eos not in p:
                out.append(p)
    return {p: i for i, p in enumerate(out)}


def sequences(eos):
    seqs = []
    for y in itertools.product(range(V), repeat=T):
        if eos is not None and eos in y:
            y = y[: y.index(eos) + 1]
        if y not in seqs:
            seqs.append(y)
    return seqs


class World:
    """Policy logits θ, reference logits, a fixed opponent and an intransitive preference."""

    def __init__(self, eos):
        g = torch.Generator().manual_seed(0)
        self.eos = eos
        self.index = prefixes(eos)
        self.seqs = sequences(eos)
        n = len(self.index)
        # code → prefix row of θ, and code → sequence id, for batched lookups
        self.prefix_row = torch.zeros(OFFSETS[T + 1], dtype=torch.long)
        for p, i in self.index.items():
            self.prefix_row[code(torch.tensor([p], dtype=torch.long).reshape(1, -1), len(p))] = i
        self.seq_row = torch.full((OFFSETS[T + 1],), -1, dtype=torch.long)
        for i, y in enumerate(self.seqs):
            self.seq_row[code(torch.tensor([y], dtype=torch.long).reshape(1, -1), len(y))] = i
        self.theta = torch.randn(n, V, generator=g, dtype=torch.float64).requires_grad_()
        self.ref = torch.randn(n, V, generator=g, dtype=torch.float64)
        beta = 0.25  # the opponent: a token-level geometric mixture of π_θ (frozen) and μ
        self.opp = (1 - beta) * self.theta.detach() + beta * self.ref
        score = torch.tensor(
            [y.count(1) - 0.5 * y.count(2) for y in self.seqs], dtype=torch.float64
        )
        skew = torch.randn(len(self.seqs), len(self.seqs), generator=g, dtype=torch.float64)
        skew = skew - skew.T
        self.pref = torch.sigmoid(score[:, None] - score[None, :] + skew)  # P + Pᵀ = 1

    def seq_logprob(self, logits, y):
        logp = torch.log_softmax(logits, -1)
        return sum(logp[self.index[y[:t]], y[t]] for t in range(len(y)))

    def exact_gradient(self):
        log_pi = torch.stack([self.seq_logprob(self.theta, y) for y in self.seqs])
        log_mu = torch.stack([self.seq_logprob(self.ref, y) for y in self.seqs])
        log_opp = torch.stack([self.seq_logprob(self.opp, y) for y in self.seqs])
        pi, opp = log_pi.exp(), log_opp.exp()
        objective = pi @ self.pref @ opp - TAU * (pi * (log_pi - log_mu)).sum()
        (grad,) = torch.autograd.grad(-objective, self.theta)
        return grad

    def sample(self, logits, n, gen):
        """Token-by-token sampling; returns tokens (n, T), mask (n, T), sequence ids (n,)."""
        tokens = torch.zeros(n, T, dtype=torch.long)
        mask = torch.zeros(n, T, dtype=torch.bool)
        alive = torch.ones(n, dtype=torch.bool)
        prefix_id = torch.zeros(n, dtype=torch.long)
        for t in range(T):
            probs = torch.softmax(logits.detach()[prefix_id], -1)
            tok = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
            tokens[:, t] = torch.where(alive, tok, 0)
            mask[:, t] = alive
            if t + 1 < T:
                prefix_id = self.prefix_row[code(tokens, t + 1)]
            if self.eos is not None:
                alive = alive & (tok != self.eos)
        lengths = mask.sum(-1)
        seq_ids = torch.empty(n, dtype=torch.long)
        for length in lengths.unique().tolist():
            rows = lengths == length
            seq_ids[rows] = self.seq_row[code(tokens[rows], length)]
        assert (seq_ids >= 0).all()
        return tokens, mask, seq_ids

    def position_logits(self, logits, tokens):
        """The logits (n, T, V) each token was drawn from."""
        rows = [self.prefix_row[code(tokens, t)] for t in range(T)]
        return torch.stack([logits[r] for r in rows], dim=1)

    def token_logprobs(self, logits, tokens, mask):
        logp = torch.log_softmax(logits, -1)
        out = torch.zeros(tokens.shape, dtype=logits.dtype)
        for t in range(T):
            out[:, t] = logp[self.prefix_row[code(tokens, t)], tokens[:, t]]
        return out * mask


def estimator_mean(world, loss_fn, chunks=24, per_chunk=4000, bernoulli=False, exact=False):
    gen = torch.Generator().manual_seed(1)
    tokens, mask, ids = world.sample(world.theta, chunks * per_chunk, gen)
    _, _, opp_ids = world.sample(world.opp, chunks * per_chunk, gen)
    ref_lp = world.token_logprobs(world.ref, tokens, mask)
    pref = world.pref[ids, opp_ids]
    if bernoulli:
        pref = torch.bernoulli(pref, generator=gen)
    grads = []
    for c in range(chunks):
        sl = slice(c * per_chunk, (c + 1) * per_chunk)
        lp = world.token_logprobs(world.theta, tokens[sl], mask[sl])
        extra = {}
        if exact:  # the exact per-position KL of the sampled prefixes, with its gradient
            logits = world.position_logits(world.theta, tokens[sl])
            extra["kl"] = position_kl(logits, world.position_logits(world.ref, tokens[sl]))
        loss = loss_fn(lp, ref_lp[sl], mask[sl], pref[sl], TAU, **extra)
        (g,) = torch.autograd.grad(loss, world.theta)
        grads.append(g)
    grads = torch.stack(grads)
    return grads.mean(0), grads.std(0) / chunks**0.5


def per_token_kl_loss(logprobs, ref_logprobs, mask, preference, tau):
    """A biased variant: each token weighted by its own KL term only (not the suffix's)."""
    k = (logprobs - ref_logprobs).detach()
    weights = (preference - 0.5).unsqueeze(-1) - tau * k
    return -masked_sum(weights * logprobs, mask, dim=-1).mean()


@pytest.mark.parametrize("eos", [None, 0])
@pytest.mark.parametrize("bernoulli", [False, True])
def test_estimator_is_unbiased(eos, bernoulli):
    world = World(eos)
    exact = world.exact_gradient()
    mean, se = estimator_mean(world, nash_md_pg_loss, bernoulli=bernoulli)
    z = (mean - exact).abs() / (se + 1e-12)
    assert exact.abs().max() > 0.05  # a gradient worth estimating
    assert z.max() < 5.0, f"max z-score {z.max():.2f}"


@pytest.mark.parametrize("eos", [None, 0])
def test_the_exact_kl_estimator_is_unbiased_with_a_smaller_spread(eos):
    world = World(eos)
    exact = world.exact_gradient()
    _, sampled_se = estimator_mean(world, nash_md_pg_loss)
    mean, se = estimator_mean(world, nash_md_pg_loss, exact=True)
    z = (mean - exact).abs() / (se + 1e-12)
    assert z.max() < 5.0, f"max z-score {z.max():.2f}"
    assert se.norm() < 0.9 * sampled_se.norm(), (se.norm(), sampled_se.norm())


def test_the_exact_kl_loss_adds_tau_times_the_kl_and_weights_scores_by_later_kl():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    kl = torch.tensor([[0.3, 0.2, 5.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False]])
    loss = nash_md_pg_loss(logprobs, torch.zeros(1, 3), mask, torch.tensor([0.9]), 0.1, kl=kl)
    loss.backward()
    # τ·(0.3 + 0.2) − [(0.4 − 0.1·0.2)·(−1) + 0.4·(−2)]; the padded position counts nowhere
    assert loss.item() == pytest.approx(0.1 * 0.5 + 0.38 + 0.8)
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-0.38, -0.4, 0.0]]))
    torch.testing.assert_close(kl.grad, torch.tensor([[0.1, 0.1, 0.0]]))


def test_a_biased_variant_is_caught():
    world = World(None)
    exact = world.exact_gradient()
    mean, se = estimator_mean(world, per_token_kl_loss)
    z = (mean - exact).abs() / (se + 1e-12)
    assert z.max() > 8.0


def test_loss_value_and_masking():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    ref = torch.tensor([[-1.5, -2.0, -2.0]])
    mask = torch.tensor([[True, True, False]])
    loss = nash_md_pg_loss(logprobs, ref, mask, torch.tensor([0.9]), tau=0.1)
    loss.backward()
    # suffix KL over the real tokens: t0: 0.5 + 0 = 0.5, t1: 0; padded token ignored.
    expected = -((0.4 - 0.1 * 0.5) * -1.0 + (0.4 - 0.0) * -2.0)
    assert loss.item() == pytest.approx(expected)
    torch.testing.assert_close(logprobs.grad, torch.tensor([[-(0.4 - 0.05), -0.4, 0.0]]))


def test_the_per_token_weights_are_the_advantage_minus_tau_times_the_kl_to_go():
    logprobs = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.0, -1.0]])
    ref = torch.tensor([[-1.5, -2.0, -2.0], [-1.0, -2.0, -9.0]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    weights = nash_md_pg_weights(torch.tensor([0.4, -0.2]), logprobs, ref, mask, tau=0.1)
    # k = log π − log μ: row 0 (0.5, 0, −1), KL to go (−0.5, −1, −1); row 1 (0.5, 1), (1.5, 1)
    expected = torch.tensor([[0.4 + 0.05, 0.4 + 0.1, 0.4 + 0.1], [-0.2 - 0.15, -0.2 - 0.1, 0.0]])
    torch.testing.assert_close(weights, expected)

"""Closed-form checks for the pure loss functions in nlhf.losses."""

import math

import pytest
import torch

from nlhf import losses as L


def test_masked_reductions_and_suffix_sum():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    m = torch.tensor([[True, True, False], [True, False, False]])
    assert L.masked_sum(x, m).item() == 7.0
    assert L.masked_mean(x, m).item() == pytest.approx(7 / 3)
    torch.testing.assert_close(L.masked_mean(x, m, dim=-1), torch.tensor([1.5, 4.0]))
    torch.testing.assert_close(L.suffix_sum(x, m), torch.tensor([[3.0, 2.0, 0.0], [4.0, 0, 0]]))
    w = L.masked_whiten(torch.randn(4, 6), torch.ones(4, 6, dtype=torch.bool))
    assert w.mean().item() == pytest.approx(0, abs=1e-6)
    assert w.var(unbiased=False).item() == pytest.approx(1, abs=1e-4)


def test_kl_estimators_are_unbiased_where_claimed():
    """Tokens sampled from π = N-way categorical; E_π[k1] = E_π[k3] = KL(π‖μ) exactly."""
    logits_pi = torch.tensor([1.0, 0.0, -1.0, 0.5])
    logits_mu = torch.tensor([0.0, 0.3, 0.2, -0.4])
    log_pi, log_mu = logits_pi.log_softmax(0), logits_mu.log_softmax(0)
    kl = (log_pi.exp() * (log_pi - log_mu)).sum()
    for kind in ("k1", "k3"):
        expectation = (log_pi.exp() * L.kl_estimate(log_pi, log_mu, kind)).sum()
        assert expectation.item() == pytest.approx(kl.item(), rel=1e-6)
    assert (L.kl_estimate(log_pi, log_mu, "k3") >= 0).all()
    k2 = (log_pi.exp() * L.kl_estimate(log_pi, log_mu, "k2")).sum()
    assert k2.item() != pytest.approx(kl.item(), rel=1e-3)  # biased, as documented
    with pytest.raises(ValueError, match="unknown KL estimator"):
        L.kl_estimate(log_pi, log_mu, "k4")


def test_exact_kl_equals_the_kl_of_whole_sequences_enumerated():
    """A two-step chain on a 3-token vocabulary: E_π[exact_kl(y)] is KL(π(y)‖μ(y)) of the
    9 sequences, and one sequence's exact KL is its positions' KLs summed, masked after EOS."""
    torch.manual_seed(0)
    first_pi, first_mu = torch.randn(3), torch.randn(3)
    second_pi, second_mu = torch.randn(3, 3), torch.randn(3, 3)  # row: the first token
    ys = [(a, b) for a in range(3) for b in range(3)]
    logits = torch.stack([torch.stack([first_pi, second_pi[a]]) for a, _ in ys])
    ref = torch.stack([torch.stack([first_mu, second_mu[a]]) for a, _ in ys])
    mask = torch.ones(9, 2, dtype=torch.bool)
    per_sequence = L.exact_kl(logits, ref, mask)
    logp = (
        (logits.log_softmax(-1)[torch.arange(9), :, :])
        .gather(-1, torch.tensor(ys)[..., None])[..., 0]
        .sum(-1)
    )
    logq = ref.log_softmax(-1).gather(-1, torch.tensor(ys)[..., None])[..., 0].sum(-1)
    enumerated = (logp.exp() * (logp - logq)).sum()
    assert (logp.exp() * per_sequence).sum().item() == pytest.approx(enumerated.item(), rel=1e-5)
    assert enumerated.item() > 0.05  # a KL that a wrong sum would miss
    masked = L.exact_kl(logits, ref, torch.tensor([[True, False]] * 9))
    lp, lq = first_pi.log_softmax(0), first_mu.log_softmax(0)
    torch.testing.assert_close(masked, (lp.exp() * (lp - lq)).sum().expand(9))


def test_exact_kl_is_zero_for_equal_distributions_and_ignores_a_logit_shift():
    logits = torch.randn(2, 4, 5)
    mask = torch.ones(2, 4, dtype=torch.bool)
    torch.testing.assert_close(L.exact_kl(logits, logits + 3.0, mask), torch.zeros(2))
    assert (L.exact_kl(logits, torch.randn(2, 4, 5), mask) > 0).all()


def test_bradley_terry_and_preference_losses():
    rc, rr = torch.tensor([2.0, 0.0]), torch.tensor([1.0, 1.0])
    expected = (-math.log(1 / (1 + math.exp(-1))) - math.log(1 / (1 + math.exp(1)))) / 2
    assert L.bradley_terry_loss(rc, rr).item() == pytest.approx(expected)
    margin = torch.tensor([1.0, -1.0])
    assert L.bradley_terry_loss(rc, rr, margin).item() == pytest.approx(math.log(2))
    weighted = L.bradley_terry_loss(rc, rr, weight=torch.tensor([1.0, 0.0]))
    assert weighted.item() == pytest.approx(math.log(1 + math.exp(-1)))
    logits, target = torch.tensor([0.0, 2.0]), torch.tensor([1.0, 0.0])
    bce = (math.log(2) + math.log(1 + math.exp(2))) / 2
    assert L.preference_loss(logits, target).item() == pytest.approx(bce)


def test_dpo_and_ipo_closed_forms():
    pc, pr = torch.tensor([-5.0]), torch.tensor([-7.0])
    rc, rr = torch.tensor([-6.0]), torch.tensor([-6.5])
    h = (-5 + 6) - (-7 + 6.5)  # 1.5
    beta = 0.1
    assert L.dpo_loss(pc, pr, rc, rr, beta).item() == pytest.approx(
        math.log(1 + math.exp(-beta * h))
    )
    assert L.ipo_loss(pc, pr, rc, rr, beta).item() == pytest.approx((h - 1 / (2 * beta)) ** 2)
    # DPO's gradient pushes the chosen log-prob up and the rejected one down
    pc.requires_grad_()
    pr.requires_grad_()
    L.dpo_loss(pc, pr, rc, rr, beta).backward()
    assert pc.grad.item() < 0 < pr.grad.item()


def test_sft_loss():
    lp = torch.tensor([[-1.0, -3.0, -100.0]])
    assert L.sft_loss(lp, torch.tensor([[True, True, False]])).item() == 2.0


def test_kl_penalized_rewards_put_the_score_on_the_last_real_token():
    lp = torch.tensor([[-1.0, -1.0, -1.0], [-2.0, -2.0, -2.0]])
    ref = torch.tensor([[-1.5, -1.0, -0.5], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[True, True, True], [True, False, False]])
    r = L.kl_penalized_rewards(torch.tensor([1.0, 3.0]), lp, ref, mask, kl_coef=0.1)
    torch.testing.assert_close(r, torch.tensor([[-0.05, 0.0, 1.05], [3.0, 0.0, 0.0]]))


def naive_gae(rewards, values, gamma, lam):
    n = len(rewards)
    adv = [0.0] * n
    for t in range(n):
        total = 0.0
        for k in range(t, n):
            next_v = values[k + 1] if k + 1 < n else 0.0
            delta = rewards[k] + gamma * next_v - values[k]
            total += (gamma * lam) ** (k - t) * delta
        adv[t] = total
    return adv


@pytest.mark.parametrize(("gamma", "lam"), [(1.0, 0.95), (0.9, 0.5), (1.0, 1.0)])
def test_gae_matches_the_definition(gamma, lam):
    torch.manual_seed(0)
    rewards, values = torch.randn(2, 5), torch.randn(2, 5)
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]])
    adv, ret = L.gae(rewards, values, mask, gamma, lam)
    for row, length in enumerate((5, 3)):
        expected = naive_gae(
            rewards[row, :length].tolist(), values[row, :length].tolist(), gamma, lam
        )
        torch.testing.assert_close(adv[row, :length], torch.tensor(expected), atol=1e-5, rtol=1e-5)
        assert adv[row, length:].abs().sum() == 0
    torch.testing.assert_close(ret, (adv + values) * mask)
    if lam == 1.0 and gamma == 1.0:  # returns are the sums of future rewards
        torch.testing.assert_close(ret[0], rewards[0].flip(0).cumsum(0).flip(0))


def test_gae_over_streams_cuts_the_recursion_at_an_episode_end():
    # γ = 0.9, λ = 0.8; step 1 ends its episode, so step 2 starts another one.
    # t=2: δ = 1 + 0.9·2 − 0.5 = 2.3 = A₂;   t=1 (done): δ = 1 − 0.5 = 0.5 = A₁;
    # t=0: δ = 1 + 0.9·0.5 − 0.5 = 0.95, A₀ = 0.95 + 0.9·0.8·0.5 = 1.31
    rewards, values = torch.ones(1, 3), torch.full((1, 3), 0.5)
    dones = torch.tensor([[False, True, False]])
    adv, ret = L.gae(rewards, values, None, 0.9, 0.8, dones, next_value=torch.tensor([2.0]))
    torch.testing.assert_close(adv, torch.tensor([[1.31, 0.5, 2.3]]))
    torch.testing.assert_close(ret, adv + values)


def test_gae_of_a_stream_holding_one_whole_episode_is_the_sequence_gae():
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(1, 7, generator=g), torch.randn(1, 7, generator=g)
    dones = torch.zeros(1, 7, dtype=torch.bool)
    dones[0, -1] = True
    stream, _ = L.gae(rewards, values, None, 0.99, 0.95, dones, next_value=torch.tensor([9.0]))
    sequence, _ = L.gae(rewards, values, torch.ones(1, 7, dtype=torch.bool), 0.99, 0.95)
    torch.testing.assert_close(stream, sequence)


def test_explained_variance_over_the_masked_in_entries():
    returns = torch.tensor([[1.0, 2.0, 3.0, 4.0, 99.0]])
    values = torch.tensor([[1.0, 2.0, 3.0, 2.0, -99.0]])
    mask = torch.tensor([[True, True, True, True, False]])
    # Var[R] = 1.25 and Var[R − V] = Var[0, 0, 0, 2] = 0.75 over the four real entries
    assert L.explained_variance(values, returns, mask) == pytest.approx(1 - 0.75 / 1.25)
    assert L.explained_variance(values, torch.ones(1, 5), mask) == 0.0  # constant returns


def test_ppo_policy_loss_clips():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1]]))
    adv = torch.tensor([[1.0, -1.0, 1.0]])
    mask = torch.ones(1, 3, dtype=torch.bool)
    loss, stats = L.ppo_policy_loss(new, old, adv, mask, clip=0.2)
    # min(r·A, clip(r)·A) per token: 1.2, -0.8, 1.1 → loss = −mean
    assert loss.item() == pytest.approx(-(1.2 - 0.8 + 1.1) / 3)
    assert stats["clip_fraction"].item() == pytest.approx(2 / 3)


def test_ppo_value_loss_clips():
    v, old, ret = torch.tensor([[2.0, 0.0]]), torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 1.0]])
    # token 0: max((2-2)², (1.2-2)²) = 0.64; token 1: max(1, 1) = 1
    assert L.ppo_value_loss(v, old, ret, torch.ones(1, 2, dtype=torch.bool), 0.2).item() == (
        pytest.approx(0.5 * (0.64 + 1.0) / 2)
    )

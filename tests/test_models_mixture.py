"""The per-token math of sampling: geometric mixture, temperature / top-k / top-p, Gumbel draws."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from nlhf.models.mixture import mix_logprobs, mixture_logits
from nlhf.models.warping import SamplingSettings, draw_noise, pick, warp


def brute_force_mixture(pl: np.ndarray, rl: np.ndarray, beta: float) -> np.ndarray:
    """π^(1−β) μ^β / Z in float64, from probabilities (not logs)."""
    p = np.exp(pl - pl.max()) / np.exp(pl - pl.max()).sum()
    m = np.exp(rl - rl.max()) / np.exp(rl - rl.max()).sum()
    w = p ** (1 - beta) * m**beta
    return w / w.sum()


@given(
    st.integers(0, 10_000),
    st.floats(0.0, 1.0),
    st.integers(2, 9),
)
def test_mixture_equals_normalized_geometric_mean(seed, beta, vocab):
    rng = np.random.default_rng(seed)
    pl, rl = rng.normal(0, 3, (4, vocab)), rng.normal(0, 3, (4, vocab))
    got = mixture_logits(torch.tensor(pl), torch.tensor(rl), beta)
    assert got.dtype == torch.float32
    expected = np.stack([brute_force_mixture(pl[i], rl[i], beta) for i in range(4)])
    np.testing.assert_allclose(got.exp().numpy(), expected, atol=1e-6)
    np.testing.assert_allclose(got.exp().sum(-1).numpy(), 1.0, atol=1e-6)


def test_mixture_endpoints_are_exact_and_ignore_the_other_side():
    pl = torch.randn(3, 7)
    garbage = torch.full((3, 7), float("nan"))
    assert torch.equal(mixture_logits(pl, garbage, 0.0), torch.log_softmax(pl, -1))
    assert torch.equal(mixture_logits(garbage, pl, 1.0), torch.log_softmax(pl, -1))


def test_mixture_shift_invariance_and_ruled_out_tokens():
    pl, rl = torch.randn(2, 5), torch.randn(2, 5)
    shifted = mixture_logits(pl + 11.0, rl - 4.0, 0.3)
    torch.testing.assert_close(shifted, mixture_logits(pl, rl, 0.3))
    rl[:, 2] = float("-inf")
    out = mixture_logits(pl, rl, 0.3)
    assert torch.isinf(out[:, 2]).all() and torch.isfinite(out[:, [0, 1, 3, 4]]).all()


def test_mix_logprobs_matches_public_function():
    pl, rl = torch.log_softmax(torch.randn(2, 6), -1), torch.log_softmax(torch.randn(2, 6), -1)
    torch.testing.assert_close(mix_logprobs(pl, rl, 0.125), mixture_logits(pl, rl, 0.125))


@pytest.mark.parametrize("beta", [-0.1, 1.5, "x"])
def test_mixture_rejects_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        mixture_logits(torch.zeros(1, 3), torch.zeros(1, 3), beta)


def test_mixture_rejects_shape_mismatch():
    with pytest.raises(ValueError, match="differ in shape"):
        mixture_logits(torch.zeros(1, 3), torch.zeros(1, 4), 0.5)


# ------------------------------------------------------------------ warping


def test_warp_identity_and_temperature():
    logp = torch.log_softmax(torch.randn(3, 8), -1)
    assert torch.equal(warp(logp, SamplingSettings()), logp)
    hot = warp(logp, SamplingSettings(temperature=2.0))
    torch.testing.assert_close(hot, torch.log_softmax(logp / 2.0, -1))


def test_top_k_keeps_exactly_k_most_likely():
    logp = torch.log_softmax(torch.tensor([[0.1, 2.0, -1.0, 1.5, 0.0]]), -1)
    out = warp(logp, SamplingSettings(top_k=2))
    assert torch.isfinite(out[0]).tolist() == [False, True, False, True, False]
    np.testing.assert_allclose(out.exp().sum().item(), 1.0, atol=1e-6)


@given(st.integers(0, 10_000), st.floats(0.05, 0.99))
def test_top_p_keeps_smallest_set_reaching_p(seed, top_p):
    rng = np.random.default_rng(seed)
    logp = torch.log_softmax(torch.tensor(rng.normal(0, 2, (1, 9))), -1)
    out = warp(logp, SamplingSettings(top_p=top_p))[0]
    probs = logp[0].exp().numpy()
    order = np.argsort(-probs)
    k = int(np.searchsorted(np.cumsum(probs[order]), top_p - 1e-12) + 1)
    expected = set(order[:k].tolist())
    assert set(torch.isfinite(out).nonzero().flatten().tolist()) == expected
    kept = probs[list(expected)]
    np.testing.assert_allclose(out[list(expected)].exp().numpy(), kept / kept.sum(), atol=1e-5)


def test_settings_validation():
    with pytest.raises(ValueError, match="temperature"):
        SamplingSettings(temperature=0.0)
    with pytest.raises(ValueError, match="top_k"):
        SamplingSettings(top_k=0)
    with pytest.raises(ValueError, match="top_p"):
        SamplingSettings(top_p=1.5)


# ------------------------------------------------------------------ Gumbel draws


def test_gumbel_pick_matches_distribution():
    """200k draws from a 5-token distribution: frequencies within 5 standard errors."""
    probs = torch.tensor([0.5, 0.25, 0.15, 0.07, 0.03])
    rows = 200_000
    logp = probs.log().expand(rows, 5)
    tokens = pick(logp, draw_noise((rows, 5), torch.Generator().manual_seed(0)))
    freq = torch.bincount(tokens, minlength=5).double() / rows
    se = (probs.double() * (1 - probs.double()) / rows).sqrt()
    assert ((freq - probs.double()).abs() < 5 * se).all(), freq


def test_noise_is_reproducible_and_per_row_generators_are_independent_of_batch():
    a = draw_noise((3, 11), torch.Generator().manual_seed(5))
    b = draw_noise((3, 11), torch.Generator().manual_seed(5))
    assert torch.equal(a, b) and torch.isfinite(a).all()
    gens = [torch.Generator().manual_seed(s) for s in (1, 2, 3)]
    rows = draw_noise((3, 11), gens)
    alone = draw_noise((1, 11), [torch.Generator().manual_seed(2)])
    assert torch.equal(rows[1:2], alone)
    with pytest.raises(ValueError, match="one per row"):
        draw_noise((3, 11), gens[:2])


def test_gumbel_noise_has_the_right_mean():
    noise = draw_noise((1000, 100), torch.Generator().manual_seed(0))
    assert abs(noise.mean().item() - 0.5772156649) < 0.01  # Euler–Mascheroni constant
    assert abs(noise.var().item() - math.pi**2 / 6) < 0.05

"""Segment judges: the random-answer term, a Bradley–Terry reward model that learns an oracle,
ties as soft labels, normalization, an ensemble, and a preference model that is exactly
antisymmetric and learns an intransitive population that Bradley–Terry cannot."""

import math

import numpy as np
import pytest
import torch

from nlhf.control.labelers import Oracle, PopulationLabeler
from nlhf.control.preference_model import SegmentPreferenceModel
from nlhf.control.reward_model import FitConfig, SegmentRewardModel, fit
from nlhf.control.segments import Segment, sample_pairs, stack
from nlhf.losses import random_answer_logit
from nlhf.models.judges.population import AnnotatorGroup

torch.set_num_threads(1)
L, D, A = 8, 4, 3
W = np.array([1.0, -0.5, 0.0, 0.3])


def reward_segments(n, rng):
    """True reward w·o + 0.5·[action = 1] per step, on observations around a segment mean."""
    out = []
    for i in range(n):
        obs = (rng.standard_normal((L, D)) + rng.standard_normal(D)).astype(np.float32)
        actions = rng.integers(0, A, L)
        out.append(Segment(obs, actions, (obs @ W + 0.5 * (actions == 1)).astype(np.float32), i))
    return out


def batches(pairs):
    return stack([a for a, _ in pairs]), stack([b for _, b in pairs])


def test_the_random_answer_logit_is_the_log_odds_of_the_mixture_and_odd():
    z = torch.linspace(-30, 30, 121, dtype=torch.float64)
    noisy = random_answer_logit(z, 0.1)
    p = 0.9 * torch.sigmoid(z) + 0.05
    torch.testing.assert_close(torch.sigmoid(noisy), p, atol=1e-12, rtol=0)
    torch.testing.assert_close(random_answer_logit(-z, 0.1), -noisy, atol=1e-12, rtol=0)
    assert torch.isfinite(noisy).all() and noisy.abs().max() < math.log(0.95 / 0.05) + 1e-9
    assert torch.equal(random_answer_logit(z, 0.0), z)


def test_the_reward_model_learns_an_oracle_on_held_out_pairs():
    rng = np.random.default_rng(0)
    pairs = sample_pairs(reward_segments(300, rng), 500, rng)
    y = Oracle().label(pairs, rng)
    torch.manual_seed(0)
    model = SegmentRewardModel(D, A, hidden=32)
    report = fit(model, *batches(pairs), y, FitConfig(epochs=25))
    assert report.n_val == round(500 / math.e) and report.n_train + report.n_val == 500
    assert report.val_accuracy > 0.9, report
    # r̂ tracks the true per-step reward on fresh segments
    fresh = reward_segments(50, rng)
    batch = stack(fresh)
    with torch.no_grad():
        r = model.step_rewards(batch.obs, batch.actions).flatten().numpy()
    true = np.concatenate([s.rewards for s in fresh])
    assert np.corrcoef(r, true)[0, 1] > 0.9


def test_ties_are_soft_labels_that_pull_p_to_a_half():
    rng = np.random.default_rng(1)
    pairs = sample_pairs(reward_segments(60, rng), 120, rng)
    a, b = batches(pairs)
    torch.manual_seed(1)
    model = SegmentRewardModel(D, A, hidden=16)
    with torch.no_grad():  # start far from ½
        model.members[0][-1].weight.mul_(20)
    before = (model.prob(a, b) - 0.5).abs().mean()
    fit(model, a, b, np.full(120, 0.5), FitConfig(epochs=80, holdout=0.0, lr=1e-2))
    with torch.no_grad():
        after = (model.prob(a, b) - 0.5).abs().mean()
    assert before > 0.2 and after < 0.05


def test_normalized_gives_zero_mean_and_the_std_asked_for_and_keeps_the_original():
    rng = np.random.default_rng(2)
    batch = stack(reward_segments(40, rng))
    model = SegmentRewardModel(D, A, members=3)
    raw = model.step_rewards(batch.obs, batch.actions).detach()
    atari = model.normalized(batch.obs, batch.actions, std=0.05)
    for m in range(3):
        r = (atari.member_step_rewards(m, batch.obs, batch.actions) - atari.shift[m]) * atari.scale[
            m
        ]
        r = r.detach()
        assert abs(float(r.mean())) < 1e-6 and float(r.std()) == pytest.approx(0.05, rel=1e-4)
    assert torch.equal(model.step_rewards(batch.obs, batch.actions).detach(), raw)
    # probabilities use the raw sums: normalizing does not change P
    torch.testing.assert_close(
        atari.prob(batch, batch[torch.arange(39, -1, -1)]),
        model.prob(batch, batch[torch.arange(39, -1, -1)]),
    )


def test_an_ensemble_trains_members_on_different_bootstrap_samples():
    rng = np.random.default_rng(3)
    pairs = sample_pairs(reward_segments(100, rng), 150, rng)
    torch.manual_seed(3)
    model = SegmentRewardModel(D, A, hidden=16, members=3)
    for member in model.members[1:]:
        member.load_state_dict(model.members[0].state_dict())  # identical starts
    fit(model, *batches(pairs), Oracle().label(pairs, rng), FitConfig(epochs=3))
    w = [member[0].weight for member in model.members]
    assert not torch.equal(w[0], w[1]) and not torch.equal(w[1], w[2])


def test_adaptive_l2_raises_the_weight_decay_when_the_model_overfits():
    rng = np.random.default_rng(4)
    segs = reward_segments(40, rng)
    for s in segs:  # labels unrelated to the segments: only memorizing fits them
        s.rewards[:] = rng.standard_normal()
    pairs = sample_pairs(segs, 60, rng)
    torch.manual_seed(4)
    config = FitConfig(epochs=60, lr=1e-2, weight_decay=1e-3, noise=0.0)
    report = fit(
        SegmentRewardModel(D, A, hidden=64), *batches(pairs), Oracle().label(pairs, rng), config
    )
    assert report.weight_decay > 1e-3, report


# --------------------------------------------------------------------------- preference model


def test_the_preference_model_is_exactly_antisymmetric_for_any_weights():
    rng = np.random.default_rng(5)
    a, b = batches(sample_pairs(reward_segments(30, rng), 64, rng))
    torch.manual_seed(5)
    model = SegmentPreferenceModel(D, A, hidden=16, members=2)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)  # the pairwise head too, not only its zero start
        for m in range(2):
            ab, ba = model.member_logit(m, a, b), model.member_logit(m, b, a)
            assert torch.equal(ab, -ba) and ab.abs().max() > 0.1
            assert torch.equal(model.member_logit(m, a, a), torch.zeros(64))
        assert torch.equal(model.prob(a, a), torch.full((64,), 0.5))
        torch.testing.assert_close(model.prob(a, b) + model.prob(b, a), torch.ones(64))


def test_the_win_rate_matrix_equals_the_pairwise_probability_of_every_pair():
    """``prob_matrix(a, b)[i, j]`` is ``prob(a_i, b_j)`` (each segment encoded once instead of
    once per pair), antisymmetric: the matrix of (b, a) is one minus its transpose."""
    rng = np.random.default_rng(6)
    segments = reward_segments(12, rng)
    a, b = stack(segments[:5]), stack(segments[5:])
    torch.manual_seed(6)
    model = SegmentPreferenceModel(D, A, hidden=16, members=2)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.5)
        matrix = model.prob_matrix(a, b)
        rows = torch.arange(5).repeat_interleave(7)
        cols = torch.arange(7).repeat(5)
        pairs = model.prob(a[rows], b[cols]).reshape(5, 7)
        assert matrix.shape == (5, 7) and (matrix - 0.5).abs().max() > 0.05
        torch.testing.assert_close(matrix, pairs, rtol=0, atol=1e-6)
        torch.testing.assert_close(model.prob_matrix(b, a), 1 - matrix.T, rtol=0, atol=1e-6)


def test_a_fresh_preference_model_is_a_bradley_terry_model():
    rng = np.random.default_rng(6)
    a, b = batches(sample_pairs(reward_segments(20, rng), 16, rng))
    model = SegmentPreferenceModel(D, A, hidden=16)
    member = model.members[0]
    with torch.no_grad():
        (ra, _), (rb, _) = member.embed(a), member.embed(b)
        torch.testing.assert_close(model.member_logit(0, a, b), ra - rb)


def coordinate(k):
    return lambda s: float(s.obs[:, k].mean())


def circle_segments(n, rng):
    """Segment means on a circle in the plane ⊥ (1, 1, 1): three groups that each score one
    coordinate disagree in rotation, so their majority cycles on many triples."""
    u, v = np.array([1, -1, 0]) / np.sqrt(2), np.array([1, 1, -2]) / np.sqrt(6)
    phi = rng.uniform(0, 2 * np.pi, n)
    means = np.cos(phi)[:, None] * u + np.sin(phi)[:, None] * v
    return [
        Segment(
            (m + 0.1 * rng.standard_normal((5, 3))).astype(np.float32),
            rng.integers(0, 2, 5),
            np.zeros(5, np.float32),
            i,
        )
        for i, m in enumerate(means)
    ]


def test_the_preference_model_learns_an_intransitive_population_better_than_bradley_terry():
    rng = np.random.default_rng(7)
    groups = [AnnotatorGroup(f"f{k}", coordinate(k), 1.0, 0.05) for k in range(3)]
    population = PopulationLabeler(groups)
    segs = circle_segments(500, rng)
    train = sample_pairs(segs[:350], 1000, rng)
    labels = population.label(train, rng)
    test = sample_pairs(segs[350:], 1000, rng)
    majority = population.prob(test) > 0.5
    agreement = {}
    for name, cls in (("bt", SegmentRewardModel), ("pm", SegmentPreferenceModel)):
        torch.manual_seed(7)
        model = cls(3, 2, hidden=32)
        fit(model, *batches(train), labels, FitConfig(epochs=40))
        with torch.no_grad():
            agreement[name] = float(((model.prob(*batches(test)) > 0.5).numpy() == majority).mean())
    # the circle's majority is so cyclic that a reward does no better than chance at it
    assert agreement["pm"] > agreement["bt"] + 0.15, agreement
    assert agreement["pm"] > 0.68, agreement

"""Labelers match their definitions in expectation (Monte-Carlo frequency against the formula,
within 5σ); the population is antisymmetric, ½ on itself and can cycle where Bradley–Terry
cannot follow; names and options give one-line errors; the label buffer resumes exactly and
the label schedule is monotone and capped."""

import itertools
import math

import numpy as np
import pytest

from nlhf.control.labelers import (
    CARTPOLE_CRITERIA,
    LabelerError,
    Oracle,
    PopulationLabeler,
    Teacher,
    cartpole_population,
    make_labeler,
)
from nlhf.control.labels import LabelBuffer, labels_due
from nlhf.control.segments import Segment
from nlhf.models.judges.population import AnnotatorGroup
from nlhf.tabular import fit_bradley_terry

N = 4000  # draws per pair type


def seg(rewards, obs=None, episode=0) -> Segment:
    rewards = np.asarray(rewards, np.float32)
    obs = np.zeros((len(rewards), 4), np.float32) if obs is None else np.asarray(obs, np.float32)
    return Segment(obs, np.zeros(len(rewards), np.int64), rewards, episode=episode)


def once(labeler, pairs):
    return labeler.label(pairs, np.random.default_rng(0))


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def frequencies(labeler, pair, rng):
    """(share first, share second, share tie, share can't tell) over N draws of one pair."""
    y = labeler.label([pair] * N, rng)
    return (y == 1).mean(), (y == 0).mean(), (y == 0.5).mean(), np.isnan(y).mean()


def assert_close(freq, p, what):
    sd = math.sqrt(max(p * (1 - p), 1e-12) / N)
    assert abs(freq - p) <= 5 * sd + 1e-12, f"{what}: frequency {freq:.4f}, definition {p:.4f}"


# Pairs of 4-step segments with known true returns.
PAIRS = {
    "a better by 2": (seg([1, 1, 1, 1]), seg([0, 1, 0, 1])),
    "a better by 0.5": (seg([0.5, 0.5, 0.5, 0.5]), seg([0.5, 0.5, 0.5, 0])),
    "b better by 1": (seg([0, 0, 0, 1]), seg([1, 0, 0, 1])),
    "equal": (seg([1, 0, 0, 0]), seg([0, 0, 0, 1])),
}


def returns(pair, gamma=1.0):
    w = gamma ** np.arange(3, -1, -1)
    return float(w @ pair[0].rewards), float(w @ pair[1].rewards)


def test_the_oracle_prefers_the_higher_return_and_ties_equal_ones():
    y = Oracle().label(list(PAIRS.values()), np.random.default_rng(0))
    np.testing.assert_array_equal(y, [1.0, 1.0, 0.0, 0.5])
    np.testing.assert_array_equal(once(make_labeler("oracle"), list(PAIRS.values())), y)


@pytest.mark.parametrize("name", ["oracle", "mistake", "noisy", "myopic"])
def test_each_teacher_matches_its_definition_in_expectation(name):
    teacher = make_labeler(name)
    beta, eps, gamma = {"oracle": (math.inf, 0, 1), "mistake": (math.inf, 0.1, 1)}.get(
        name, (1.0, 0, 1) if name == "noisy" else (math.inf, 0, 0.9)
    )
    rng = np.random.default_rng(1)
    for what, pair in PAIRS.items():
        ra, rb = returns(pair, gamma)
        if math.isinf(beta):
            q = 1.0 if ra > rb else 0.0 if ra < rb else None  # None: a rational tie
        else:
            q = sigmoid(beta * (ra - rb))
        first, second, tie, skipped = frequencies(teacher, pair, rng)
        assert skipped == 0
        if q is None:
            assert tie == 1.0, what
            continue
        assert_close(first, (1 - eps) * q + eps * (1 - q), f"{name}, {what}")
        assert first + second == 1.0


def test_the_myopic_teacher_weighs_later_steps_more():
    early, late = seg([1.0, 0, 0, 0]), seg([0, 0, 0, 0.8])  # undiscounted: early wins
    assert once(make_labeler("oracle"), [(early, late)])[0] == 1.0
    assert once(make_labeler("myopic"), [(early, late)])[0] == 0.0  # 0.9³ = 0.729 < 0.8


def test_skip_and_equal_thresholds_are_shares_of_the_scale():
    scale = 10.0  # thresholds: skip at returns ≤ 1, tie at |Δ| < 1
    low = (seg([0.5, 0, 0, 0]), seg([0.25, 0.25, 0.25, 0.25]))  # both ≤ 1: skipped
    close = (seg([3, 0, 0, 0]), seg([2.5, 0, 0, 0]))  # Δ = 0.5 < 1: tie
    far = (seg([3, 0, 0, 0]), seg([1.5, 0, 0, 0]))  # Δ = 1.5: a choice
    skip = make_labeler("skip", scale=scale)
    equal = make_labeler("equal", scale=scale)
    assert np.isnan(once(skip, [low])[0]) and once(skip, [close, far]).tolist() == [
        1.0,
        1.0,
    ]
    assert once(equal, [low, close, far]).tolist() == [0.5, 0.5, 1.0]  # Δ 0.5, 0.5, 1.5
    assert np.isnan(skip.prob([low])[0]) and equal.prob([close])[0] == 0.5
    # without a scale, the mean return of the pairs labelled sets it (here 2.5: equal at 0.25)
    assert once(make_labeler("equal"), [close, far]).tolist() == [1.0, 1.0]


def test_a_teacher_with_every_knob_matches_the_definition_in_expectation():
    teacher = Teacher(beta=2.0, gamma=0.8, mistake=0.2, skip=0.1, equal=0.05, scale=4.0)
    rng = np.random.default_rng(2)
    for what, pair in PAIRS.items():
        ra, rb = returns(pair)
        da, db = returns(pair, 0.8)
        first, _, tie, skipped = frequencies(teacher, pair, rng)
        if max(ra, rb) <= 0.4:
            assert skipped == 1.0, what
        elif abs(ra - rb) < 0.2:
            assert tie == 1.0, what
        else:
            q = sigmoid(2.0 * (da - db))
            assert_close(first, 0.8 * q + 0.2 * (1 - q), what)
            assert teacher.prob([pair])[0] == pytest.approx(0.8 * q + 0.2 * (1 - q))


def test_bad_labeler_names_and_options_are_one_line_errors():
    with pytest.raises(LabelerError, match="unknown labeler 'sloppy'"):
        make_labeler("sloppy")
    with pytest.raises(LabelerError, match=r"mistake=1\.5: must be in"):
        make_labeler("mistake", mistake=1.5)
    with pytest.raises(LabelerError, match=r"gamma=0\.0"):
        make_labeler("myopic", gamma=0.0)
    with pytest.raises(LabelerError, match="unknown option 'beta'"):
        make_labeler("oracle", beta=1.0)
    with pytest.raises(LabelerError, match="unknown option 'eps'"):
        make_labeler("noisy", eps=0.1)
    with pytest.raises(LabelerError, match="beta='x': must be a number"):
        make_labeler("noisy", beta="x")
    with pytest.raises(LabelerError, match="temperature=0"):
        make_labeler("population", temperature=0)
    with pytest.raises(LabelerError, match="population='atari'"):
        make_labeler("population", population="atari")
    assert make_labeler("noisy", beta=3).beta == 3.0


# --------------------------------------------------------------------------- the population


def cartpole(x, xdot, theta) -> Segment:
    """A 5-step CartPole segment with constant |x|, |ẋ|, |θ|."""
    obs = np.tile([x, xdot, theta, 0.0], (5, 1))
    return seg(np.ones(5), obs)


# Each group ranks the three in a rotation of one order: centered A ≻ B ≻ C (|x| 0.2, 0.6,
# 1.0), lively B ≻ C ≻ A (|ẋ| 1.0, 0.5, 0.1), upright C ≻ A ≻ B (|θ| 0.02, 0.05, 0.10); so
# two of three prefer A to B, B to C and C to A.
CYCLE = [cartpole(0.2, 0.1, 0.05), cartpole(0.6, 1.0, 0.10), cartpole(1.0, 0.5, 0.02)]


def matrix(labeler, items):
    return np.array([labeler.prob([(a, b) for b in items]) for a in items])


def test_the_population_is_antisymmetric_and_half_on_itself():
    pop = cartpole_population(temperature=0.3)
    rng = np.random.default_rng(3)
    items = [cartpole(*rng.uniform(0, 1, 3) * [2.4, 2, 0.2]) for _ in range(6)]
    P = matrix(pop, items)
    np.testing.assert_allclose(P + P.T, 1.0, atol=1e-12)
    np.testing.assert_allclose(np.diag(P), 0.5, atol=0)
    G = pop.group_probs([(items[0], items[1])])
    assert G.shape == (3, 1) and P[0, 1] == pytest.approx(G.mean())


def test_population_labels_follow_p_in_expectation():
    pop = PopulationLabeler(
        [
            AnnotatorGroup("centered", CARTPOLE_CRITERIA["centered"][0], 3.0, temperature=0.2),
            AnnotatorGroup("lively", CARTPOLE_CRITERIA["lively"][0], 1.0, temperature=0.5),
        ]
    )
    pair = (cartpole(0.3, 0.2, 0.0), cartpole(0.9, 0.8, 0.0))
    p = 0.75 * sigmoid((-0.3 / 2.4 + 0.9 / 2.4) / 0.2) + 0.25 * sigmoid((0.2 - 0.8) / 0.5)
    assert pop.prob([pair])[0] == pytest.approx(p)
    first, second, _, _ = frequencies(pop, pair, np.random.default_rng(4))
    assert_close(first, p, "population")
    assert first + second == 1.0


def test_a_majority_cycle_that_no_bradley_terry_reward_orders():
    pop = cartpole_population()
    P = matrix(pop, CYCLE)
    majority = P > 0.5
    assert majority[0, 1] and majority[1, 2] and majority[2, 0], P.round(3)
    r = fit_bradley_terry((P + 1 - P.T) / 2)
    agrees = [np.sign(r[i] - r[j]) == 1 for i, j in ((0, 1), (1, 2), (2, 0))]
    assert not all(agrees)  # any order of three rewards breaks one pair of a cycle


# --------------------------------------------------------------------------- labels


def test_the_label_buffer_keeps_the_last_pairs_and_resumes_exactly():
    rng = np.random.default_rng(5)
    segs = [seg(rng.standard_normal(4), rng.standard_normal((4, 4)), i) for i in range(30)]
    pairs = [(segs[i], segs[(i + 1) % 30]) for i in range(30)]
    labels = rng.choice([0.0, 1.0, 0.5, np.nan], size=30)
    buffer = LabelBuffer(capacity=10)
    kept = buffer.add(pairs[:20], labels[:20]) + buffer.add(pairs[20:], labels[20:])
    decided = np.flatnonzero(~np.isnan(labels))
    assert kept == len(decided) == buffer.added and len(buffer) == 10
    a, _, y = buffer.batches()
    np.testing.assert_array_equal(y.numpy(), labels[decided[-10:]].astype(np.float32))
    np.testing.assert_array_equal(a.obs[-1].numpy(), pairs[decided[-1]][0].obs)

    resumed = LabelBuffer(capacity=1)
    resumed.load_state_dict(buffer.state_dict())
    more = (pairs[:5], np.ones(5))
    buffer.add(*more)
    resumed.add(*more)
    for key, value in buffer.state_dict().items():
        np.testing.assert_array_equal(resumed.state_dict()[key], value, err_msg=key)
        assert resumed.state_dict()[key].dtype == value.dtype


def test_labels_due_starts_at_initial_grows_monotonically_and_never_passes_the_budget():
    steps = np.concatenate([[0], np.logspace(0, 8, 400)])
    due = [labels_due(t, budget=3000, initial=500, c=1e5, horizon=1e6) for t in steps]
    assert due[0] == 500
    assert all(x <= y for x, y in itertools.pairwise(due))
    assert max(due) == 3000 and labels_due(1e6, 3000, 500, 1e5, 1e6) == 3000
    # the rate ∝ c/(T + c): the labels added over [0, c] and over [c, 3c] are equal (ln 2)
    first = labels_due(1e5, 3000, 500, 1e5, 1e6) - 500
    second = labels_due(3e5, 3000, 500, 1e5, 1e6) - labels_due(1e5, 3000, 500, 1e5, 1e6)
    assert abs(first - second) <= 1
    assert labels_due(0, budget=100, initial=500) == 100  # capped from the start

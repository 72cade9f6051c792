"""The family's exact updates: one step against its closed form, the fixed point against the
solver, and the rates theory guarantees, with margins far from the measured values."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import softmax

from nlhf.tabular import cycle, dynamics, make_game, reference_policy, solve_regularized_nash
from nlhf.tabular import family as F
from nlhf.tabular.convergence import duality_gap, kl_from
from strategies import games, taus

TAU, ETA = 0.1, 1.0
P3 = cycle(3)  # rock-paper-scissors, strength 0.4
MU3 = np.array([0.2, 0.3, 0.5])
PI3 = np.array([0.6, 0.3, 0.1])
REGULARIZED = {  # methods whose fixed point is the τ-regularized equilibrium
    "inpo": F.inpo,
    "onpo": F.onpo,
    "egpo": F.egpo,
    "mirror-prox": F.mirror_prox,
    "mmd": F.mmd,
    "online-ipo": F.online_ipo,
}


def normalized(w):
    return w / w.sum()


def exact(P):
    return lambda nu: P @ nu  # an explicit oracle: takes the sampled-oracle code path


# ---- one step, by hand -------------------------------------------------------------------


def test_sppo_step_by_hand_on_two_actions():
    """P(0 ≻ 1) = 0.7, π_0 uniform: P π_0 = (0.6, 0.4), so π_1(0) = σ(η·0.2)."""
    P = np.array([[0.5, 0.7], [0.3, 0.5]])
    traj = F.sppo(P, np.array([0.5, 0.5]), eta=1.0, steps=1)
    assert traj[1, 0] == pytest.approx(1 / (1 + np.exp(-0.2)), abs=1e-15)


def test_inpo_step_is_the_geometric_mixture_anchor():
    eta, tau = 2.0, 0.25
    expected = normalized(PI3 ** (1 - eta * tau) * MU3 ** (eta * tau) * np.exp(eta * P3 @ PI3))
    traj = F.inpo(P3, MU3, tau=tau, eta=eta, steps=1, pi0=PI3)
    np.testing.assert_allclose(traj[1], expected, rtol=1e-13)
    # …which is the INPO paper's form with η_INPO = 1/η: exp(P/η_I)·π_ref^{τ/η_I}·π_t^{1−τ/η_I}
    eta_inpo = 1 / eta
    paper = PI3 ** (1 - tau / eta_inpo) * MU3 ** (tau / eta_inpo) * np.exp(P3 @ PI3 / eta_inpo)
    np.testing.assert_allclose(traj[1], normalized(paper), rtol=1e-13)


def test_inpo_is_the_existing_self_play_mixture():
    a = F.inpo(P3, MU3, tau=TAU, eta=ETA, steps=30, pi0=PI3)
    b = dynamics.mixture_md(P3, MU3, tau=TAU, eta=ETA, steps=30, beta=0.0, pi0=PI3)
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_onpo_steps_by_hand():
    """First step: INPO's.  Then log π_{t+1} = log π_t + η(2g_t − g_{t−1})."""
    eta, tau = 0.7, 0.3
    traj = F.onpo(P3, MU3, tau=tau, eta=eta, steps=2, pi0=PI3)
    inpo_step = F.inpo(P3, MU3, tau=tau, eta=eta, steps=1, pi0=PI3)[1]
    np.testing.assert_allclose(traj[1], inpo_step, rtol=1e-13)

    def g(pi):
        return P3 @ pi - tau * np.log(pi / MU3)

    second = normalized(traj[1] * np.exp(eta * (2 * g(traj[1]) - g(PI3))))
    np.testing.assert_allclose(traj[2], second, rtol=1e-13)


def test_onpo_at_tau_zero_is_optimistic_multiplicative_weights():
    traj = F.onpo(P3, MU3, tau=0.0, eta=0.5, steps=3, pi0=PI3)
    expected = [PI3, normalized(PI3 * np.exp(0.5 * P3 @ PI3))]
    for t in (1, 2):
        grad = 2 * P3 @ expected[t] - P3 @ expected[t - 1]
        expected.append(normalized(expected[t] * np.exp(0.5 * grad)))
    np.testing.assert_allclose(traj, np.array(expected), rtol=1e-13)


def ipo_loss(theta, rho, log_mu, P, tau):
    """The population online-IPO loss with the sampling distribution ρ held fixed."""
    h = theta[:, None] - theta[None, :] - (log_mu[:, None] - log_mu[None, :])
    return float(rho @ (h - (P - 0.5) / tau) ** 2 @ rho)


def numerical_gradient(f, x, eps=1e-6):
    return np.array([(f(x + eps * e) - f(x - eps * e)) / (2 * eps) for e in np.eye(len(x))])


@pytest.mark.parametrize("mixture", [0.0, 0.3])
def test_online_ipo_step_is_a_gradient_step_on_the_ipo_loss(mixture):
    """θ_1 − θ_0 = −lr ∇L(θ_0) with lr = ητ/4; ``mixture`` > 0 samples from the IPO-MD mix."""
    eta, tau = 0.8, 0.2
    theta = np.log(PI3)
    rho = softmax((1 - mixture) * theta + mixture * np.log(MU3))
    grad = numerical_gradient(lambda th: ipo_loss(th, rho, np.log(MU3), P3, tau), theta)
    expected = softmax(theta - eta * tau / 4 * grad)
    traj = F.online_ipo(P3, MU3, tau=tau, eta=eta, steps=1, mixture=mixture, pi0=PI3)
    np.testing.assert_allclose(traj[1], expected, rtol=1e-8)


def test_egpo_step_by_hand_and_as_gradients_of_the_uniform_pair_ipo_loss():
    eta, tau = 1.5, 0.2
    a = eta * tau
    half = normalized(PI3 ** (1 - a) * MU3**a * np.exp(eta * P3 @ PI3))
    expected = normalized(PI3 ** (1 - a) * MU3**a * np.exp(eta * P3 @ half))
    traj = F.egpo(P3, MU3, tau=tau, eta=eta, steps=1, pi0=PI3)
    np.testing.assert_allclose(traj[1], expected, rtol=1e-13)

    # EGPO's tabular loss: (1/n²) Σ_{y,y′} (h_θ − h_μ − (P(y≻π′) − P(y′≻π′))/τ)², with π′ the
    # extrapolated policy; a plain gradient step with lr = a·n/4 from θ_t gives the same π_{t+1}.
    def loss(theta):
        d = theta - np.log(MU3)
        win = P3 @ half
        return float(np.mean((d[:, None] - d[None, :] - (win[:, None] - win[None, :]) / tau) ** 2))

    theta = np.log(PI3)
    stepped = softmax(theta - a * 3 / 4 * numerical_gradient(loss, theta))
    np.testing.assert_allclose(traj[1], stepped, rtol=1e-8)


def test_mmd_step_solves_its_proximal_problem():
    """argmax_π η[⟨π, Pπ_t⟩ − τKL(π‖μ)] − KL(π‖π_t): the gradient of the objective is the same
    constant on every action (the simplex's Lagrange multiplier)."""
    eta, tau = 2.0, 0.3
    pi = F.mmd(P3, MU3, tau=tau, eta=eta, steps=1, pi0=PI3)[1]
    gradient = eta * (P3 @ PI3 - tau * (np.log(pi / MU3) + 1)) - (np.log(pi / PI3) + 1)
    assert np.ptp(gradient) < 1e-13


@pytest.mark.parametrize(
    ("family_method", "existing"),
    [(F.nash_md, dynamics.nash_md), (F.mirror_prox, dynamics.nash_mp)],
)
def test_the_oracle_path_reproduces_the_existing_dynamics(family_method, existing):
    game = make_game("random", 6, seed=2)
    mu = reference_policy(6, "random", seed=2)
    a = family_method(game.P, mu, tau=0.2, eta=1.3, steps=40, oracle=exact(game.P))
    b = existing(game.P, mu, tau=0.2, eta=1.3, steps=40)
    np.testing.assert_allclose(a, b, rtol=1e-11)
    np.testing.assert_array_equal(family_method(game.P, mu, tau=0.2, eta=1.3, steps=40), b)


@pytest.mark.parametrize("name", list(REGULARIZED))
def test_an_explicit_exact_oracle_changes_nothing(name):
    method = REGULARIZED[name]
    a = method(P3, MU3, tau=TAU, eta=ETA, steps=25, pi0=PI3)
    b = method(P3, MU3, tau=TAU, eta=ETA, steps=25, pi0=PI3, oracle=exact(P3))
    np.testing.assert_allclose(a, b, rtol=1e-12)


def test_proximal_point_step_is_the_regularized_equilibrium_toward_the_last_policy():
    traj = F.proximal_point(P3, MU3, tau=0.3, steps=2)
    np.testing.assert_allclose(traj[1], solve_regularized_nash(P3, MU3, 0.3), atol=1e-13)
    np.testing.assert_allclose(
        traj[2], normalized(traj[1] * np.exp(P3 @ traj[2] / 0.3)), atol=1e-12
    )


def test_magnet_reset_runs_blocks_against_the_last_policy():
    every = 7
    traj = F.magnet_reset(F.mmd, P3, MU3, tau=TAU, eta=ETA, steps=17, every=every)
    assert traj.shape == (18, 3)
    np.testing.assert_allclose(traj[: every + 1], F.mmd(P3, MU3, tau=TAU, eta=ETA, steps=every))
    second = F.mmd(P3, traj[every], tau=TAU, eta=ETA, steps=every, pi0=traj[every])
    np.testing.assert_allclose(traj[every : 2 * every + 1], second, rtol=1e-12)
    third = F.mmd(P3, traj[2 * every], tau=TAU, eta=ETA, steps=3, pi0=traj[2 * every])
    np.testing.assert_allclose(traj[2 * every :], third, rtol=1e-12)


# ---- fixed points ------------------------------------------------------------------------


@given(games(max_n=6), taus, st.floats(0.05, 1.0))
def test_the_regularized_equilibrium_is_a_fixed_point_of_every_regularized_method(game, tau, a):
    P, mu = game
    pi_star = solve_regularized_nash(P, mu, tau)
    eta = a / tau
    for name, method in REGULARIZED.items():
        # one step: the solver's rounding error grows by up to ~η·|P| a step (η reaches 100)
        traj = method(P, mu, tau=tau, eta=eta, steps=1, pi0=pi_star)
        assert np.max(np.abs(traj - pi_star)) < 1e-9 * (1 + eta), name


@pytest.mark.parametrize("name", list(REGULARIZED))
@pytest.mark.parametrize("game_name", ["random", "cycle", "condorcet"])
def test_every_regularized_method_converges_to_the_solver_equilibrium(name, game_name):
    game = make_game(game_name, 5, seed=3)
    mu = reference_policy(game.n, "random", seed=3)
    # online IPO's step on action y is scaled by π(y): it needs more steps near small ones
    steps = 20000 if name == "online-ipo" else 1500
    traj = REGULARIZED[name](game.P, mu, tau=TAU, eta=ETA, steps=steps)
    pi_star = solve_regularized_nash(game.P, mu, TAU)
    np.testing.assert_allclose(traj[-1], pi_star, atol=1e-10)


def test_nash_md_and_ipo_md_share_a_biased_fixed_point():
    """Both stop at π ∝ μ exp(P π^β / τ), π^β ∝ π^{1−β} μ^β (β = ητ for Nash-MD): not π*."""
    game = make_game("random", 5, seed=0)
    mu = reference_policy(5, "random", seed=0)
    beta = ETA * TAU
    md = F.nash_md(game.P, mu, tau=TAU, eta=ETA, steps=1500)[-1]
    ipo_md = F.online_ipo(game.P, mu, tau=TAU, eta=ETA, steps=3000, mixture=beta)[-1]
    np.testing.assert_allclose(ipo_md, md, atol=1e-10)
    mix = normalized(md ** (1 - beta) * mu**beta)
    np.testing.assert_allclose(md, normalized(mu * np.exp(game.P @ mix / TAU)), atol=1e-12)
    assert kl_from(solve_regularized_nash(game.P, mu, TAU), md[None])[0] > 1e-4


# ---- rates -------------------------------------------------------------------------------


def ten_step_ratios(err):
    """err[t+10]/err[t] wherever both are above rounding level."""
    end = int(np.flatnonzero(err <= 1e-12)[0]) if np.any(err <= 1e-12) else len(err)
    return err[10:end] / err[: end - 10]


@pytest.mark.parametrize("method", [F.egpo, F.mirror_prox, F.mmd], ids=["egpo", "mp", "mmd"])
@pytest.mark.parametrize("game_name", ["random", "cycle", "condorcet"])
def test_proximal_methods_contract_geometrically(method, game_name):
    """KL(π*‖π_t) shrinks by at least (1+ητ)^−10 every 10 steps (measured: about 0.8^10)."""
    game = make_game(game_name, 5, seed=1)
    mu = reference_policy(game.n, "random", seed=1)
    err = kl_from(
        solve_regularized_nash(game.P, mu, TAU), method(game.P, mu, tau=TAU, eta=ETA, steps=400)
    )
    ratios = ten_step_ratios(err)
    assert len(ratios) > 20 and err[-1] < 1e-12
    assert ratios.max() <= (1 + ETA * TAU) ** -10


def test_extragradient_contracts_where_plain_mirror_descent_does_not():
    """At η·τ = 0.5 on the cycle game INPO's last iterate keeps oscillating; EGPO's contracts."""
    mu = reference_policy(3, "random", seed=0)
    pi_star = solve_regularized_nash(P3, mu, TAU)
    eg = kl_from(pi_star, F.egpo(P3, mu, tau=TAU, eta=5.0, steps=400))
    md = kl_from(pi_star, F.inpo(P3, mu, tau=TAU, eta=5.0, steps=400))
    assert ten_step_ratios(eg).max() <= (1 + 5.0 * TAU) ** -10
    assert md[200:].min() > 1e-3


def average(traj):
    return np.cumsum(traj, axis=0) / np.arange(1, len(traj) + 1)[:, None]


def test_optimism_gives_an_average_gap_within_c_over_t_and_plain_self_play_does_not():
    """OMWU (ONPO at τ = 0): gap(π̄_t) ≤ 8/t for every t ≥ 10 (measured max t·gap ≈ 5.4);
    plain MWU with the same step breaks the same bound (t·gap reaches ≈ 30 by t = 4000)."""
    mu = reference_policy(3, "random", seed=0)
    t = np.arange(10, 4001)
    optimistic = duality_gap(P3, average(F.onpo(P3, mu, tau=0.0, eta=1.0, steps=4000)), mu, 0.0)
    plain = duality_gap(P3, average(F.sppo(P3, mu, eta=1.0, steps=4000)), mu, 0.0)
    assert np.all(optimistic[10:] * t <= 8.0)
    assert np.max(plain[10:] * t) > 8.0


def test_self_play_cycles_in_the_last_iterate_while_its_average_converges():
    mu = reference_policy(3, "random", seed=0)
    uniform = np.full(3, 1 / 3)  # the unregularized equilibrium of rock-paper-scissors
    traj = F.sppo(P3, mu, eta=1.0, steps=4000)
    assert kl_from(uniform, traj[2000:]).min() > 1.0  # measured ≈ 9: spirals out
    gap_avg = duality_gap(P3, average(traj), mu, 0.0)
    assert gap_avg[-1] < 0.01 and gap_avg[-1] < gap_avg[250] / 2  # measured 7e-3, 2e-2


def test_inpo_with_the_theorem_schedule_is_at_least_order_one_over_t():
    game = make_game("random", 5, seed=0)
    mu = reference_policy(5, "random", seed=0)
    traj = F.inpo(game.P, mu, tau=TAU, eta=dynamics.theorem_schedule(TAU), steps=2000)
    err = kl_from(solve_regularized_nash(game.P, mu, TAU), traj)
    assert err[2000] * 2001 <= err[200] * 201  # measured: ≈ t^−3.9


@pytest.mark.parametrize("game_name", ["cycle", "condorcet"])
@pytest.mark.parametrize("inner", [F.mmd, F.inpo], ids=["mmd", "inpo"])
def test_magnet_reset_reaches_the_unregularized_equilibrium(game_name, inner):
    """A fixed magnet stops at π*_τ (gap ≥ 0.1 on the original game); resetting it every 20
    steps drives the gap of the original game to rounding level (measured: 0 by t ≈ 500)."""
    game = make_game(game_name, 3, seed=0)
    mu = reference_policy(3, "random", seed=0)
    reset = F.magnet_reset(inner, game.P, mu, tau=TAU, eta=ETA, steps=2000, every=20)
    fixed = inner(game.P, mu, tau=TAU, eta=ETA, steps=2000)
    assert duality_gap(game.P, reset[-1:], mu, 0.0)[0] < 1e-9
    assert duality_gap(game.P, fixed[-1:], mu, 0.0)[0] > 0.1
    nash = np.full(3, 1 / 3) if game_name == "cycle" else np.array([1.0, 0.0, 0.0])
    assert kl_from(nash, reset[-1:])[0] < 1e-9


def test_proximal_point_reaches_the_unregularized_equilibrium():
    traj = F.proximal_point(P3, MU3, tau=TAU, steps=40)
    assert kl_from(np.full(3, 1 / 3), traj[-1:])[0] < 1e-12


# ---- the sampled oracle ------------------------------------------------------------------


def test_sampled_oracle_is_unbiased_and_reproducible():
    game = make_game("random", 4, seed=0)
    nu = np.array([0.1, 0.2, 0.3, 0.4])
    draws = [F.sampled_oracle(game.P, 100, np.random.default_rng(s))(nu) for s in range(3)]
    assert not np.allclose(draws[0], draws[1])
    again = F.sampled_oracle(game.P, 100, np.random.default_rng(0))(nu)
    np.testing.assert_array_equal(draws[0], again)
    oracle = F.sampled_oracle(game.P, 100, np.random.default_rng(5))
    mean = np.mean([oracle(nu) for _ in range(2000)], axis=0)
    # standard error ≤ 0.5/√(2·10⁵) ≈ 1.1e-3 per entry: 6e-3 is more than five of them
    np.testing.assert_allclose(mean, game.P @ nu, atol=6e-3)


def test_the_noise_floor_falls_with_the_number_of_comparisons():
    game = make_game("random", 5, seed=0)
    mu = reference_policy(5, "random", seed=0)
    pi_star = solve_regularized_nash(game.P, mu, TAU)
    floors = []
    for m in (10, 1000):
        oracle = F.sampled_oracle(game.P, m, np.random.default_rng(m))
        traj = F.mirror_prox(game.P, mu, tau=TAU, eta=ETA, steps=400, oracle=oracle)
        floors.append(kl_from(pi_star, traj[200:]).mean())
    assert floors[0] > 10 * floors[1]  # measured ≈ 100 (variance ∝ 1/m)
    assert floors[1] > 1e-6  # …but never zero: the last iterate does not converge


# ---- input checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: F.inpo(P3, MU3, tau=-0.1, eta=1.0, steps=1), "tau"),
        (lambda: F.inpo(P3, MU3, tau=0.5, eta=4.0, steps=1), "eta·tau"),
        (lambda: F.mmd(P3, MU3, tau=0.5, eta=0.0, steps=1), "eta"),
        (lambda: F.online_ipo(P3, MU3, tau=0.1, eta=1.0, steps=1, mixture=2.0), "mixture"),
        (lambda: F.magnet_reset(F.mmd, P3, MU3, tau=0.1, eta=1.0, steps=5, every=0), "every"),
        (lambda: F.sampled_oracle(P3, 0, np.random.default_rng(0)), "comparisons"),
        (lambda: F.sppo(P3, np.array([0.5, 0.5, 0.0]), eta=1.0, steps=1), "mu"),
    ],
)
def test_bad_inputs_say_what_is_wrong(call, message):
    with pytest.raises(ValueError, match=message):
        call()

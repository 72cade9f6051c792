"""The Nash family's losses (SPPO, INPO, online IPO) against their closed forms, and SPPO's
and INPO's sampled losses against the exact gradient of their population objectives,
computed by enumerating a policy small enough to list (a softmax over six responses)."""

import torch
import torch.nn.functional as F

from nlhf.losses import (
    anchored_logratio,
    dpo_loss,
    family_loss,
    inpo_loss,
    ipo_loss,
    leave_one_out_win_rates,
    online_ipo_loss,
    sppo_loss,
)

G = torch.Generator().manual_seed(0)


def rand(*shape):
    return torch.randn(*shape, generator=G, dtype=torch.float64)


def test_anchored_logratio_is_against_the_geometric_mixture():
    logp, a, b = rand(5), rand(5), rand(5)
    got = anchored_logratio(logp, [a, b], [0.25, 0.75])
    torch.testing.assert_close(got, logp - 0.25 * a - 0.75 * b)


def test_family_distances_recover_ipo_and_dpo():
    w, r, rw, rr = rand(4), rand(4), rand(4), rand(4)
    margin = (w - rw) - (r - rr)
    torch.testing.assert_close(family_loss(margin, 1 / (2 * 0.1)), ipo_loss(w, r, rw, rr, 0.1))
    torch.testing.assert_close(
        family_loss(0.1 * margin, 1.0, "logistic"), dpo_loss(w, r, rw, rr, 0.1)
    )
    soft = family_loss(margin, 0.7, "logistic")
    expected = -(0.7 * F.logsigmoid(margin) + 0.3 * F.logsigmoid(-margin)).mean()
    torch.testing.assert_close(soft, expected)


def test_leave_one_out_win_rates():
    P = torch.tensor([[0.5, 0.9, 0.6], [0.1, 0.5, 0.3], [0.4, 0.7, 0.5]])
    torch.testing.assert_close(leave_one_out_win_rates(P), torch.tensor([0.75, 0.2, 0.55]))
    batched = leave_one_out_win_rates(torch.stack([P, 1 - P.T]))
    assert batched.shape == (2, 3)


def test_sppo_inpo_and_online_ipo_closed_forms():
    logp, anchor, win = rand(6), rand(6), torch.rand(6, generator=G, dtype=torch.float64)
    expected = ((logp - anchor - 1000 * (win - 0.5)) ** 2).mean()
    torch.testing.assert_close(sppo_loss(logp, anchor, win, eta=1000.0), expected)

    w, r, rw, rr, aw, ar = (rand(4) for _ in range(6))
    tau, eta = 0.01, 0.03
    h = (w - r) - (tau / eta) * (rw - rr) - (1 - tau / eta) * (aw - ar)
    got = inpo_loss(w, r, rw, rr, aw, ar, tau=tau, eta=eta)
    torch.testing.assert_close(got, ((h - 1 / (2 * eta)) ** 2).mean())
    # τ = 0: IPO against π_t; τ = η: IPO against π_ref
    torch.testing.assert_close(
        inpo_loss(w, r, rw, rr, aw, ar, 0.0, eta), ipo_loss(w, r, aw, ar, eta)
    )
    torch.testing.assert_close(
        inpo_loss(w, r, rw, rr, aw, ar, eta, eta), ipo_loss(w, r, rw, rr, eta)
    )

    a, b, ra, rb, gap = rand(4), rand(4), rand(4), rand(4), rand(4) * 0.1
    expected = (((a - ra) - (b - rb) - gap / 0.1) ** 2).mean()
    torch.testing.assert_close(online_ipo_loss(a, b, ra, rb, gap, tau=0.1), expected)


# --------------------------------------------------------------------------- exact gradients

N = 6


class Bandit:
    """π_θ = softmax(θ) over N responses, π_t = softmax(θ_t), π_ref, and an intransitive P."""

    def __init__(self):
        g = torch.Generator().manual_seed(1)
        self.theta = torch.randn(N, generator=g, dtype=torch.float64).requires_grad_()
        self.theta_t = torch.randn(N, generator=g, dtype=torch.float64)
        self.ref = torch.log_softmax(torch.randn(N, generator=g, dtype=torch.float64), -1)
        skew = torch.randn(N, N, generator=g, dtype=torch.float64)
        self.P = torch.sigmoid(skew - skew.T)  # P + Pᵀ = 1, P_ii = ½
        self.pi_t = torch.softmax(self.theta_t, -1)
        self.log_t = torch.log(self.pi_t)
        self.win_t = self.P @ self.pi_t  # P(y ≻ π_t)

    def logp(self):
        return torch.log_softmax(self.theta, -1)

    def grad(self, loss):
        (g,) = torch.autograd.grad(loss, self.theta)
        return g

    def draw(self, shape, gen):
        return torch.multinomial(
            self.pi_t, int(torch.tensor(shape).prod()), True, generator=gen
        ).reshape(shape)


def assert_matches_in_expectation(samples, exact, sigmas=4.5):
    mean = samples.mean(0)
    err = samples.std(0) / samples.shape[0] ** 0.5
    assert ((mean - exact).abs() <= sigmas * err + 1e-9).all(), (mean, exact, err)


def test_sppo_sampled_gradient_is_the_exact_gradient():
    world, eta = Bandit(), 2.0
    logp = world.logp()
    # population: E_{y∼π_t}[(log π_θ/π_t(y) − η(P(y ≻ π_t) − ½))²]
    exact = world.grad((world.pi_t * (logp - world.log_t - eta * (world.win_t - 0.5)) ** 2).sum())
    gen, k, grads = torch.Generator().manual_seed(2), 4, []
    for _ in range(3000):
        ys = world.draw((k,), gen)
        win = leave_one_out_win_rates(world.P[ys][:, ys])  # real pairwise preferences
        logp = world.logp()
        grads.append(world.grad(sppo_loss(logp[ys], world.log_t[ys], win, eta)))
    assert_matches_in_expectation(torch.stack(grads), exact)


def test_sppo_with_its_own_sample_in_the_average_is_biased():
    world, eta = Bandit(), 2.0
    logp = world.logp()
    exact = world.grad((world.pi_t * (logp - world.log_t - eta * (world.win_t - 0.5)) ** 2).sum())
    gen, k, grads = torch.Generator().manual_seed(2), 4, []
    for _ in range(3000):
        ys = world.draw((k,), gen)
        win = world.P[ys][:, ys].mean(-1)  # the released pipeline's average, self included
        logp = world.logp()
        grads.append(world.grad(sppo_loss(logp[ys], world.log_t[ys], win, eta)))
    samples = torch.stack(grads)
    err = samples.std(0) / samples.shape[0] ** 0.5
    assert ((samples.mean(0) - exact).abs() > 6 * err).any()


def test_inpo_binary_labels_give_the_exact_gradient_of_its_regression():
    world, tau, eta = Bandit(), 0.2, 0.6
    logp = world.logp()
    c = logp - (tau / eta) * world.ref - (1 - tau / eta) * world.log_t
    h = c[:, None] - c[None, :]
    target = (world.win_t[:, None] - world.win_t[None, :]) / eta  # Prop. 6 of the paper
    pair_w = world.pi_t[:, None] * world.pi_t[None, :]
    exact = world.grad((pair_w * (h - target) ** 2).sum())
    gen, grads = torch.Generator().manual_seed(3), []
    for _ in range(4000):
        y, y2 = world.draw((2, 8), gen)
        first = torch.rand(8, generator=gen, dtype=torch.float64) < world.P[y, y2]
        w, r = torch.where(first, y, y2), torch.where(first, y2, y)
        logp = world.logp()
        loss = inpo_loss(
            logp[w], logp[r], world.ref[w], world.ref[r], world.log_t[w], world.log_t[r], tau, eta
        )
        grads.append(world.grad(loss))
    assert_matches_in_expectation(torch.stack(grads), exact)

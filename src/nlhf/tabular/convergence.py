"""The family's convergence claims, measured on seeded games against the exact equilibria.

    from nlhf.tabular.convergence import run_study
    summary = run_study(Path("runs/convergence"), steps=None, seed=0, quick=False)

Each *case* is one method with fixed strengths (:mod:`nlhf.tabular.family`'s convention) and
one claim from a paper: a rate (error ∝ t^{−α}), a linear rate (error ∝ ρ^t), convergence
to a biased point, convergence without a rate, or last-iterate cycling.  Per iteration it
measures KL(π*‖π_t) and the duality gap (twice the exploitability) of the last and the
average iterate, on the τ-regularized game and on the unregularized one (τ = 0).  It fits
the slope of log error against log t over the last two decades before the error reaches
rounding level, or the per-step factor of a geometric decay, and checks the claim.  Then it
reruns a few methods with a sampled oracle to show the noise floor.  Writes report.md,
summary.json, rates_<game>.png and noise_floor.png (each file to a temp file, then renamed).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.optimize import linprog
from scipy.special import logsumexp

from nlhf.files import atomic_write_json, atomic_write_text
from nlhf.tabular import family
from nlhf.tabular.convergence_report import noise_table, plot_noise, plot_rates, rates_table
from nlhf.tabular.dynamics import theorem_schedule
from nlhf.tabular.games import make_game, reference_policy
from nlhf.tabular.solver import solve_regularized_nash

TAU = 0.1  # the regularization of every τ > 0 case
ETA = 1.0  # the constant step size (η·τ = 0.1)
GAMES = (("random", 5), ("cycle", 3), ("condorcet", 3))
RESOLVED = 1e-11  # errors below this are rounding level: fits stop there
CONVERGED = 1e-6  # a "converges" claim holds when the final error is below this
COMPARISONS = (10, 100, 1000)  # sampled duels per action and oracle query


@dataclass(frozen=True)
class Claim:
    """What a paper says about one error curve.  ``kind``: power (error ∝ t^{−order}),
    linear (∝ factor^t, factor None when no constant is stated), biased (linear to a point
    that is not π*, within ``bound`` in KL), converges (no rate), or cycles."""

    kind: str
    text: str
    source: str
    order: float | None = None
    factor: float | None = None
    bound: float | None = None


@dataclass(frozen=True)
class Case:
    key: str
    label: str
    run: Callable[[np.ndarray, np.ndarray, int], np.ndarray]  # (P, μ, steps) ↦ trajectory
    tau: float  # the game whose equilibrium and gap are the target (0: the original game)
    metric: str  # the curve the claim is about, a key of :func:`measure`'s result
    claim: Claim


def _reg(method, **kw):
    return lambda P, mu, T: method(P, mu, tau=TAU, steps=T, **kw)


def _unreg(method, **kw):
    return lambda P, mu, T: method(P, mu, tau=0.0, steps=T, **kw)


LINEAR = "last-iterate linear convergence to π*_τ"
CASES = (
    Case("inpo", "INPO, η = 1", _reg(family.inpo, eta=ETA), TAU, "gap_avg",
         Claim("power", "DualGap(π̄_T) = O(T^-1/2)", "INPO", order=0.5)),
    Case("inpo-schedule", "INPO, η_t = 2/(τ(t+2))", _reg(family.inpo, eta=theorem_schedule(TAU)),
         TAU, "kl", Claim("power", "KL(π*‖π_T) ≤ 32C²/(τ²(T+1))", "INPO", order=1.0)),
    Case("onpo", "ONPO, η = 1", _reg(family.onpo, eta=ETA), TAU, "gap_avg",
         Claim("power", "DualGap(π̄_T) = O(1/T)", "ONPO", order=1.0)),
    Case("nash-md", "Nash-MD, η = 1", _reg(family.nash_md, eta=ETA), TAU, "kl_limit",
         Claim("biased", "KL(π*‖π_T) ≤ (1−ητ)^T KL_0 + 2η/τ", "NLHF Thm 1",
               factor=1 - ETA * TAU, bound=2 * ETA / TAU)),
    Case("nash-md-schedule", "Nash-MD, η_t = 2/(τ(t+2))",
         _reg(family.nash_md, eta=theorem_schedule(TAU)), TAU, "kl",
         Claim("power", "KL(π*‖π_T) ≤ 8/(τ²(T+1))", "NLHF Thm 1", order=1.0)),
    Case("mirror-prox", "Nash-MP (mirror prox), η = 1", _reg(family.mirror_prox, eta=ETA), TAU,
         "kl", Claim("linear", "KL ∝ (1+2τ)^(−N/2), N = 2t queries", "Nash-MP",
                     factor=1 / (1 + 2 * TAU))),
    Case("egpo", "EGPO (extragradient), η = 1", _reg(family.egpo, eta=ETA), TAU, "kl",
         Claim("linear", LINEAR, "EGPO")),
    Case("mmd", "MPO step (MMD), η = 1", _reg(family.mmd, eta=ETA), TAU, "kl",
         Claim("linear", "KL ≤ (1+ητ)^(−t) KL_0", "MMD (Sokota et al.)",
               factor=1 / (1 + ETA * TAU))),
    Case("online-ipo", "online IPO, η = 1", _reg(family.online_ipo, eta=ETA), TAU, "kl",
         Claim("converges", "fixed point = π*_τ", "Calandriello et al.")),
    Case("ipo-md", "IPO-MD, η = 1, β = 0.1", _reg(family.online_ipo, eta=ETA, mixture=0.1), TAU,
         "kl_limit", Claim("biased", "none stated (its limit is Nash-MD's at ητ = β)", "—",
                           bound=2 * ETA / TAU)),
    Case("self-play", "self-play / SPPO (MWU), η = 1",
         lambda P, mu, T: family.sppo(P, mu, eta=ETA, steps=T), 0.0, "kl",
         Claim("cycles", "last iterate does not converge", "MPO, EGPO")),
    Case("mwu-sqrt", "MWU (SPPO), η_t = 1/√(t+1)",
         lambda P, mu, T: family.sppo(P, mu, eta=lambda t: (t + 1) ** -0.5, steps=T), 0.0,
         "gap_avg", Claim("power", "no regret: DualGap(π̄_T) = O(T^-1/2)", "SPPO", order=0.5)),
    Case("omwu", "ONPO at τ = 0 (OMWU), η = 1", _unreg(family.onpo, eta=ETA), 0.0, "gap_avg",
         Claim("power", "DualGap(π̄_T) = O(1/T)", "ONPO", order=1.0)),
    Case("egpo-0", "EGPO at τ = 0, η = 1", _unreg(family.egpo, eta=ETA), 0.0, "gap",
         Claim("converges", "polynomial convergence to the NE of the original game", "EGPO")),
    Case("reset-mmd", "MPO: MMD + magnet reset every 20",
         lambda P, mu, T: family.magnet_reset(family.mmd, P, mu, tau=TAU, eta=ETA, steps=T,
                                              every=20), 0.0, "gap",
         Claim("converges", "last iterate → NE of the original game", "MPO")),
    Case("reset-inpo", "COMAL: INPO + magnet reset every 20",
         lambda P, mu, T: family.magnet_reset(family.inpo, P, mu, tau=TAU, eta=ETA, steps=T,
                                              every=20), 0.0, "gap",
         Claim("converges", "last iterate → NE of the original game", "COMAL")),
    Case("proximal-point", "COMAL, exact inner solves (t = rounds)",
         lambda P, mu, T: family.proximal_point(P, mu, tau=TAU, steps=min(T, 100)), 0.0, "gap",
         Claim("converges", "last iterate → NE of the original game", "COMAL")),
)  # fmt: skip


def solve_unregularized_nash(P: np.ndarray) -> np.ndarray:
    """A Nash equilibrium of the original game: π ≥ 0, Σπ = 1, P π ≤ ½ (a linear program)."""
    n = P.shape[0]
    cost = np.r_[np.zeros(n), 1.0]  # minimize s subject to P π − s ≤ ½
    result = linprog(
        cost,
        A_ub=np.c_[P, -np.ones(n)],
        b_ub=np.full(n, 0.5),
        A_eq=np.r_[np.ones(n), 0.0][None],
        b_eq=[1.0],
        bounds=[(0, None)] * n + [(None, None)],
    )
    if not result.success:
        raise RuntimeError(f"linear program failed: {result.message}")
    pi = np.maximum(result.x[:n], 0.0)
    return pi / pi.sum()


def kl_from(p: np.ndarray, traj: np.ndarray) -> np.ndarray:
    """KL(p‖π_t) for every row, over the support of p (0·log 0 = 0)."""
    support = p > 0
    with np.errstate(divide="ignore"):
        logs = np.log(traj[:, support])
    return (np.log(p[support]) - logs) @ p[support]


def duality_gap(P: np.ndarray, traj: np.ndarray, mu: np.ndarray, tau: float) -> np.ndarray:
    """Twice the exploitability of every row: the duality gap of the profile (π_t, π_t)."""
    scores = traj @ P.T
    if tau == 0:
        return 2.0 * (scores.max(axis=1) - 0.5)
    with np.errstate(divide="ignore", invalid="ignore"):
        kl_mu = np.where(traj > 0, traj * (np.log(traj) - np.log(mu)), 0.0).sum(axis=1)
    best = tau * logsumexp(scores / tau, b=mu[None, :], axis=1)
    return 2.0 * np.maximum(best + tau * kl_mu - 0.5, 0.0)


def measure(P, mu, tau, target, traj) -> dict[str, np.ndarray]:
    """Every error curve of one trajectory; ``target`` is the equilibrium of the τ game."""
    average = np.cumsum(traj, axis=0) / np.arange(1, len(traj) + 1)[:, None]
    return {
        "kl": kl_from(target, traj),
        "kl_limit": kl_from(traj[-1], traj),  # to the point it converges to
        "gap": duality_gap(P, traj, mu, tau),
        "gap_avg": duality_gap(P, average, mu, tau),
        "gap0": duality_gap(P, traj, mu, 0.0),
        "gap0_avg": duality_gap(P, average, mu, 0.0),
    }


def resolved_until(err: np.ndarray) -> int:
    """The first t where the error is at rounding level (len(err) if never)."""
    below = np.flatnonzero(err <= RESOLVED)
    return int(below[0]) if len(below) else len(err)


def fit_power(err: np.ndarray) -> float:
    """Slope of log error against log t over [t_end/100, t_end], log-spaced points; nan when
    fewer than two decades are resolved."""
    end = resolved_until(err) - 1
    if end < 100:
        return float("nan")
    t = np.unique(np.geomspace(end / 100, end, 60).astype(int))
    return float(np.polyfit(np.log(t), np.log(err[t]), 1)[0])


def fit_linear(err: np.ndarray) -> float:
    """Per-step factor ρ of a geometric decay, fitted over the second half of the iterations
    before rounding level; nan when fewer than 4 are resolved."""
    end = resolved_until(err)
    if end < 4:
        return float("nan")
    t = np.arange(end // 2, end)
    return float(np.exp(np.polyfit(t, np.log(err[t]), 1)[0]))


def judge(claim: Claim, err: np.ndarray, final_kl: float) -> tuple[str, bool]:
    """(the measured rate in words, whether the claim holds on this curve)."""
    slope, factor = fit_power(err), fit_linear(err)
    settled = resolved_until(err) <= 0.9 * (len(err) - 1)  # at rounding level for a while
    if claim.kind == "power":
        holds = settled or bool(slope <= -claim.order + 0.15)
        return f"t^{slope:.2f}" if np.isfinite(slope) else f"ρ = {factor:.3f}", holds
    if claim.kind == "linear":
        holds = settled and (claim.factor is None or factor <= claim.factor + 0.01)
        return f"ρ = {factor:.3f}", holds
    if claim.kind == "biased":
        holds = settled and 0 < final_kl <= claim.bound
        return f"ρ = {factor:.3f} to a point at KL {final_kl:.1e} from π*", holds
    if claim.kind == "converges":
        rate = f"ρ = {factor:.3f}" if np.isfinite(factor) else f"t^{slope:.2f}"
        return f"{rate}, final {err[-1]:.1e}", bool(err[-1] <= CONVERGED)
    low = float(err[len(err) // 2 :].min())
    return f"min over 2nd half {low:.2g}", low > 0.05


@dataclass
class Row:
    game: str
    case: Case
    curves: dict[str, np.ndarray]
    measured: str
    holds: bool


def run_cases(
    name: str, n: int, steps: int, seed: int, cases: tuple[Case, ...] = CASES
) -> tuple[dict, list[Row]]:
    game = make_game(name, n, seed)
    mu = reference_policy(game.n, "random", seed)
    targets = {TAU: solve_regularized_nash(game.P, mu, TAU), 0.0: solve_unregularized_nash(game.P)}
    rows = []
    for case in cases:
        traj = case.run(game.P, mu, steps)
        curves = measure(game.P, mu, case.tau, targets[case.tau], traj)
        measured, holds = judge(case.claim, curves[case.metric], float(curves["kl"][-1]))
        rows.append(Row(name, case, curves, measured, holds))
    info = {
        "description": game.description,
        "P": game.P.tolist(),
        "mu": mu.tolist(),
        "pi_star": targets[TAU].tolist(),
        "nash_unregularized": targets[0.0].tolist(),
    }
    return info, rows


NOISE_METHODS = (
    ("INPO", family.inpo),
    ("Nash-MD", family.nash_md),
    ("EGPO", family.egpo),
    ("Nash-MP", family.mirror_prox),
    ("MMD", family.mmd),
)


def noise_floor(steps: int, seed: int) -> dict[str, dict[int, np.ndarray]]:
    """KL(π*‖π_t) with the sampled oracle, per method and number of comparisons, on the
    random game at τ = 0.1, η = 1 (exact Nash-MD is biased: its floor is the bias or more)."""
    game = make_game("random", 5, seed)
    mu = reference_policy(game.n, "random", seed)
    target = solve_regularized_nash(game.P, mu, TAU)
    curves: dict[str, dict[int, np.ndarray]] = {}
    for i, (label, method) in enumerate(NOISE_METHODS):
        curves[label] = {}
        for m in COMPARISONS:
            rng = np.random.default_rng([seed, i, m])
            oracle = family.sampled_oracle(game.P, m, rng)
            traj = method(game.P, mu, tau=TAU, eta=ETA, steps=steps, oracle=oracle)
            curves[label][m] = kl_from(target, traj)
    return curves


def run_study(
    out: str | Path, *, steps: int | None = None, seed: int = 0, quick: bool = False
) -> dict:
    """Run every case on every game, write the report and plots to ``out``; return the summary.

    ``steps`` defaults to 2,000 (quick) or 20,000 iterations; the sampled-oracle runs take a
    tenth of that (at least 200).
    """
    steps = (2000 if quick else 20000) if steps is None else int(steps)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    out = Path(out)
    start = time.perf_counter()
    games, rows = {}, []
    for name, n in GAMES:
        games[name], game_rows = run_cases(name, n, steps, seed)
        rows += game_rows
    noise_steps = max(200, steps // 10)
    noise = noise_floor(noise_steps, seed)
    elapsed = time.perf_counter() - start
    summary = {
        "config": {"steps": steps, "seed": seed, "quick": quick, "tau": TAU, "eta": ETA},
        "games": games,
        "rows": [_row_summary(r) for r in rows],
        "noise_floor": {
            label: {str(m): float(curve[len(curve) // 2 :].mean()) for m, curve in by_m.items()}
            for label, by_m in noise.items()
        },
        "seconds": elapsed,
    }
    for name, _ in GAMES:
        plot_rates([r for r in rows if r.game == name], out / f"rates_{name}.png", name)
    plot_noise(noise, out / "noise_floor.png")
    report = [
        "# Convergence of the general-preference family (tabular)",
        "",
        f"{steps} iterations, seed {seed}, τ = {TAU:g} and η = {ETA:g} unless a row says "
        "otherwise.  Error = the curve the claim is about: KL(π*‖π_t), the duality gap of "
        "the last iterate (gap) or of the running average (gap avg), on the τ-regularized "
        "game or, for the τ = 0 rows, on the original game.  Fits stop where the error "
        f"reaches {RESOLVED:g}.",
        "",
        rates_table(rows),
        "",
        *(f"![{name}](rates_{name}.png)" for name, _ in GAMES),
        "",
        f"## Sampled oracle ({noise_steps} iterations, random game)",
        "",
        "Mean KL(π*‖π_t) over the second half, with m sampled duels per action and query; "
        "with a constant step the floor scales like the oracle's variance, 1/m.",
        "",
        noise_table(summary["noise_floor"]),
        "",
        "![noise floor](noise_floor.png)",
    ]
    atomic_write_text(out / "report.md", "\n".join(report) + "\n")
    atomic_write_json(out / "summary.json", summary)
    return summary


def _row_summary(row: Row) -> dict:
    c = row.curves
    idx = np.unique(np.geomspace(1, len(c["kl"]), 200).astype(int) - 1)
    return {
        "game": row.game,
        "case": row.case.key,
        "label": row.case.label,
        "tau": row.case.tau,
        "metric": row.case.metric,
        "claim": row.case.claim.text,
        "source": row.case.claim.source,
        "measured": row.measured,
        "holds": row.holds,
        "slope": _finite(fit_power(c[row.case.metric])),
        "factor": _finite(fit_linear(c[row.case.metric])),
        "final": {k: float(v[-1]) for k, v in c.items()},
        "curves": {"t": idx.tolist(), **{k: v[idx].tolist() for k, v in c.items()}},
    }


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None  # JSON has no NaN

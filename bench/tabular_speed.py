"""Speed of the tabular lab: Nash-MD on 1000 actions × 10,000 steps (goal ≤ 2 s), the exact solver.

    make bench                     # or: .venv/bin/python bench/tabular_speed.py [--repeats 5]

The floor is 10,000 bare float64 matrix-vector products with the same matrix, measured in the
same run: Nash-MD cannot be faster than that, so the ratio shows the overhead of everything
else (mixture, normalization, writing the trajectory) independently of machine noise.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import record
from nlhf.tabular import make_game, nash_md, reference_policy, solve_regularized_nash


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--actions", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args()

    n, steps = args.actions, args.steps
    game = make_game("random", n, seed=0)
    mu = reference_policy(n, "random", seed=0)
    P = game.P
    x = mu.copy()

    def floor() -> None:
        for _ in range(steps):
            P @ x

    nash_md_s = timed(lambda: nash_md(P, mu, tau=0.1, eta=1.0, steps=steps), args.repeats)
    floor_s = timed(floor, args.repeats)
    solver = {tau: timed(lambda t=tau: solve_regularized_nash(P, mu, t), 3) for tau in (0.1, 0.01)}

    result = {
        "actions": n,
        "steps": steps,
        "repeats": args.repeats,
        "nash_md_seconds": nash_md_s,
        "matvec_floor_seconds": floor_s,
        "nash_md_over_floor": nash_md_s / floor_s,
        "goal_seconds": 2.0,
        "solver_seconds": {str(k): v for k, v in solver.items()},
    }
    table = "\n".join(
        [
            "| tabular workload | median time | goal | ratio to floor |",
            "|---|---:|---:|---:|",
            f"| Nash-MD, {n} actions × {steps:,} steps (float64) | {nash_md_s:.2f} s | ≤ 2 s "
            f"| {nash_md_s / floor_s:.2f}× |",
            f"| floor: {steps:,} bare P @ x products | {floor_s:.2f} s | | 1.00× |",
            f"| exact solver, {n} actions, τ = 0.1 | {solver[0.1]:.2f} s | | |",
            f"| exact solver, {n} actions, τ = 0.01 | {solver[0.01]:.2f} s | | |",
        ]
    )
    record("tabular_speed", result, table)


if __name__ == "__main__":
    main()

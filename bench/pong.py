"""Atari Pong from RAM features on one CPU core: the time to beat the built-in opponent.

    .venv/bin/python bench/pong.py --route ppo                 # true reward, sticky 0, 15 min
    .venv/bin/python bench/pong.py --route ppo --sticky 0.25   # ale-py v5's sticky actions
    .venv/bin/python bench/pong.py --route rlhf --minutes 45 \
        --trainer budget=6000,initial=1000,label_c=1e6,initial_play=50000,chunk=100
    .venv/bin/python bench/pong.py --head-to-head --tag T      # RLHF's policy against NLHF's
    .venv/bin/python bench/pong.py --table                     # the docs table from the results

Each run trains one policy with one torch thread (pin it with ``taskset -c N`` to run two at
once) and writes ``bench/results/pong-<route>-sticky<p>[-<tag>].json``:

1. training: ``nlhf control train`` (or PPO on the game's reward) under ``--minutes``,
   the trainers' Pong settings (8 copies × 128 steps, lr 3e-4, clip 0.2) unless ``--trainer``
   overrides them;
2. the curve: minutes and agent steps at which the mean true return of the last 20 training
   episodes first passed 0, and the best such mean;
3. ``--games`` fresh games of the saved policy (actions sampled, seed + 1): the mean true
   return with its 95% interval, and how many games ended at 0 or above.

``--head-to-head`` plays the saved policies of ``pong-rlhf-…`` and ``pong-nlhf-…`` (same
``--sticky`` and ``--tag``) against each other under the oracle labeler (``nlhf control eval``:
paired 1,000-step continuations of 100 start states) and writes
``bench/results/h2h-pong-sticky<p>-<tag>.json``.  ``--table`` gathers every ``pong-*.json`` and
``h2h-pong-*.json`` into the block between ``<!-- bench:pong -->`` markers of
docs/benchmarks.md.  The peer workload (TRL) has no acting-policy trainer, hence no ratio.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from common import ROOT, record

RESULTS = ROOT / "bench" / "results"
PONG = dict(n_envs=8, n_steps=128, lr=3e-4, clip=0.2)
H2H = ("rlhf", "nlhf")
STEPS = {"ppo": 100_000, "rlhf": 9765, "nlhf": 9765, "nash-md-pg": 8000}  # 10M; 6.4M


def curve(folder: Path) -> dict:
    """Minutes and agent steps at which the last-20 mean first passed 0, and its best."""
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    seconds, first, best = 0.0, None, float("-inf")
    for row in rows:
        seconds += row.get("step_seconds", 0.0)
        value = row.get("episode_return")
        if value is None or row.get("episodes", 0) < 20:
            continue
        best = max(best, value)
        if first is None and value > 0:
            first = {"minutes": seconds / 60, "agent_steps": row.get("agent_steps")}
    last = rows[-1]
    return {
        "training_minutes": seconds / 60,
        "agent_steps": last.get("agent_steps"),
        "labels": last.get("labels"),
        "last_20_mean": last.get("episode_return"),
        "best_20_mean": best,
        "first_above_0": first,
    }


def train(args: argparse.Namespace, out: Path):
    from nlhf.config import build_config
    from nlhf.control import ppo, routes

    overrides = dict(item.partition("=")[::2] for item in args.trainer)
    nash_md_pg = args.route == "nlhf" and overrides.get("update", "nash-md-pg") == "nash-md-pg"
    fields = dict(PONG, env="ALE/Pong-v5", sticky=args.sticky, seed=args.seed, out=str(out))
    steps = STEPS["nash-md-pg" if nash_md_pg else args.route]  # the label schedule's horizon
    fields.update(time_limit=args.minutes, steps=steps, progress=False, tensorboard=False)
    if nash_md_pg:
        for key in PONG:  # PPO's rollout shape; Nash-MD-PG keeps its own
            fields.pop(key)
    elif args.route == "nlhf":  # the SPO update: PPO's machinery, with PPO's lr decay
        fields["schedule"] = "linear"
    fields.update(overrides)
    if args.route == "ppo":
        return ppo.train(build_config(ppo.Config, fields))[0]
    cls = routes.RLHFConfig if args.route == "rlhf" else routes.NLHFConfig
    return routes.train(build_config(cls, fields))[0]


def run(args: argparse.Namespace) -> None:
    import numpy as np
    import torch

    from nlhf.control.rollout import episode_returns
    from nlhf.eval.stats import mean_interval

    torch.set_num_threads(1)
    name = f"pong-{args.route}-sticky{args.sticky:g}" + (f"-{args.tag}" if args.tag else "")
    out = ROOT / "runs" / "bench" / name
    start = time.perf_counter()
    algorithm = train(args, out)
    wall = time.perf_counter() - start
    games = episode_returns(
        algorithm.policy, "ALE/Pong-v5", args.games, args.seed + 1, sticky=args.sticky
    )
    result = {
        "route": args.route,
        "sticky": args.sticky,
        "seed": args.seed,
        "minutes_limit": args.minutes,
        "trainer": args.trainer,
        "wall_minutes": wall / 60,
        **curve(out),
        "games": {
            **mean_interval(np.asarray(games)).as_dict(),
            "returns": games,
            "at_or_above_0": int(np.sum(np.array(games) >= 0)),
        },
    }
    from nlhf.files import atomic_write_json

    atomic_write_json(RESULTS / f"{name}.json", {"benchmark": name, **result})
    print(json.dumps(result, indent=2))


def head_to_head(args: argparse.Namespace) -> None:
    """P(RLHF's policy ≻ NLHF's) under the oracle labeler, and each one's fresh games."""
    from nlhf.control.eval_cli import Config, evaluate
    from nlhf.files import atomic_write_json

    suffix = f"sticky{args.sticky:g}" + (f"-{args.tag}" if args.tag else "")
    policies = [str(ROOT / "runs" / "bench" / f"pong-{r}-{suffix}" / "policy") for r in H2H]
    config = Config(
        policies=policies, env="ALE/Pong-v5", sticky=args.sticky, episodes=args.games,
        pairs=100, length=1000, seed=args.seed + 1,
    )  # fmt: skip
    result = json.loads(json.dumps(evaluate(config)).replace(f"{ROOT}/", ""))  # no machine path
    name = f"h2h-pong-{suffix}"
    atomic_write_json(RESULTS / f"{name}.json", {"benchmark": name, **result})
    print(json.dumps(result["head_to_head"], indent=2))


def h2h_table() -> list[str]:
    rows = []
    for path in sorted(RESULTS.glob("h2h-pong-*.json")):
        r = json.loads(path.read_text())
        (g,) = r["head_to_head"]
        sticky = r["benchmark"].removeprefix("h2h-pong-sticky").split("-")[0]
        rows.append(
            f"| {r['benchmark'].removeprefix('h2h-pong-')} | {sticky} "
            f"| {g['mean']:.3f} ({g['low']:.3f} to {g['high']:.3f}) | {g['n']} | 1,000 |"
        )
    if not rows:
        return []
    return [
        "",
        "Head to head under the oracle labeler (`--head-to-head`): P(RLHF's policy ≻ NLHF's) "
        "over paired continuations from the same start states.",
        "",
        "| runs | sticky | P(rlhf ≻ nlhf) (95% interval) | start states | steps each |",
        "|---|---:|---|---:|---:|",
        *rows,
    ]


def table() -> None:
    lines = [
        "| route | sticky | minutes | agent steps | labels | passed 0 at | best last-20 mean "
        "| 10 fresh games (95% interval) |",
        "|---|---:|---:|---:|---:|---|---:|---|",
    ]
    results = {}
    for path in sorted(RESULTS.glob("pong-*.json")):
        r = json.loads(path.read_text())
        results[path.stem] = r
        first = r["first_above_0"]
        passed = f"{first['minutes']:.1f} min, {first['agent_steps'] / 1e6:.2f}M" if first else "—"
        labels = f"{r['labels']:,.0f}" if r.get("labels") else "—"
        g, run = r["games"], r["benchmark"].removeprefix("pong-")
        lines.append(
            f"| {run} | {r['sticky']:g} | {r['training_minutes']:.1f} "
            f"| {r['agent_steps'] / 1e6:.2f}M | {labels} | {passed} | {r['best_20_mean']:+.1f} "
            f"| {g['mean']:+.1f} ({g['low']:+.1f} to {g['high']:+.1f}), {g['at_or_above_0']} "
            f"of {len(g['returns'])} ≥ 0 |"
        )
    record("pong", {"runs": results}, "\n".join(lines + h2h_table()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--route", choices=["ppo", "rlhf", "nlhf"], default="ppo")
    parser.add_argument("--sticky", type=float, default=0.0, help="repeat_action_probability")
    parser.add_argument("--minutes", type=float, default=15.0, help="training time limit")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--games", type=int, default=10, help="fresh games of the saved policy")
    parser.add_argument("--trainer", action="append", default=[], help="key=value route field")
    parser.add_argument("--tag", default="", help="suffix of the result's name")
    parser.add_argument("--table", action="store_true", help="only rebuild the docs table")
    parser.add_argument(
        "--head-to-head", action="store_true", help="RLHF's saved policy against NLHF's (--tag)"
    )
    args = parser.parse_args()
    args.trainer = [item for group in args.trainer for item in group.split(",") if item]
    if args.table:
        table()
    elif args.head_to_head:
        head_to_head(args)
    else:
        run(args)


if __name__ == "__main__":
    main()

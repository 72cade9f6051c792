"""``nlhf control train rlhf|nlhf``: one preference route on a game, from labels to a saved policy.

    nlhf control train rlhf --env CartPole-v1 --labeler oracle
    nlhf control train nlhf --labeler noisy --budget 500 --time-limit 3
    nlhf control train rlhf --labeler mistake --labeler-options mistake=0.2 --n-envs 8
    nlhf control train nlhf --labeler human --db labels.sqlite    # people label clips

Each route's config (:class:`~nlhf.control.routes.RLHFConfig`, ``NLHFConfig``) is the
command's: ``--help`` lists every field of its trainer (PPO or Nash-MD-PG) and of the
labelling.  Writes into ``--out``: ``policy/`` (the acting policy), ``metrics.jsonl`` (per
step: the true ``episode_return``, ``labels``, the judge's accuracies, …), ``checkpoints/``
(the same command resumes), ``config.json`` and ``summary.json`` (route, labeler, steps,
labels, wall time, last return).  Without gymnasium the command stops with one line naming
``pip install 'nlhf[control]'``.
"""

from __future__ import annotations

import json
import time

from nlhf.control import require
from nlhf.control.routes import NLHFConfig, RLHFConfig, train
from nlhf.files import atomic_write_json

__all__ = ["NLHFConfig", "RLHFConfig", "run"]


def run(config: RLHFConfig | NLHFConfig) -> int:
    require("gymnasium")
    route_name = "rlhf" if isinstance(config, RLHFConfig) else "nlhf"
    start = time.perf_counter()
    route, last = train(config)
    seconds = time.perf_counter() - start
    summary = {
        "route": route_name,
        "env": config.env,
        "labeler": config.labeler,
        "steps": route.trainer.steps_done,
        "agent_steps": last.get("agent_steps"),
        "labels": route.labelling.buffer.added,
        "labels_asked": route.labelling.asked,
        "wall_seconds": seconds,
        "episode_return": last.get("episode_return"),
    }
    atomic_write_json(config.out + "/summary.json", summary)
    ret = summary["episode_return"]
    print(
        f"nlhf control train {route_name}: {config.env}, {summary['steps']} steps, "
        f"{summary['labels']} labels ({config.labeler}), {seconds:.0f} s; "
        f"last return {'n/a' if ret is None else f'{ret:.1f}'} → {config.out}/policy"
    )
    print(json.dumps(summary))
    return 0

"""The tournament evaluator: pairwise win rates among policies, as in the NLHF paper's table.

    nlhf eval --policies reference,runs/nash-md/policy,runs/ppo/policy --judges vader
    from nlhf.eval import run_tournament
    result = run_tournament(["reference", "runs/nash-md/policy"], prompts, ["vader"],
                            out="runs/tournament")

Modules: ``stats`` (win-rate matrices, intervals over prompts, judge disagreement: pure
numpy), ``entrants`` (policy specs, base models, loading), ``rollouts`` (seeded sampling,
KL to the reference), ``judging`` (per-comparison preferences), ``tournament`` (the whole
run), ``report`` (JSON, markdown, heat map), ``frontier`` (checkpoints as (KL, win rate)
points, envelopes, verdicts at matched KL), ``cli`` (``nlhf eval``).
"""

from nlhf.eval.rollouts import Sampling
from nlhf.eval.stats import disagreement, mean_interval, win_rate_matrix
from nlhf.eval.tournament import Tournament, run_tournament

__all__ = [
    "Sampling",
    "Tournament",
    "disagreement",
    "mean_interval",
    "run_tournament",
    "win_rate_matrix",
]

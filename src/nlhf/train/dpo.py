"""``nlhf train dpo``: offline Direct Preference Optimization on preference pairs.

    nlhf train dpo                                       # SmolLM2 + LoRA, packaged HH pairs
    nlhf train dpo --data imdb max_pairs=2000 beta=0.1 --out runs/dpo-imdb
    nlhf train dpo --data pairs.jsonl epochs=3 lr=5e-5

Each step minimizes :func:`nlhf.losses.dpo_loss`, −log σ(β·h) with h = log π/μ(y_w) −
log π/μ(y_l) over the batch's pairs (sequence log-probs of the response tokens; μ = the policy
with its adapter off, or a frozen copy without LoRA).  Data, tokens and the held-out
implicit-reward accuracy before and after: :mod:`nlhf.train.offline`; parameter names in TRL
and the logged metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import option
from nlhf.train.offline import PairConfig, run_pairs


@dataclass
class Config(PairConfig):
    """Offline DPO: minimize −log σ(β·(log π/μ(y_w) − log π/μ(y_l))) over preference pairs."""

    out: str = option("runs/dpo", "output folder: metrics.jsonl, metrics.json, policy/")


def run(config: Config) -> int:
    return run_pairs(config, "dpo")

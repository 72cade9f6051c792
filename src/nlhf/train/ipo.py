"""``nlhf train ipo``: offline Identity Preference Optimization (Azar et al. 2023).

    nlhf train ipo                                       # SmolLM2 + LoRA, packaged HH pairs
    nlhf train ipo --data imdb max_pairs=2000 beta=0.1 --out runs/ipo-imdb

Each step minimizes :func:`nlhf.losses.ipo_loss`, (h − 1/(2β))² with h = log π/μ(y_w) −
log π/μ(y_l): the margin is regressed to a finite target, so β acts as the regularization τ.
Everything else is as in ``nlhf train dpo`` (:mod:`nlhf.train.offline`); parameter names in
TRL and the logged metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import option
from nlhf.train.offline import PairConfig, run_pairs


@dataclass
class Config(PairConfig):
    """Offline IPO: regress the log-ratio margin h of each preference pair to 1/(2β)."""

    out: str = option("runs/ipo", "output folder: metrics.jsonl, metrics.json, policy/")


def run(config: Config) -> int:
    return run_pairs(config, "ipo")

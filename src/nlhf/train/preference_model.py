"""``nlhf train preference-model``: a pairwise preference model P(y ≻ y′ | x) from pairs.

    nlhf train preference-model                              # packaged HH pairs, MiniLM encoder
    nlhf train preference-model --data imdb --rank 8 --out runs/pm-imdb

The model (``nlhf.models.preference_model``) is antisymmetric by construction and can
express cyclic preferences; ``--rank 0`` reduces it to a Bradley–Terry model.  Writes
``<out>/model`` and ``<out>/metrics.json`` (accuracy with 95% interval, mean margin,
log-loss, ECE, and the length-only baseline on the same held-out pairs).
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.assets import resolve_model
from nlhf.config import option
from nlhf.models.preference_model import PreferenceModel
from nlhf.train.judge_training import JudgeTrainConfig, train_judge
from nlhf.train.pairs import load_training_pairs

HEAD_NAMES = ("reward_head", "embed_head", "W")


@dataclass
class Config(JudgeTrainConfig):
    """Train a pairwise preference model: P(y ≻ y′) = σ(r − r′ + vᵀ(W − Wᵀ)v′)."""

    out: str = option("runs/preference-model", "output folder: model/, metrics.json, metrics.jsonl")
    rank: int = option(8, "dimension of the skew-symmetric interaction (0: Bradley–Terry)")

    def check(self) -> None:
        self.at_least(0, "rank")


def pair_logit(model, prompts, chosen, rejected):
    return model.logit(prompts, chosen, rejected)


def run(config: Config) -> int:
    from transformers import set_seed  # noqa: PLC0415 - its module imports peft, slowly

    set_seed(config.seed)  # before the fresh heads are initialized
    pairs = load_training_pairs(config, config.seed)
    model = PreferenceModel.from_backbone(
        resolve_model(config.backbone, "encoder"), config.rank, config.max_length
    )
    train_judge(config, model, pair_logit, HEAD_NAMES, "preference-model", pairs)
    return 0

"""``nlhf train reward-model``: a Bradley–Terry reward model r(x, y) from preference pairs.

    nlhf train reward-model                                  # packaged HH pairs, MiniLM encoder
    nlhf train reward-model --data imdb max_pairs=2000 --out runs/rm-imdb
    nlhf train reward-model --data pairs.jsonl --backbone path/to/encoder

Writes ``<out>/model`` (load with ``nlhf.models.reward_model.RewardModel.load``) and
``<out>/metrics.json``: held-out accuracy with its 95% interval, mean margin, log-loss,
calibration (ECE) and the "shorter response preferred" baseline on the same pairs.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.assets import resolve_model
from nlhf.config import option
from nlhf.models.reward_model import RewardModel
from nlhf.train.judge_training import JudgeTrainConfig, train_judge
from nlhf.train.pairs import load_training_pairs

HEAD_NAMES = ("classifier", "score")  # the fresh one-output head of *ForSequenceClassification


@dataclass
class Config(JudgeTrainConfig):
    """Train a Bradley–Terry reward model: minimize −log σ(r(x, y_w) − r(x, y_l))."""

    out: str = option("runs/reward-model", "output folder: model/, metrics.json, metrics.jsonl")


def pair_logit(model, prompts, chosen, rejected):
    n = len(prompts)
    rewards = model.score(prompts + prompts, chosen + rejected)
    return rewards[:n] - rewards[n:]


def run(config: Config) -> int:
    from transformers import set_seed  # noqa: PLC0415 - its module imports peft, slowly

    set_seed(config.seed)  # before the fresh heads are initialized
    pairs = load_training_pairs(config, config.seed)
    model = RewardModel.from_backbone(resolve_model(config.backbone, "encoder"), config.max_length)
    train_judge(config, model, pair_logit, HEAD_NAMES, "reward-model", pairs)
    return 0

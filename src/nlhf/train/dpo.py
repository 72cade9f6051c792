"""``nlhf train dpo``: offline Direct Preference Optimization on preference pairs.

    nlhf train dpo                                       # SmolLM2 + LoRA, packaged HH pairs
    nlhf train dpo --data imdb max_pairs=2000 beta=0.1 --out runs/dpo-imdb
    nlhf train dpo --data pairs.jsonl epochs=3 lr=5e-5

Minimizes :func:`nlhf.losses.dpo_loss`, −log σ(β·h) with h = log π/μ(y_w) − log π/μ(y_l)
(sequence log-probs of the response tokens; μ = the policy with its adapter off, or a frozen
copy without LoRA, evaluated once per batch without gradient).  The loop, data options and
outputs are :mod:`nlhf.train.offline`'s: ``<out>/policy``, ``metrics.jsonl``, and
``metrics.json`` with the held-out implicit-reward accuracy (the fraction of held-out pairs
with h > 0, ties ½) before and after training.  Pair weights of the data set are not used.

Parameters and their TRL DPOConfig names: ``beta`` = beta (0.1 in both); ``lr`` =
learning_rate (TRL's 1e-6 is for full fine-tuning; 1e-4 here suits the default LoRA, not
tuned on SmolLM2); ``batch_size`` = per_device_train_batch_size; ``epochs`` =
num_train_epochs; ``max_steps``, ``max_prompt_length``, ``max_completion_length`` keep their
names; TRL's loss_type=sigmoid is this command (``nlhf train ipo`` is loss_type=ipo).

Logged metrics (metrics.jsonl, TensorBoard): ``loss``; ``pairs`` (in the step's batch);
``reward_chosen``, ``reward_rejected``, ``reward_margin`` (implicit reward β·log π/μ),
``reward_accuracy`` (fraction of the batch with margin > 0); ``logp_chosen``,
``logp_rejected``; ``grad_norm``; ``lr``; ``epoch``; ``step_seconds``; ``eval_accuracy``,
``eval_reward_margin``, ``eval_loss`` every ``eval_every`` steps.
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

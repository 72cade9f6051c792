"""``nlhf train sft``: supervised fine-tuning on demonstrations.

    nlhf train sft                                       # chosen replies of the HH pairs
    nlhf train sft --data demos.jsonl epochs=3           # rows {"prompt": ..., "response": ...}
    nlhf train sft --data imdb max_pairs=2000 --out runs/sft-imdb   # positive reviews

Minimizes :func:`nlhf.losses.sft_loss`, the negative log-likelihood per response token (the
prompt is context only, never a target; EOS ends each response).  Demonstrations are the
``response`` column of a JSONL/CSV file with ``prompt`` and ``response`` (a prompt may be
text or a list of chat turns), or the chosen responses of a preference data set (hh, imdb,
or a prompt/chosen/rejected file).  The loop, options and outputs are those of
:mod:`nlhf.train.offline`; ``metrics.json`` holds the held-out NLL per token and perplexity
before and after training.

Parameters and their TRL SFTConfig names: ``lr`` = learning_rate (2e-4 here, for the default
LoRA; not tuned on SmolLM2), ``batch_size`` = per_device_train_batch_size, ``epochs`` =
num_train_epochs, ``max_steps``; the loss on response tokens only is TRL's
completion_only_loss=True; ``max_prompt_length`` + ``max_completion_length`` bound TRL's
max_length.

Logged metrics (metrics.jsonl, TensorBoard): ``loss`` (NLL per token); ``tokens`` (response
tokens in the batch); ``grad_norm``; ``lr``; ``epoch``; ``step_seconds``; ``eval_nll``,
``eval_perplexity`` every ``eval_every`` steps.
"""

from __future__ import annotations

from dataclasses import dataclass

from nlhf.config import option
from nlhf.train.offline import OfflineConfig, run_sft


@dataclass
class Config(OfflineConfig):
    """SFT: minimize the negative log-likelihood of demonstration responses given prompts."""

    out: str = option("runs/sft", "output folder: metrics.jsonl, metrics.json, policy/")
    lr: float = option(2e-4, "learning rate")


def run(config: Config) -> int:
    return run_sft(config)

"""``nlhf train sft``: supervised fine-tuning on demonstrations.

    nlhf train sft                                       # chosen replies of the HH pairs
    nlhf train sft --data demos.jsonl epochs=3           # rows {"prompt": ..., "response": ...}
    nlhf train sft --data imdb max_pairs=2000 --out runs/sft-imdb   # positive reviews

Each step minimizes :func:`nlhf.losses.sft_loss`, the negative log-likelihood per response
token over the batch (the prompt is context only; EOS ends each response).  Demonstrations are
a prompt/response JSONL/CSV file or the chosen responses of a preference data set.  Data,
tokens and the held-out NLL before and after: :mod:`nlhf.train.offline`; parameter names in
TRL and the logged metrics: ``docs/trainers.md``.
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

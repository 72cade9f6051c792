"""Bradley–Terry reward model: any sequence-classification backbone with one output, r(x, y).

    from nlhf.models.reward_model import RewardModel
    rm = RewardModel.from_backbone("path/or/hub-name")      # a fresh one-output head
    rm.score(["Review: "], ["a great film"])                 # tensor of shape (1,)
    rm.save("runs/rm"); rm = RewardModel.load("runs/rm")

Trained by ``nlhf train reward-model`` with −log σ(r(x, y_w) − r(x, y_l)).  The prompt and the
response are encoded as a text pair; long inputs lose the *start* of the prompt (the response
and the end of the dialogue are what matter for a judgement).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn
from transformers import AutoModelForSequenceClassification, AutoTokenizer
from transformers.utils import logging

from nlhf.files import atomic_write_json
from nlhf.models.activations import fuse_gelu
from nlhf.models.errors import ModelError, loading
from nlhf.models.memory import into_memory

KIND_FILE = "nlhf_judge.json"


def encode_pairs(
    tokenizer, prompts: Sequence[str], responses: Sequence[str], max_length: int
) -> dict[str, torch.Tensor]:
    """Tokenize (prompt, response) text pairs, truncating the prompt from the left."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    tokenizer.truncation_side = "left"
    return tokenizer(
        list(prompts),
        list(responses),
        truncation="longest_first",
        max_length=max_length,
        padding=True,
        return_tensors="pt",
    )


@contextmanager
def quiet_load_report():
    """Silence transformers' per-load report (it lists the fresh head as "missing")."""
    level = logging.get_verbosity()
    logging.set_verbosity_error()
    try:
        yield
    finally:
        logging.set_verbosity(level)


def read_kind(folder: str | Path) -> dict:
    """The ``nlhf_judge.json`` record of a judge folder (its kind, rank, max_length)."""
    path = Path(folder) / KIND_FILE
    if not Path(folder).exists():
        raise ModelError(f"{folder}: no such judge folder")
    if not path.is_file():
        raise ModelError(f"{folder}: not an nlhf judge folder (no {KIND_FILE})")
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise ModelError(f"{path}: expected a JSON object, got {type(meta).__name__}")
    return meta


class RewardModel(nn.Module):
    """r(x, y) from a sequence-classification model with ``num_labels=1``."""

    def __init__(self, model, tokenizer, max_length: int = 256) -> None:
        super().__init__()
        fuse_gelu(model)
        self.model = model
        self.tokenizer = tokenizer
        self.max_length = max_length

    @classmethod
    def from_backbone(cls, name_or_path: str, max_length: int = 256) -> RewardModel:
        with loading(name_or_path, "an encoder backbone"):
            with quiet_load_report():  # the new head is expected to be missing from the backbone
                model = AutoModelForSequenceClassification.from_pretrained(
                    name_or_path, num_labels=1
                )
            tokenizer = AutoTokenizer.from_pretrained(name_or_path)
        model = into_memory(model)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
        return cls(model, tokenizer, max_length)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def forward(self, input_ids, attention_mask, token_type_ids=None) -> torch.Tensor:
        kwargs = {} if token_type_ids is None else {"token_type_ids": token_type_ids}
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
        return out.logits[:, 0].float()

    def score(self, prompts: Sequence[str], responses: Sequence[str]) -> torch.Tensor:
        """Rewards r(x, y), shape (B,), float32, with gradient if enabled."""
        batch = encode_pairs(self.tokenizer, prompts, responses, self.max_length).to(self.device)
        return self(**batch)

    def save(self, folder: str | Path) -> Path:
        folder = Path(folder)
        self.model.save_pretrained(folder)
        self.tokenizer.save_pretrained(folder)
        atomic_write_json(
            folder / KIND_FILE, {"kind": "reward-model", "max_length": self.max_length}
        )
        return folder

    @classmethod
    def load(cls, folder: str | Path) -> RewardModel:
        meta = read_kind(folder)
        if meta.get("kind") != "reward-model":
            raise ValueError(f"{folder}: holds a {meta.get('kind')!r}, not a reward model")
        with loading(folder, "a reward model"):
            model = AutoModelForSequenceClassification.from_pretrained(folder)
            tokenizer = AutoTokenizer.from_pretrained(folder)
        return cls(into_memory(model), tokenizer, meta["max_length"])

"""What DPO, IPO and SFT share: their options, data, tokens and objectives (``nlhf train
dpo|ipo|sft``); the loop is :mod:`nlhf.train.core`'s, the batches :mod:`nlhf.train.pairs`'.

    nlhf train dpo --data pairs.jsonl epochs=3        # or ipo; sft also reads prompt/response

1. data: the pairs of ``--data`` (:func:`nlhf.train.pairs.load_training_pairs`) or, for SFT,
   a prompt/response file; prompts rendered with the policy's tokenizer (its chat template
   when it has one, :func:`nlhf.data.chat.render_prompt`);
2. tokens: the prompt cut from the left to ``max_prompt_length``, the response from the right
   to ``max_completion_length`` (EOS appended when it fits); the loss on response tokens only;
3. objectives: :class:`PairObjective` (DPO/IPO: one gradient forward over chosen and rejected,
   one no-gradient forward of the reference; held-out implicit-reward accuracy) and
   :class:`SFTObjective` (NLL per response token; held-out NLL), evaluated before and after.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch

from nlhf.config import option
from nlhf.data import fields
from nlhf.data.chat import render_prompt
from nlhf.data.errors import DataError
from nlhf.data.loader import check_source, collect
from nlhf.data.rows import read_rows
from nlhf.data.schema import as_prompt_content
from nlhf.judge.evaluation import accuracy
from nlhf.losses import dpo_loss, ipo_loss, sft_loss
from nlhf.train.core import Trainer, TrainFields
from nlhf.train.distributed import Processes
from nlhf.train.pairs import (
    DATA_SETS,
    DataFields,
    EpochBatches,
    Objective,
    Share,
    load_training_pairs,
    split_indices,
    too_few,
    train_and_evaluate,
)
from nlhf.train.policy_fields import PolicyFields, load_policy


@dataclass
class OfflineConfig(TrainFields, PolicyFields, DataFields):
    """Fields shared by the offline trainers (DPO, IPO, SFT)."""

    chat_template: bool = option(
        True, "render prompts with the tokenizer's chat template when it has one"
    )
    max_prompt_length: int = option(256, "prompt tokens kept (cut from the left)")
    max_completion_length: int = option(128, "response tokens kept (cut from the right)")
    lr: float = option(1e-4, "learning rate")
    schedule: Literal["constant", "linear", "cosine"] = option(
        "linear", "learning-rate schedule after warm-up"
    )
    out: str = option("runs/offline", "output folder: metrics.jsonl, metrics.json, policy/")
    checkpoint_every: int = option(50, "save a resumable checkpoint every this many steps")

    def check(self) -> None:
        self.at_least(1, "max_prompt_length", "max_completion_length")


@dataclass
class PairConfig(OfflineConfig):
    """Offline DPO / IPO on preference pairs."""

    beta: float = option(
        0.1, "β: DPO's implicit-reward temperature, IPO's regularization (TRL DPOConfig.beta)"
    )

    def check(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")


@dataclass(frozen=True)
class Example:
    """One training row: a rendered prompt, a response (chosen), and a rejected one for pairs."""

    prompt: str
    chosen: str
    rejected: str | None = None


# --------------------------------------------------------------------------- data


def pair_examples(pairs, tokenizer=None) -> list[Example]:
    """Preference pairs → examples, prompts rendered (chat template when ``tokenizer`` has one)."""
    return [Example(render_prompt(p.prompt, tokenizer), p.chosen, p.rejected) for p in pairs]


def load_pair_split(config: OfflineConfig, tokenizer=None) -> tuple[list[Example], list[Example]]:
    """(train, held-out) examples of ``config.data``, split as the judge trainers split it."""
    train, held_out = load_training_pairs(config, config.seed)
    return pair_examples(train, tokenizer), pair_examples(held_out, tokenizer)


def _is_demonstration_file(path: str) -> bool:
    for _, row in read_rows(path):
        if isinstance(row, DataError):
            continue
        return "response" in row and "chosen" not in row
    return False


def load_demonstrations(path: str, skip_bad_rows: bool = False) -> list[tuple[Any, str]]:
    """(prompt, response) rows of a JSONL/CSV file; bad rows name file, row and field."""

    def convert(row):
        return (
            as_prompt_content(fields.require(row, "prompt")),
            fields.text(row, "response", allow_empty=True),
        )

    rows, skipped = collect(read_rows(path), convert, source=path, skip_bad_rows=skip_bad_rows)
    if skipped:
        print(f"{path}: {skipped.summary()}")
    return rows


def load_sft_split(config: OfflineConfig, tokenizer=None) -> tuple[list[Example], list[Example]]:
    """Demonstrations: a prompt/response file, or the chosen responses of preference pairs."""
    data = config.data
    check_source("data", data, DATA_SETS)
    if data in DATA_SETS or not _is_demonstration_file(data):
        train, held_out = load_pair_split(config, tokenizer)
        return (
            [Example(e.prompt, e.chosen) for e in train],
            [Example(e.prompt, e.chosen) for e in held_out],
        )
    rows = load_demonstrations(data, config.skip_bad_rows)
    if config.max_pairs is not None:
        rows = rows[: config.max_pairs]
    examples = [Example(render_prompt(p, tokenizer), r) for p, r in rows]
    try:
        train, held = split_indices(len(examples), config.held_out, config.seed)
    except ValueError:
        raise too_few(data, len(examples), "demonstration") from None
    return [examples[i] for i in train], [examples[i] for i in held]


@dataclass
class Encoded:
    """Left-padded prompts and right-padded responses of one batch, on the policy's device."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor


def encode(
    tokenizer,
    prompts: list[str],
    responses: list[str],
    max_prompt_length: int,
    max_completion_length: int,
    eos_id: int,
    pad_id: int,
    device: torch.device | str = "cpu",
) -> Encoded:
    """Tokenize (prompt, response) rows; the response ends in EOS unless it was cut."""

    def ids(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt_rows = [ids(p)[-max_prompt_length:] for p in prompts]
    completion_rows = [[*ids(r), eos_id][:max_completion_length] for r in responses]
    for i, row in enumerate(prompt_rows):
        if not row:
            raise DataError(
                "empty_text",
                f"the prompt {prompts[i]!r:.60} has no tokens",
                field="prompt",
                location=f"batch row {i}",
            )
    p_len = max(len(r) for r in prompt_rows)
    c_len = max(len(r) for r in completion_rows)
    prompt_ids = torch.full((len(prompts), p_len), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((len(prompts), p_len), dtype=torch.long)
    completion_ids = torch.full((len(prompts), c_len), pad_id, dtype=torch.long)
    completion_mask = torch.zeros((len(prompts), c_len), dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompt_rows, completion_rows, strict=True)):
        prompt_ids[i, p_len - len(p) :] = torch.tensor(p)
        prompt_mask[i, p_len - len(p) :] = 1
        completion_ids[i, : len(c)] = torch.tensor(c)
        completion_mask[i, : len(c)] = 1
    return Encoded(
        prompt_ids.to(device),
        prompt_mask.to(device),
        completion_ids.to(device),
        completion_mask.to(device),
    )


# --------------------------------------------------------------------------- objectives


class _Encoding(Objective):
    """An objective on the policy's own tokens of (prompt, response) rows."""

    config: OfflineConfig

    @property
    def policy(self) -> Any:
        return self.trainer.policy

    def encode(self, prompts: list[str], responses: list[str]) -> Encoded:
        policy = self.policy
        return encode(
            policy.tokenizer,
            prompts,
            responses,
            self.config.max_prompt_length,
            self.config.max_completion_length,
            policy.eos_token_ids[0],
            policy.pad_token_id,
            policy.device,
        )


class PairObjective(_Encoding):
    """DPO or IPO on (chosen, rejected): one gradient forward over both, one reference one."""

    def __init__(
        self,
        trainer: Trainer,
        config: PairConfig,
        batches: EpochBatches,
        held_out: list[Example],
        loss_type: Literal["dpo", "ipo"],
    ) -> None:
        super().__init__(trainer, config, batches, held_out)
        if loss_type not in ("dpo", "ipo"):
            raise ValueError(f"loss_type must be dpo or ipo, got {loss_type!r}")
        self.beta = config.beta
        self.loss_fn = dpo_loss if loss_type == "dpo" else ipo_loss

    def _logps(self, batch: list[Example], grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """(2B,) sequence log π and log μ of [chosen rows; rejected rows]."""
        prompts = [e.prompt for e in batch]
        enc = self.encode(
            prompts * 2, [e.chosen for e in batch] + [e.rejected or "" for e in batch]
        )
        args = (enc.prompt_ids, enc.prompt_mask, enc.completion_ids, enc.completion_mask)
        with torch.set_grad_enabled(grad):
            logps = self.policy.logprobs(*args).sum(-1)
        ref = self.policy.reference_logprobs(*args).sum(-1)
        return logps, ref

    def loss(self, share: Share, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        batch = share.examples
        n = len(batch)
        logps, ref = self._logps(batch, grad=True)
        loss = self.loss_fn(logps[:n], logps[n:], ref[:n], ref[n:], self.beta)
        with torch.no_grad():
            reward = self.beta * (logps.detach() - ref)
            margin = reward[:n] - reward[n:]
        return loss, {
            "pairs": share.units,
            "reward_chosen": float(reward[:n].mean()),
            "reward_rejected": float(reward[n:].mean()),
            "reward_margin": float(margin.mean()),
            "reward_accuracy": float(((margin > 0).float() + 0.5 * (margin == 0).float()).mean()),
            "logp_chosen": float(logps[:n].detach().mean()),
            "logp_rejected": float(logps[n:].detach().mean()),
        }

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Implicit-reward accuracy (ties ½, 95% Wilson interval), mean margin, mean loss."""
        examples, batch_size = self.held_out, self.config.eval_batch_size
        margins, losses = [], []
        for i in range(0, len(examples), batch_size):
            chunk = examples[i : i + batch_size]
            n = len(chunk)
            logps, ref = self._logps(chunk, grad=False)
            margins.append(self.beta * ((logps[:n] - ref[:n]) - (logps[n:] - ref[n:])))
            losses.append(
                float(self.loss_fn(logps[:n], logps[n:], ref[:n], ref[n:], self.beta)) * n
            )
        margin = torch.cat(margins).double()
        acc, low, high = accuracy(0.5 + 0.5 * margin.sign().numpy())  # a zero margin counts half
        return {
            "pairs": len(margin),
            "accuracy": acc,
            "accuracy_ci95": [low, high],
            "reward_margin": float(margin.mean()),
            "loss": sum(losses) / len(margin),
        }


class SFTObjective(_Encoding):
    """Negative log-likelihood of the responses (the chosen text), response tokens only; a
    batch's loss is the mean over all its response tokens (see :meth:`tokens`)."""

    def tokens(self, example: Example) -> float:
        """The response tokens ``example`` adds to the loss (EOS included, cut as encoded)."""
        ids = self.policy.tokenizer(example.chosen, add_special_tokens=False)["input_ids"]
        return float(min(len(ids) + 1, self.config.max_completion_length))

    def _logprobs(self, batch: list[Example]) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.encode([e.prompt for e in batch], [e.chosen for e in batch])
        lp = self.policy.logprobs(
            enc.prompt_ids, enc.prompt_mask, enc.completion_ids, enc.completion_mask
        )
        return lp, enc.completion_mask.bool()

    def loss(self, share: Share, step: int) -> tuple[torch.Tensor, dict[str, float]]:
        lp, mask = self._logprobs(share.examples)
        return sft_loss(lp, mask), {"tokens": share.units}

    @torch.no_grad()
    def evaluate(self) -> dict[str, Any]:
        """Per-token NLL over all held-out response tokens, and its perplexity."""
        examples, batch_size = self.held_out, self.config.eval_batch_size
        total, tokens = 0.0, 0
        for i in range(0, len(examples), batch_size):
            lp, mask = self._logprobs(examples[i : i + batch_size])
            total -= float(lp[mask].double().sum())
            tokens += int(mask.sum())
        nll = total / max(1, tokens)
        return {
            "examples": len(examples),
            "tokens": tokens,
            "nll": nll,
            "perplexity": math.exp(nll),
        }


# --------------------------------------------------------------------------- commands


def build(
    config: OfflineConfig,
    policy: Any,
    train: list[Example],
    held_out: list[Example],
    name: Literal["dpo", "ipo", "sft"],
) -> tuple[Trainer, Objective]:
    """The trainer and the objective of ``nlhf train <name>`` on these examples."""
    procs = Processes()
    batches = EpochBatches(train, config, config.seed, procs, config.fsdp)
    trainer = Trainer(config, policy, batches.steps, batches, procs=procs, fsdp=config.fsdp)
    if name == "sft":
        objective: _Encoding = SFTObjective(trainer, config, batches, held_out)
        batches.units = objective.tokens  # a batch's loss: the mean over its response tokens
    else:
        objective = PairObjective(trainer, config, batches, held_out, name)
    return trainer, objective


def train_offline(
    config: OfflineConfig,
    policy: Any,
    train: list[Example],
    held_out: list[Example],
    name: Literal["dpo", "ipo", "sft"],
) -> dict[str, Any]:
    """Train ``policy``; write ``<out>/policy`` and ``<out>/metrics.json`` (the held-out
    evaluation before and after training) and return the latter."""
    trainer, objective = build(config, policy, train, held_out, name)
    return train_and_evaluate(trainer, objective, name)


def run_pairs(config: PairConfig, loss_type: Literal["dpo", "ipo"]) -> int:
    """``nlhf train dpo|ipo``: load the policy and pairs, train, print the held-out summary."""
    torch.manual_seed(config.seed)
    policy = load_policy(config)
    train, held_out = load_pair_split(config, policy.tokenizer if config.chat_template else None)
    trainer, objective = build(config, policy, train, held_out, loss_type)
    result = train_and_evaluate(trainer, objective, loss_type)
    a, b = result["held_out_start"], result["held_out"]
    low, high = b["accuracy_ci95"]
    trainer.say(
        f"{loss_type}: {result['steps']} steps on {len(train)} pairs; held-out implicit-reward "
        f"accuracy {a['accuracy']:.3f} → {b['accuracy']:.3f} (95% CI {low:.3f}–{high:.3f}) on "
        f"{b['pairs']} pairs; mean margin {b['reward_margin']:.3f}\n"
        f"policy saved to {config.out}/policy"
    )
    return 0


def run_sft(config: OfflineConfig) -> int:
    """``nlhf train sft``: load the policy and demonstrations, train, print the held-out NLL."""
    torch.manual_seed(config.seed)
    policy = load_policy(config)
    train, held_out = load_sft_split(config, policy.tokenizer if config.chat_template else None)
    trainer, objective = build(config, policy, train, held_out, "sft")
    result = train_and_evaluate(trainer, objective, "sft")
    a, b = result["held_out_start"], result["held_out"]
    trainer.say(
        f"sft: {result['steps']} steps on {len(train)} demonstrations; held-out NLL per token "
        f"{a['nll']:.4f} → {b['nll']:.4f} (perplexity {b['perplexity']:.2f}) on "
        f"{b['tokens']} tokens\npolicy saved to {config.out}/policy"
    )
    return 0

"""``nlhf train ppo``: RLHF with PPO against a scalar reward and a KL penalty to the reference.

    nlhf train ppo                                   # SmolLM2 + LoRA, IMDB prompts, VADER score
    nlhf train ppo --judge runs/rm/model steps=300 init_kl_coef=0.1
    nlhf train ppo adaptive_kl=false init_kl_coef=0.02 whiten_rewards=true

The classic sentiment pipeline (Ziegler et al. 2019; trlX ``ppo_sentiments``).  Each step:

1. rollout: y ~ π per prompt from the KV-cached sampler, then one no-gradient forward of the
   reference (log μ of every token, μ's logits) and one of policy + value head (the old
   log π and values);
2. reward: the judge's score s(x, y) at the last token, −β·(log π − log μ) at every token
   (:func:`nlhf.losses.kl_penalized_rewards`), optionally whitened;
3. GAE(γ, λ) advantages (whitened over the rollout) and returns;
4. ``epochs`` passes of ``mini_batches`` shuffled mini-batches, one optimizer step each on
   the clipped policy loss + ``vf_coef`` × the clipped value loss;
5. β adapts towards ``kl_target`` (:mod:`nlhf.train.kl_control`), read against the
   rollout's exact KL (:func:`nlhf.models.logprobs.logits_kl`: the policy's forward of step 1
   against μ's logits).

The value head (:mod:`nlhf.train.value_head`) trains with the policy and is saved as
``<out>/value_head.safetensors``.  Parameter names in TRL and trlX, metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import save_file

from nlhf.config import option
from nlhf.errors import UserError
from nlhf.files import atomic_path
from nlhf.losses import (
    explained_variance,
    gae,
    kl_penalized_rewards,
    masked_mean,
    ppo_policy_loss,
    ppo_value_loss,
    token_share,
)
from nlhf.models import sample
from nlhf.models.judges import ScoreJudge
from nlhf.models.sampling import row_generators
from nlhf.models.text import decode_completions
from nlhf.train import distributed
from nlhf.train.core import Algorithm, NonFiniteError, summary
from nlhf.train.kl_control import KLController
from nlhf.train.online import OnlineConfig, PromptBatch, Trainer
from nlhf.train.value_head import (
    PolicyValueOutput,
    ValueHead,
    hidden_size,
    logprobs_and_values,
)


@dataclass
class Config(OnlineConfig):
    """RLHF-PPO: maximize a scalar reward minus β·KL(π‖μ) with PPO's clipped objectives."""

    out: str = option("runs/ppo", "output folder: metrics.jsonl, checkpoints/, policy/")
    lr: float = option(
        5e-5,
        "learning rate (PPO takes epochs × mini_batches steps per rollout, so it needs a "
        "smaller one than the single-step trainers)",
    )
    epochs: int = option(4, "passes over each rollout batch (TRL ppo_epochs)")
    mini_batches: int = option(
        2, "mini-batches per pass, one optimizer step each (TRL num_mini_batches)"
    )
    clip: float = option(0.2, "PPO clip ε of the probability ratio (TRL cliprange)")
    cliprange_value: float = option(
        0.2, "clip of the value update around the rollout's values (TRL cliprange_value)"
    )
    vf_coef: float = option(0.1, "weight of the value loss in the total loss (TRL vf_coef)")
    init_kl_coef: float = option(
        0.05, "initial coefficient β of the per-token KL penalty (TRL init_kl_coef)"
    )
    adaptive_kl: bool = option(
        True, "adapt β towards kl_target (Ziegler et al.); false: β stays fixed (adap_kl_ctrl)"
    )
    kl_target: float = option(6.0, "adaptive β: target sequence KL(π‖μ) in nats (TRL target)")
    kl_horizon: int = option(
        10_000, "adaptive β: samples over which β moves by at most 20% (TRL horizon)"
    )
    gamma: float = option(1.0, "discount γ of the per-token rewards in GAE")
    lam: float = option(0.95, "GAE λ (1: Monte-Carlo returns, 0: one-step TD)")
    whiten_rewards: bool = option(
        False, "whiten the per-token rewards over each rollout (variance only) before GAE"
    )
    value_trunk: Literal["shared", "detached"] = option(
        "shared",
        "shared: the value loss also trains the policy's trainable weights (trlX/TRL); "
        "detached: it trains the value head alone",
    )

    def check(self) -> None:
        self.at_least(1, "epochs", "mini_batches", "kl_horizon")
        if self.batch_size % self.mini_batches:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of "
                f"mini_batches ({self.mini_batches})"
            )
        for name in ("clip", "cliprange_value", "kl_target"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        self.at_least(0, "vf_coef", "init_kl_coef")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ValueError(f"gamma and lam must be in [0, 1], got {self.gamma}, {self.lam}")


@dataclass
class Rollout:
    """One step's samples, padded to common widths (prompts left, completions right)."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    tokens: torch.Tensor
    mask: torch.Tensor
    logprobs: torch.Tensor
    """log π of the rollout policy from the values forward: PPO's old log-probs."""
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    metrics: dict[str, float]

    def rows(self, index: torch.Tensor) -> Rollout:
        """The rows ``index``, with all-padding prompt and completion columns trimmed."""
        prompt_mask, mask = self.prompt_mask[index], self.mask[index]
        first = int(prompt_mask.any(0).long().argmax())
        width = int(mask.sum(1).max())
        return Rollout(
            prompt_ids=self.prompt_ids[index, first:],
            prompt_mask=prompt_mask[:, first:],
            tokens=self.tokens[index, :width],
            mask=mask[:, :width],
            logprobs=self.logprobs[index, :width],
            values=self.values[index, :width],
            advantages=self.advantages[index, :width],
            returns=self.returns[index, :width],
            metrics={},
        )


@dataclass
class MicroBatch:
    """Rows of the rollout that one forward and backward take, and their weight: their tokens'
    share of the mini-batch's tokens on every process (0 for a process with none of them)."""

    rows: torch.Tensor
    weight: float


def _pad(tensors: list[torch.Tensor], value: int | float, left: bool) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    out = []
    for t in tensors:
        fill = t.new_full((t.shape[0], width - t.shape[1]), value)
        out.append(torch.cat([fill, t] if left else [t, fill], dim=1))
    return torch.cat(out)


class JudgeKindError(UserError, TypeError):
    """A judge that cannot drive the trainer (PPO needs scores, a preference model gives none)."""


class PPO(Algorithm):
    """The algorithm: ``update`` = rollout, then the PPO epochs, then adapt β."""

    config: Config
    step_rules = ("plain",)  # PPO takes its own epochs of steps

    def __init__(self, trainer: Trainer, config: Config) -> None:
        if not isinstance(trainer.judge, ScoreJudge):
            raise JudgeKindError(
                f"PPO needs a scalar reward, but the judge is a {type(trainer.judge).__name__}: "
                "use a reward model folder (nlhf train reward-model), vader, or a "
                "FunctionJudge (any ScoreJudge); for a pairwise preference model use "
                "nlhf train nash-md"
            )
        super().__init__(trainer, config)
        policy = trainer.policy
        self.head = ValueHead(hidden_size(policy.model)).to(policy.device)
        self.kl = KLController(
            config.init_kl_coef, config.kl_target if config.adaptive_kl else None, config.kl_horizon
        )
        trainer.add_parameters(self.head)  # one optimizer, one schedule, one clip

    # ------------------------------------------------------------------ rollout
    def forward(
        self, prompt_ids, prompt_mask, tokens, mask, reference_logits=None
    ) -> PolicyValueOutput:
        """Log-probs, values and entropy of the completions under π and the value head (and
        their exact KL against μ's ``reference_logits``, when given)."""
        return logprobs_and_values(
            self.trainer.policy.model,
            self.head,
            prompt_ids,
            prompt_mask,
            tokens,
            mask,
            detach_trunk=self.config.value_trunk == "detached",
            reference_logits=reference_logits,
        )

    @torch.no_grad()
    def rollout(self, chunks: list[PromptBatch], step: int) -> Rollout:
        """Sample, score and evaluate every chunk (:meth:`sample_chunk`), pad the chunks to
        common widths, then rewards, GAE advantages and returns (:meth:`advantages`).

        With several processes the rollout holds this process's rows; the whitening and the
        metrics use the statistics of every process's rows."""
        timings = dict.fromkeys(("sample_seconds", "judge_seconds", "rollout_seconds"), 0.0)
        parts: dict[str, list[torch.Tensor]] = {}
        for batch in chunks:
            for key, value in self.sample_chunk(batch, step, timings).items():
                parts.setdefault(key, []).append(value)
        t0 = time.perf_counter()
        pad, scores = self.trainer.policy.pad_token_id, torch.cat(parts.pop("scores"))
        exact_kl = torch.cat(parts.pop("kl"))
        padded = {  # prompts padded on the left, completions on the right
            k: _pad(v, pad if k in ("prompt_ids", "tokens") else 0, k.startswith("prompt"))
            for k, v in parts.items()
        }
        rollout = self.advantages(padded, scores, exact_kl)
        timings["rollout_seconds"] += time.perf_counter() - t0
        rollout.metrics.update(self.trainer.procs.mean_metrics(timings))
        return rollout

    def sample_chunk(
        self, batch: PromptBatch, step: int, timings: dict[str, float]
    ) -> dict[str, torch.Tensor]:
        """1. One chunk's completions with log π and log μ, the judge's scores, and the old
        log-probs and values; the seconds each part took are added to ``timings``."""
        cfg, policy, judge = self.config, self.trainer.policy, self.trainer.judge
        t0 = time.perf_counter()
        y = sample(  # π alone: μ is read below by one batched forward, not per decoded token
            policy,
            batch.ids,
            batch.mask,
            cfg.max_new_tokens,
            temperature=cfg.temperature,
            generator=row_generators(cfg.seed, step, batch.rows),
        )
        t1 = time.perf_counter()
        texts = decode_completions(policy.tokenizer, y.tokens, y.mask)
        scores = torch.as_tensor(judge.scores(batch.texts, texts))
        if scores.shape != (len(texts),):
            raise ValueError(
                f"{type(judge).__name__}.scores returned shape "
                f"{tuple(scores.shape)} for {len(texts)} completions (one score each)"
            )
        t2 = time.perf_counter()
        # log μ of the tokens (the KL penalty) and μ's logits (the exact KL), one forward
        ref_logprobs, ref_logits = policy.reference_logprobs_and_logits(
            batch.ids, batch.mask, y.tokens, y.mask
        )
        out = self.forward(batch.ids, batch.mask, y.tokens, y.mask, ref_logits)
        del ref_logits
        timings["sample_seconds"] += t1 - t0
        timings["judge_seconds"] += t2 - t1
        timings["rollout_seconds"] += time.perf_counter() - t2
        return {
            "prompt_ids": batch.ids,
            "prompt_mask": batch.mask,
            "tokens": y.tokens,
            "mask": y.mask,
            "ref_logprobs": ref_logprobs,
            "logprobs": out.logprobs,
            "values": out.values,
            "scores": scores.float().to(policy.device),
            "kl": out.kl,
        }

    def advantages(
        self, padded: dict[str, torch.Tensor], scores: torch.Tensor, exact_kl: torch.Tensor
    ) -> Rollout:
        """2.–3. The rewards (the scores at the last token, the KL penalty at every token),
        GAE advantages (whitened) and returns of the padded rollout, and its metrics
        (``exact_kl``: each completion's KL over the whole vocabulary, for the log)."""
        cfg, procs = self.config, self.trainer.procs
        mask, values = padded["mask"], padded["values"]
        # log π and log μ from forwards of the same shape (π = μ gives a penalty of exactly 0)
        plp, rlp, keep = padded["logprobs"], padded["ref_logprobs"], mask.bool()
        rewards = kl_penalized_rewards(scores, plp, rlp, keep, self.kl.value)
        kl = (plp - rlp).sum(-1)
        non_score = rewards.sum(-1) - scores
        if cfg.whiten_rewards:
            rewards = distributed.masked_whiten(procs, rewards, keep, shift_mean=False)
        advantages, returns = gae(rewards, values, keep, cfg.gamma, cfg.lam)
        advantages = distributed.masked_whiten(procs, advantages, keep)
        columns = [scores, kl, non_score, mask.sum(1).float(), exact_kl.to(scores.device)]
        rows = procs.gather(torch.stack(columns, dim=1))
        all_scores = rows[:, 0]
        metrics = {
            "reward": float(all_scores.mean()),
            "reward_std": float(all_scores.std()) if len(all_scores) > 1 else 0.0,
            "kl": float(rows[:, 4].mean()),
            "kl_sampled": float(rows[:, 1].mean()),
            "kl_coef": self.kl.value,
            "non_score_reward": float(rows[:, 2].mean()),
            "returns": float(distributed.masked_mean(procs, returns, keep)),
            "value_mean": float(distributed.masked_mean(procs, values, keep)),
            "explained_variance": explained_variance(
                values, returns, keep, partial(distributed.masked_mean, procs)
            ),
            "length": float(rows[:, 3].mean()),
        }
        return Rollout(
            prompt_ids=padded["prompt_ids"],
            prompt_mask=padded["prompt_mask"],
            tokens=padded["tokens"],
            mask=mask,
            logprobs=padded["logprobs"],
            values=values,
            advantages=advantages,
            returns=returns,
            metrics=metrics,
        )

    # ------------------------------------------------------------------ PPO epochs
    def losses(self, batch: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss of ``batch`` and its parts (policy, value, clip fractions, entropy)."""
        cfg = self.config
        out = self.forward(batch.prompt_ids, batch.prompt_mask, batch.tokens, batch.mask)
        keep = batch.mask.bool()
        policy_loss, stats = ppo_policy_loss(
            out.logprobs, batch.logprobs, batch.advantages, keep, cfg.clip
        )
        value_loss = ppo_value_loss(
            out.values, batch.values, batch.returns, keep, cfg.cliprange_value
        )
        with torch.no_grad():
            moved = (out.values - batch.values).abs() > cfg.cliprange_value
            stats["value_clip_fraction"] = masked_mean(moved.float(), keep)
            stats["entropy"] = masked_mean(out.entropy, keep)
        stats.update(policy_loss=policy_loss.detach(), value_loss=value_loss.detach())
        return policy_loss + cfg.vf_coef * value_loss, stats

    def minibatches(self, step: int, device) -> list[torch.Tensor]:
        """This process's rows of each mini-batch, epoch after epoch.

        The mini-batches partition a permutation of the step's global rows, the same
        whatever the number of processes; process k holds global rows [k·n, (k+1)·n) and
        takes the mini-batch's rows that fall there (any number, maybe none)."""
        cfg, procs = self.config, self.trainer.procs
        total = cfg.batch_size
        n = total // procs.count
        lo = procs.index * n
        size = total // cfg.mini_batches
        out = []
        for epoch in range(cfg.epochs):
            (generator,) = row_generators(cfg.seed, step, [epoch], salt=7)
            order = torch.randperm(total, generator=generator)
            for k in range(cfg.mini_batches):
                index = order[k * size : (k + 1) * size]
                if procs.many:
                    index = index[(index >= lo) & (index < lo + n)] - lo
                out.append(index.to(device))
        return out

    def optimize(self, rollout: Rollout, step: int) -> dict[str, float]:
        """4. ``epochs`` shuffled passes of ``mini_batches`` optimizer steps over a rollout.

        A mini-batch is cut into micro-batches of at most ``batch_size / grad_accum`` rows, each
        weighted by its tokens' share of the mini-batch's tokens on every process, so the
        summed gradient is the whole mini-batch's; metrics are means over the updates."""
        cfg, trainer, procs = self.config, self.trainer, self.trainer.procs
        micro = min(cfg.batch_size // cfg.mini_batches, max(1, cfg.batch_size // cfg.grad_accum))
        updates = cfg.epochs * cfg.mini_batches
        batches = self.minibatches(step, rollout.tokens.device)
        counts = procs.sum(torch.stack([rollout.mask[index].sum().double() for index in batches]))

        def loss_fn(part: MicroBatch) -> tuple[torch.Tensor, dict[str, float]]:
            loss, stats = self.losses(rollout.rows(part.rows))
            return loss, {k: float(v) for k, v in stats.items()}

        totals: dict[str, float] = {}
        for index, tokens in zip(batches, counts.tolist(), strict=True):
            parts = [
                MicroBatch(rows, token_share(rollout.mask[rows], tokens))
                for rows in index.split(micro)
                if len(rows)
            ] or [MicroBatch(index.new_zeros(1), 0.0)]  # no rows here: one row, weight 0
            for key, value in trainer.gradient_step(loss_fn, parts).items():
                totals[key] = totals.get(key, 0.0) + value / updates
        return totals

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        rollout = self.rollout(chunks, step)
        t0 = time.perf_counter()
        metrics = {**rollout.metrics, **self.optimize(rollout, step)}
        metrics["update_seconds"] = time.perf_counter() - t0
        for key, value in metrics.items():
            if not math.isfinite(value):
                raise NonFiniteError(key)
        self.kl.update(rollout.metrics["kl"], self.config.batch_size)  # 5. adapt β (exact KL)
        return metrics

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {
            "value_head": {k: v.detach().cpu() for k, v in self.head.state_dict().items()},
            "kl_controller": self.kl.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["value_head"])
        self.kl.load_state_dict(state["kl_controller"])

    def save_value_head(self, folder: str | Path) -> Path:
        """Write the head's weights to ``<folder>/value_head.safetensors`` (atomically)."""
        path = Path(folder) / "value_head.safetensors"
        state = {k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}
        with atomic_path(path) as tmp:
            save_file(state, str(tmp))
        return path


def train(trainer: Trainer, config: Config) -> tuple[PPO, dict[str, float]]:
    """Run PPO to ``config.steps`` (resuming when a checkpoint exists); save the value head."""
    algorithm = PPO(trainer, config)
    last = trainer.run(algorithm, "ppo")
    if trainer.procs.is_main:
        algorithm.save_value_head(config.out)
    trainer.procs.barrier()
    return algorithm, last


def run(config: Config) -> int:
    trainer = Trainer(config)
    _, last = train(trainer, config)
    trainer.say(
        summary("ppo", trainer.steps_done, last)
        + f"\npolicy saved to {config.out}/policy, "
        + f"value head to {config.out}/value_head.safetensors"
    )
    return 0

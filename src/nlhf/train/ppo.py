"""``nlhf train ppo``: RLHF with PPO against a scalar reward and a KL penalty to the reference.

    nlhf train ppo                                   # SmolLM2 + LoRA, IMDB prompts, VADER score
    nlhf train ppo --judge runs/rm/model steps=300 init_kl_coef=0.1
    nlhf train ppo adaptive_kl=false init_kl_coef=0.02 whiten_rewards=true

The classic sentiment pipeline (Ziegler et al. 2019; trlX ``ppo_sentiments``).  Each step:

1. rollout: one completion y ~ π per prompt, from the KV-cached sampler, which also records
   log π and log μ of every sampled token (μ: the reference, i.e. the adapter switched off
   under LoRA), so no separate reference forward is run;
2. reward: the judge's scalar score s(x, y) (a reward model, VADER or a Python function: a
   :class:`~nlhf.models.judges.ScoreJudge`; the judge's ``scale`` only matters for pairwise
   probabilities and plays no part here); per token r_t = −β·(log π − log μ), plus s at the
   last token (:func:`nlhf.losses.kl_penalized_rewards`), optionally whitened;
3. one no-gradient forward of policy + value head gives the rollout's log-probs and values
   V(x, y_<t); GAE(γ, λ) gives advantages (whitened over the rollout) and returns;
4. ``ppo_epochs`` passes over the rollout, each in ``mini_batches`` shuffled mini-batches:
   clipped policy loss + ``vf_coef`` × clipped value loss, one optimizer step per
   mini-batch (``trainer.clip_and_step``; the gradient norm is clipped jointly over the
   policy's trainable weights and the value head);
5. the KL coefficient β is adapted towards ``target_kl`` (:mod:`nlhf.train.kl_control`).

The value head (:mod:`nlhf.train.value_head`) is a linear layer on the policy's final hidden
states and shares its trunk (``value_trunk=shared``: the value loss also trains the LoRA
adapter, or every weight without LoRA, as in trlX and TRL); ``value_trunk=detached`` trains
the head alone on stopped-gradient features.  The head is optimized by the trainer's
optimizer with the policy, saved in every checkpoint (weights and optimizer moments) and at
the end as ``<out>/value_head.safetensors``.  When a mini-batch does not fit in memory,
``grad_accum`` splits it into micro-batches whose losses are weighted by their token counts,
so the gradient equals that of the whole mini-batch.

Parameters and their names in TRL's PPOConfig (v0.11 names; newer TRL in brackets) and trlX:
``ppo_epochs`` = ppo_epochs [num_ppo_epochs], trlX ppo_epochs; ``mini_batches`` = batch_size /
mini_batch_size [num_mini_batches]; ``cliprange`` = cliprange, ``cliprange_value`` =
cliprange_value, ``vf_coef`` = vf_coef (all three trlX too); ``init_kl_coef`` = init_kl_coef
[kl_coef], ``adaptive_kl`` = adap_kl_ctrl, ``target_kl`` = target (trlX target),
``kl_horizon`` = horizon (trlX horizon); ``gamma``, ``lam`` = gamma, lam;
``whiten_rewards`` = whiten_rewards; ``batch_size`` = batch_size (trlX: num_rollouts);
``grad_clip`` = max_grad_norm.  The KL estimate in the reward is k1 = log π − log μ (TRL's
kl_penalty="kl" [kl_estimator="k1"]); advantages are always whitened, as in both.

Logged metrics (metrics.jsonl, TensorBoard), one line per step:

- of the rollout: ``reward``, ``reward_std`` (the judge's scores); ``kl`` (mean Σ_t log π/μ
  per completion from the sampler's log-probs, a sample estimate of KL(π‖μ)); ``kl_coef``
  (the β of this rollout's rewards, before adapting); ``non_score_reward`` (mean
  Σ_t −β·log π/μ); ``returns`` and ``value_mean`` (mean per-token return and value);
  ``explained_variance`` (1 − Var[R − V]/Var[R], 0 when the returns are constant);
  ``length`` (completion tokens, EOS included);
- averaged over the step's mini-batch updates: ``loss``, ``policy_loss``, ``value_loss``,
  ``clip_fraction`` (tokens whose ratio was clipped), ``value_clip_fraction`` (tokens whose
  value moved more than ``cliprange_value``), ``approx_kl`` (per-token k3 estimate of the KL
  between the rollout policy and the updated one), ``entropy`` (per-token entropy of π),
  ``grad_norm`` (before clipping);
- timings: ``sample_seconds``, ``judge_seconds``, ``rollout_seconds`` (values forward and
  GAE), ``update_seconds``; from the trainer: ``lr``, ``step_seconds``.

The probability ratio uses temperature-1 log-probs of π, so ``temperature`` ≠ 1 makes the
rollout slightly off-policy (keep 1, the default, for textbook PPO).
With ``on_nonfinite=skip`` a NaN/inf skips the rest of that step's update (mini-batch steps
already taken stay).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from nlhf.config import option
from nlhf.files import atomic_path
from nlhf.losses import (
    gae,
    kl_penalized_rewards,
    masked_mean,
    ppo_policy_loss,
    ppo_value_loss,
)
from nlhf.train import distributed
from nlhf.train.kl_control import KLController
from nlhf.train.online import (
    NonFiniteError,
    OnlineConfig,
    PromptBatch,
    Trainer,
    build_optimizer,
    decode,
    lr_factor,
    row_generators,
    summary,
)
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
        "learning rate (PPO takes ppo_epochs × mini_batches steps per rollout; on SmolLM2 + "
        "LoRA 1e-3 blew up within one rollout, 1e-4 gave approx_kl ≈ 0.2)",
    )
    ppo_epochs: int = option(4, "passes over each rollout batch (TRL ppo_epochs)")
    mini_batches: int = option(
        2, "mini-batches per pass, one optimizer step each (TRL num_mini_batches)"
    )
    cliprange: float = option(0.2, "PPO clip ε of the probability ratio (TRL cliprange)")
    cliprange_value: float = option(
        0.2, "clip of the value update around the rollout's values (TRL cliprange_value)"
    )
    vf_coef: float = option(0.1, "weight of the value loss in the total loss (TRL vf_coef)")
    init_kl_coef: float = option(
        0.05, "initial coefficient β of the per-token KL penalty (TRL init_kl_coef)"
    )
    adaptive_kl: bool = option(
        True, "adapt β towards target_kl (Ziegler et al.); false: β stays fixed (adap_kl_ctrl)"
    )
    target_kl: float = option(6.0, "adaptive β: target sequence KL(π‖μ) in nats (TRL target)")
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

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("ppo_epochs", "mini_batches", "kl_horizon"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.batch_size % self.mini_batches:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be a multiple of "
                f"mini_batches ({self.mini_batches})"
            )
        for name in ("cliprange", "cliprange_value", "target_kl"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for name in ("vf_coef", "init_kl_coef"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be ≥ 0, got {getattr(self, name)}")
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
            self.prompt_ids[index, first:],
            prompt_mask[:, first:],
            self.tokens[index, :width],
            mask[:, :width],
            self.logprobs[index, :width],
            self.values[index, :width],
            self.advantages[index, :width],
            self.returns[index, :width],
            {},
        )


def _pad(tensors: list[torch.Tensor], value: int | float, left: bool) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    out = []
    for t in tensors:
        fill = t.new_full((t.shape[0], width - t.shape[1]), value)
        out.append(torch.cat([fill, t] if left else [t, fill], dim=1))
    return torch.cat(out)


def explained_variance(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    procs: distributed.Processes | None = None,
) -> float:
    """1 − Var[R − V] / Var[R] over the masked-in tokens (of every process when ``procs``
    is given); 0 when the returns are constant."""

    def mean(x: torch.Tensor) -> torch.Tensor:
        return masked_mean(x, mask) if procs is None else distributed.masked_mean(procs, x, mask)

    var_returns = mean((returns - mean(returns)) ** 2)
    if float(var_returns) < 1e-12:
        return 0.0
    residual = returns - values
    var_residual = mean((residual - mean(residual)) ** 2)
    return float(1.0 - var_residual / var_returns)


class PPO:
    """The algorithm: ``update`` = rollout, then the PPO epochs, then adapt β."""

    def __init__(self, trainer: Trainer, config: Config) -> None:
        from nlhf.models.judges import ScoreJudge

        if not isinstance(trainer.judge, ScoreJudge):
            raise TypeError(
                f"PPO needs a scalar reward, but the judge is a {type(trainer.judge).__name__}: "
                "use a reward model folder (nlhf train reward-model), vader, or a "
                "FunctionJudge (any ScoreJudge); for a pairwise preference model use "
                "nlhf train nash-md"
            )
        self.trainer, self.config = trainer, config
        policy = trainer.policy
        self.head = ValueHead(hidden_size(policy.model)).to(policy.device)
        self.kl = KLController(
            config.init_kl_coef, config.target_kl if config.adaptive_kl else None, config.kl_horizon
        )
        # The value head trains with the policy: one optimizer, one schedule, one clip.
        trainer.params = policy.trainable_parameters() + list(self.head.parameters())
        trainer.optimizer = build_optimizer(config, trainer.params)
        trainer.scheduler = torch.optim.lr_scheduler.LambdaLR(
            trainer.optimizer, lr_factor(config, lambda: trainer.elapsed)
        )

    # ------------------------------------------------------------------ rollout
    def forward(self, prompt_ids, prompt_mask, tokens, mask) -> PolicyValueOutput:
        """Log-probs, values and entropy of the completions under π and the value head."""
        return logprobs_and_values(
            self.trainer.policy.model,
            self.head,
            prompt_ids,
            prompt_mask,
            tokens,
            mask,
            detach_trunk=self.config.value_trunk == "detached",
        )

    @torch.no_grad()
    def rollout(self, chunks: list[PromptBatch], step: int) -> Rollout:
        """Sample, score and evaluate every chunk; rewards, GAE advantages and returns.

        With several processes the rollout holds this process's rows; the whitening and the
        metrics use the statistics of every process's rows."""
        from nlhf.models import sample

        cfg, policy, procs = self.config, self.trainer.policy, self.trainer.procs
        parts: dict[str, list[torch.Tensor]] = {}
        timings = {"sample_seconds": 0.0, "judge_seconds": 0.0, "rollout_seconds": 0.0}
        for batch in chunks:
            t0 = time.perf_counter()
            y = sample(
                policy,
                batch.ids,
                batch.mask,
                cfg.max_new_tokens,
                reference=policy.reference,
                temperature=cfg.temperature,
                generator=row_generators(cfg.seed, step, batch.rows),
            )
            t1 = time.perf_counter()
            texts = decode(policy.tokenizer, y.tokens, y.mask)
            scores = torch.as_tensor(self.trainer.judge.scores(batch.texts, texts))
            if scores.shape != (len(texts),):
                raise ValueError(
                    f"{type(self.trainer.judge).__name__}.scores returned shape "
                    f"{tuple(scores.shape)} for {len(texts)} completions (one score each)"
                )
            t2 = time.perf_counter()
            out = self.forward(batch.ids, batch.mask, y.tokens, y.mask)
            timings["sample_seconds"] += t1 - t0
            timings["judge_seconds"] += t2 - t1
            timings["rollout_seconds"] += time.perf_counter() - t2
            found = {
                "prompt_ids": batch.ids,
                "prompt_mask": batch.mask,
                "tokens": y.tokens,
                "mask": y.mask,
                "sample_logprobs": y.policy_logprobs,
                "ref_logprobs": y.ref_logprobs,
                "logprobs": out.logprobs,
                "values": out.values,
                "scores": scores.float().to(policy.device),
            }
            for key, value in found.items():
                parts.setdefault(key, []).append(value)
        t3 = time.perf_counter()
        pad = policy.pad_token_id
        prompt_ids = _pad(parts["prompt_ids"], pad, left=True)
        prompt_mask = _pad(parts["prompt_mask"], 0, left=True)
        tokens, mask = _pad(parts["tokens"], pad, left=False), _pad(parts["mask"], 0, left=False)
        plp, rlp, old, values = (
            _pad(parts[k], 0.0, left=False)
            for k in ("sample_logprobs", "ref_logprobs", "logprobs", "values")
        )
        scores = torch.cat(parts["scores"])
        keep = mask.bool()
        rewards = kl_penalized_rewards(scores, plp, rlp, keep, self.kl.value)
        kl = (plp - rlp).sum(-1)
        non_score = rewards.sum(-1) - scores
        if cfg.whiten_rewards:
            rewards = distributed.masked_whiten(procs, rewards, keep, shift_mean=False)
        advantages, returns = gae(rewards, values, keep, cfg.gamma, cfg.lam)
        advantages = distributed.masked_whiten(procs, advantages, keep)
        rows = procs.gather(torch.stack([scores, kl, non_score, mask.sum(1).float()], dim=1))
        all_scores = rows[:, 0]
        timings["rollout_seconds"] += time.perf_counter() - t3
        metrics = {
            "reward": float(all_scores.mean()),
            "reward_std": float(all_scores.std()) if len(all_scores) > 1 else 0.0,
            "kl": float(rows[:, 1].mean()),
            "kl_coef": self.kl.value,
            "non_score_reward": float(rows[:, 2].mean()),
            "returns": float(distributed.masked_mean(procs, returns, keep)),
            "value_mean": float(distributed.masked_mean(procs, values, keep)),
            "explained_variance": explained_variance(values, returns, keep, procs),
            "length": float(rows[:, 3].mean()),
            **procs.mean_metrics(timings),
        }
        return Rollout(
            prompt_ids, prompt_mask, tokens, mask, old, values, advantages, returns, metrics
        )

    # ------------------------------------------------------------------ PPO epochs
    def losses(self, batch: Rollout) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Total loss of ``batch`` and its parts (policy, value, clip fractions, entropy)."""
        cfg = self.config
        out = self.forward(batch.prompt_ids, batch.prompt_mask, batch.tokens, batch.mask)
        keep = batch.mask.bool()
        policy_loss, stats = ppo_policy_loss(
            out.logprobs, batch.logprobs, batch.advantages, keep, cfg.cliprange
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
        for epoch in range(cfg.ppo_epochs):
            (generator,) = row_generators(cfg.seed, step, [epoch], salt=7)
            order = torch.randperm(total, generator=generator)
            for k in range(cfg.mini_batches):
                index = order[k * size : (k + 1) * size]
                if procs.many:
                    index = index[(index >= lo) & (index < lo + n)] - lo
                out.append(index.to(device))
        return out

    def optimize(self, rollout: Rollout, step: int) -> dict[str, float]:
        """``ppo_epochs`` shuffled passes of ``mini_batches`` optimizer steps over a rollout.

        Each micro-batch's loss (a token mean) is weighted by its tokens over the mini-batch's
        tokens on every process, so the summed gradient is the whole mini-batch's."""
        cfg, trainer, procs = self.config, self.trainer, self.trainer.procs
        size = cfg.batch_size // cfg.mini_batches
        micro = min(size, max(1, cfg.batch_size // cfg.grad_accum))
        totals: dict[str, float] = {}
        norms = 0.0
        updates = cfg.ppo_epochs * cfg.mini_batches
        batches = self.minibatches(step, rollout.tokens.device)
        counts = torch.stack([rollout.mask[index].sum().double() for index in batches])
        counts = procs.sum(counts).tolist()
        trainer.optimizer.zero_grad(set_to_none=True)
        for index, tokens in zip(batches, counts, strict=True):
            bad = None
            parts = [index[start : start + micro] for start in range(0, len(index), micro)]
            if trainer.config.fsdp:  # every process takes part in each sharded forward
                most = max(procs.objects([len(parts)]))
                parts += [index.new_zeros(0)] * (most - len(parts))
            for rows in parts:
                if not len(rows):  # a process with fewer rows: one row, weight 0
                    loss, _ = self.losses(rollout.rows(rows.new_zeros(1)))
                    trainer.backward(loss * 0.0)
                    continue
                part = rollout.rows(rows)
                weight = float(part.mask.sum()) / tokens
                loss, stats = self.losses(part)
                if bad or not torch.isfinite(loss):
                    bad = "loss"
                    if not trainer.config.fsdp:
                        break
                    trainer.backward(loss * 0.0)  # sharded: no process skips a backward alone
                    continue
                trainer.backward(loss * weight)
                for key, value in {"loss": loss.detach(), **stats}.items():
                    totals[key] = totals.get(key, 0.0) + float(value) * weight / updates
            if procs.agree(bad):
                raise NonFiniteError("loss", step)
            try:
                norms += trainer.clip_and_step() / updates
            except NonFiniteError as exc:
                raise NonFiniteError(exc.quantity, step) from None
        if procs.many:  # a process may hold no rows of some mini-batches: give every key
            names = ("loss", "policy_loss", "value_loss", "clip_fraction", "approx_kl")
            names += ("value_clip_fraction", "entropy")
            totals = procs.sum_metrics({k: totals.get(k, 0.0) for k in names})
        return {**totals, "grad_norm": norms}

    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        rollout = self.rollout(chunks, step)
        t0 = time.perf_counter()
        metrics = {**rollout.metrics, **self.optimize(rollout, step)}
        metrics["update_seconds"] = time.perf_counter() - t0
        for key, value in metrics.items():
            if not torch.isfinite(torch.tensor(value)):
                raise NonFiniteError(key, step)
        self.kl.update(rollout.metrics["kl"], self.config.batch_size)
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
        from safetensors.torch import save_file

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

"""``nlhf train nash-mp``: Nash Mirror Prox (Tiapkin et al. 2025) with policy-gradient prox steps.

    nlhf train nash-mp                                  # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-mp --judge runs/pm/model tau=0.008 eta=2.0 prox_steps=2 steps=150
    nlhf train nash-mp --config configs/nash-mp.yaml

One step is one mirror-prox iteration from the current iterate π_k (θ_k, kept for the step):

1. look-ahead: ``prox_steps`` optimizer steps, each with a fresh rollout against y′ ~ π_k, on
   Nash-MD-PG's surrogate with τ·KL(π‖μ) + (1/η)·KL(π‖π_k) folded into one KL term
   (:func:`nlhf.losses.prox_target`); this gives θ_{k+½};
2. reset the weights *and the optimizer state* to θ_k;
3. update: ``prox_steps`` optimizer steps the same way against y′ ~ π_{k+½}; this is θ_{k+1}.

Opponents are sampled with their weights swapped in (:func:`nlhf.train.weights.swapped_weights`).
The method, its tabular closed form, the parameter names and the metrics: ``docs/trainers.md``.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import option
from nlhf.losses import prox_target
from nlhf.models import sample, sample_pair
from nlhf.models.sampling import row_generators
from nlhf.train.core import Algorithm
from nlhf.train.nash_pg import preference_pg_loss
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report
from nlhf.train.weights import relative_distance, swapped_weights, trainable_weights

PHASES = ("lookahead", "update")


@dataclass
class Config(OnlineConfig):
    """Nash-MP: mirror prox on the τ-regularized preference game, each proximal step
    approximated by policy-gradient steps (a look-ahead step, then the update against it)."""

    out: str = option("runs/nash-mp", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(
        0.05,
        "KL regularization τ towards the reference (the Nash-MP paper's β, the NLHF paper's τ; "
        "0.05 as in nash-md, where the NLHF paper used 0.008)",
    )
    eta: float = option(
        2.0, "mirror-prox step size η: each proximal step adds (1/η)·KL(π‖π_k), π_k = last iterate"
    )
    prox_steps: int = option(
        1, "optimizer steps (each with a fresh rollout) per proximal step, look-ahead and update"
    )

    def check(self) -> None:
        self.at_least(0, "tau")
        if not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        self.at_least(1, "prox_steps")


class NashMP(Algorithm):
    """The algorithm: ``update`` runs one mirror-prox iteration (see the module docstring)."""

    config: Config
    step_rules = ("plain",)  # mirror prox is its own look-ahead

    # ------------------------------------------------------------------ one rollout
    def _rollout(
        self,
        batch: PromptBatch,
        step: int,
        salt: int,
        anchor: dict[str, torch.Tensor],
        opponent: dict[str, torch.Tensor] | None,
        at_anchor: bool,
    ) -> tuple[Any, Any, torch.Tensor]:
        """y ~ π_θ (with log π and log μ), y′ ~ the opponent (None: π_k), and log π_k of y."""
        cfg, policy = self.config, self.trainer.policy
        gens = row_generators(cfg.seed, step, batch.rows, salt)
        args = (policy, batch.ids, batch.mask, cfg.max_new_tokens)
        if at_anchor and opponent is None:  # π_θ = π_k = the opponent: one decode for both
            y, y_opp = sample_pair(
                *args,
                reference=policy.reference,
                beta=0.0,
                temperature=cfg.temperature,
                generator=gens,
            )
            return y, y_opp, y.policy_logprobs
        y = sample(*args, reference=policy.reference, temperature=cfg.temperature, generator=gens)
        opp_gens = row_generators(cfg.seed, step, batch.rows, salt + 1)
        with swapped_weights(policy.model, anchor if opponent is None else opponent):
            y_opp = sample(*args, temperature=cfg.temperature, generator=opp_gens)
        if at_anchor:
            return y, y_opp, y.policy_logprobs
        with torch.no_grad(), swapped_weights(policy.model, anchor):
            anchor_lp = policy.logprobs(batch.ids, batch.mask, y.tokens, y.mask)
        return y, y_opp, anchor_lp

    # ------------------------------------------------------------------ one optimizer step
    def _optimizer_step(
        self,
        chunks: list[PromptBatch],
        step: int,
        salt: int,
        anchor: dict[str, torch.Tensor],
        opponent: dict[str, torch.Tensor] | None,
        at_anchor: bool,
    ) -> dict[str, float]:
        cfg, trainer = self.config, self.trainer

        def loss_fn(batch: PromptBatch) -> tuple[torch.Tensor, dict[str, float]]:
            t0 = time.perf_counter()
            y, y_opp, anchor_lp = self._rollout(batch, step, salt, anchor, opponent, at_anchor)
            sample_seconds = time.perf_counter() - t0
            mixed, total = prox_target(y.ref_logprobs, anchor_lp, cfg.tau, 1.0 / cfg.eta)
            loss, metrics = preference_pg_loss(trainer, batch, y, y_opp, total, mixed)
            metrics["prox_kl"] = float((y.policy_logprobs - anchor_lp).sum(-1).mean())
            metrics["sample_seconds"] = sample_seconds
            return loss, metrics

        return trainer.gradient_step(loss_fn, chunks)

    # ------------------------------------------------------------------ one iteration
    def update(self, chunks: list[PromptBatch], step: int) -> dict[str, float]:
        cfg, trainer = self.config, self.trainer
        model = trainer.policy.model
        anchor = trainable_weights(model)  # θ_k
        optimizer_state = copy.deepcopy(trainer.optimizer.state_dict())
        phase_metrics: dict[str, list[dict[str, float]]] = {p: [] for p in PHASES}
        lookahead: dict[str, torch.Tensor] | None = None
        try:
            for p, phase in enumerate(PHASES):
                if phase == "update":  # 2. back to θ_k, weights and optimizer state
                    lookahead = trainable_weights(model)  # θ_{k+½}
                    self._reset(anchor, optimizer_state)
                # 1. the look-ahead steps against π_k; 3. the update steps against π_{k+½}
                for j in range(cfg.prox_steps):
                    salt = 2 * (p * cfg.prox_steps + j)
                    phase_metrics[phase].append(
                        self._optimizer_step(chunks, step, salt, anchor, lookahead, j == 0)
                    )
        except BaseException:
            self._reset(anchor, optimizer_state)  # a skipped iteration leaves no trace
            raise
        assert lookahead is not None
        return self._summary(phase_metrics, anchor, lookahead)

    def _reset(self, weights: dict[str, torch.Tensor], optimizer_state: dict[str, Any]) -> None:
        params = dict(self.trainer.policy.model.named_parameters())
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value)
        self.trainer.optimizer.load_state_dict(copy.deepcopy(optimizer_state))
        self.trainer.optimizer.zero_grad(set_to_none=True)

    def _summary(
        self,
        phase_metrics: dict[str, list[dict[str, float]]],
        anchor: dict[str, torch.Tensor],
        lookahead: dict[str, torch.Tensor],
    ) -> dict[str, float]:
        def mean(rows: list[dict[str, float]], key: str) -> float:
            return sum(r[key] for r in rows) / len(rows)

        ahead, upd = phase_metrics["lookahead"], phase_metrics["update"]
        both = ahead + upd
        out = {key: mean(upd, key) for key in ("loss", "win_rate", "kl", "kl_sampled", "length")}
        out["opponent_length"] = mean(upd, "opponent_length")
        out["lookahead_loss"] = mean(ahead, "loss")
        out["lookahead_win_rate"] = mean(ahead, "win_rate")
        out["prox_kl"] = mean(both, "prox_kl")
        out["grad_norm"] = mean(both, "grad_norm")
        out["sample_seconds"] = sum(r["sample_seconds"] for r in both)
        out["judge_seconds"] = sum(r["judge_seconds"] for r in both)
        model = self.trainer.policy.model
        with swapped_weights(model, lookahead):
            out["lookahead_distance"] = relative_distance(anchor, model)
        out["step_distance"] = relative_distance(anchor, model)
        return out


def run(config: Config) -> int:
    return train_and_report(config, NashMP, "nash-mp")

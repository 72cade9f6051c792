"""``nlhf train nash-mp``: Nash Mirror Prox (Tiapkin et al. 2025) with policy-gradient prox steps.

    nlhf train nash-mp                                  # SmolLM2 + LoRA, IMDB prompts, VADER judge
    nlhf train nash-mp --judge runs/pm/model tau=0.008 eta=2.0 prox_steps=2 steps=150
    nlhf train nash-mp --config configs/nash-mp.yaml

The method.  Nash-MP ("Accelerating Nash Learning from Human Feedback via Mirror Prox",
Tiapkin, Calandriello, Belomestny, Moulines, Naumov, Rasul, Valko, Ménard, arXiv:2505.19731)
finds the Nash equilibrium of the τ-regularized preference game with mirror prox: from the
current iterate π_k, first an extrapolation (look-ahead) step against π_k, then the real step,
again from π_k, against the look-ahead policy:

    π_{k+½} = argmax_π  P(π ≻ π_k)     − τ·KL(π‖μ) − (1/η)·KL(π‖π_k)
    π_{k+1} = argmax_π  P(π ≻ π_{k+½}) − τ·KL(π‖μ) − (1/η)·KL(π‖π_k)

In the tabular case both have closed forms (:func:`nlhf.tabular.nash_mp`:
π ∝ (π_k μ^{ητ} exp(η·P π_opp))^{1/(1+ητ)}).  The paper also proposes and analyses an
approximate Nash-MP whose proximal steps are estimated with stochastic policy gradients; this
module implements that approximation for a language model:

- each proximal step is ``prox_steps`` optimizer steps on the surrogate of
  :func:`nlhf.losses.nash_md_pg_loss`, each with a fresh rollout: y ~ π_θ, y′ ~ the opponent,
  advantage P(y ≻ y′) − ½, and the two KL terms folded into one (:func:`prox_target`), since
  τ·(log π − log μ) + λ·(log π − log π_k) = (τ+λ)·(log π − (τ·log μ + λ·log π_k)/(τ+λ))
  with λ = 1/η, so the per-token suffix-KL weighting of Nash-MD-PG applies to both;
- π_k is the policy's trainable weights at the start of the step (kept as an fp32 copy for the
  step); the look-ahead starts there and its opponent y′ is sampled from π_k; the look-ahead
  weights θ_{k+½} are then copied aside, the policy's weights *and optimizer state* are reset to
  θ_k, and the update steps run against y′ ~ π_{k+½}; both proximal steps start from the same
  point, as in mirror prox;
- log π_k of y (for the KL to the previous iterate) comes from one no-grad forward with θ_k
  swapped in; on the first optimizer step of each phase π_θ = π_k, so it is the sampler's own
  log-probs and costs nothing (and the first look-ahead rollout draws y and y′ from one decode).

Sampling from θ_k and θ_{k+½} swaps their tensors into the parameters for the decode
(:func:`nlhf.train.nash_ema.swapped_weights`) and restores the policy's own afterwards.
One ``step`` of this trainer is one mirror-prox iteration: 2·``prox_steps`` optimizer steps and
as many rollouts; the learning-rate schedule advances once per iteration.  Nothing besides the
trainer's checkpoint has to survive a resume: at every step boundary the previous iterate π_k
*is* the policy (checkpointed with its optimizer state), and θ_{k+½} lives only inside a step.

What this module could not confirm.  The two proximal steps in the paper's form,
argmin_π (1/β)·P(π_k ≻ π) + KL(π‖μ) + (1/η_paper)·KL(π‖π_k) (and the same against π_{k+½}),
match the mapping below (checked against a published summary of the paper).  Its section on
the practical LLM recipe was not available here; summaries say that recipe stabilizes the
policy-gradient steps with an exponential moving average of the weights, which this module
does not do: π_k is the exact previous iterate.

Parameters and their names elsewhere: ``tau`` is the paper's β and the NLHF paper's τ (TRL's
NashMDConfig calls it ``beta``); ``eta`` is the step size of the tabular :func:`nash_mp`
(the prox term is (1/η)·KL(π‖π_k)), i.e. the paper's η divided by β under the form above;
``prox_steps`` is the number of policy-gradient steps per proximal step.  With
``prox_steps=1`` the KL(π‖π_k) term has no gradient (each phase takes one step from π_k) and
the method is extra-gradient Nash-MD-PG: a self-play step, then the real step against it.

Logged metrics (metrics.jsonl, TensorBoard), means over the update phase unless named:
``loss``; ``win_rate`` = mean P(y ≻ y′) against the look-ahead policy π_{k+½};
``lookahead_win_rate`` and ``lookahead_loss`` (the look-ahead phase, against π_k); ``kl`` =
mean Σ_t log π/μ of y; ``prox_kl`` = mean Σ_t log π/π_k of y (both phases); ``lookahead_distance``
= ‖θ_{k+½} − θ_k‖ / ‖θ_k‖ and ``step_distance`` = ‖θ_{k+1} − θ_k‖ / ‖θ_k‖ over the trainable
weights; ``length``, ``opponent_length``; ``grad_norm`` (mean of all optimizer steps); ``lr``;
``step_seconds``, ``sample_seconds``, ``judge_seconds`` (whole iteration).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from typing import Any

import torch

from nlhf.config import option
from nlhf.train.nash_ema import (
    preference_loss_step,
    relative_distance,
    swapped_weights,
    trainable_weights,
)
from nlhf.train.online import (
    NonFiniteError,
    OnlineConfig,
    PromptBatch,
    Trainer,
    row_generators,
    train_and_report,
)

PHASES = ("lookahead", "update")


def prox_target(
    ref_logprobs: torch.Tensor, anchor_logprobs: torch.Tensor, tau: float, lam: float
) -> tuple[torch.Tensor, float]:
    """Fold τ·KL(π‖μ) + λ·KL(π‖π_k) into one KL term for :func:`nash_md_pg_loss`.

    Returns (target log-probs, coefficient): per token, τ·(log π − log μ) + λ·(log π − log π_k)
    = (τ+λ)·(log π − target) with target = (τ·log μ + λ·log π_k)/(τ+λ).
    """
    total = tau + lam
    return (tau * ref_logprobs + lam * anchor_logprobs) / total, total


@dataclass
class Config(OnlineConfig):
    """Nash-MP: mirror prox on the τ-regularized preference game, each proximal step
    approximated by policy-gradient steps (a look-ahead step, then the update against it)."""

    out: str = option("runs/nash-mp", "output folder: metrics.jsonl, checkpoints/, policy/")
    tau: float = option(0.05, "KL regularization τ towards the reference (the paper's β)")
    eta: float = option(
        2.0, "mirror-prox step size η: each proximal step adds (1/η)·KL(π‖π_k), π_k = last iterate"
    )
    prox_steps: int = option(
        1, "optimizer steps (each with a fresh rollout) per proximal step, look-ahead and update"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.tau < 0:
            raise ValueError(f"tau must be ≥ 0, got {self.tau}")
        if not self.eta > 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        if self.prox_steps < 1:
            raise ValueError(f"prox_steps must be ≥ 1, got {self.prox_steps}")


class NashMP:
    """The algorithm: ``update`` runs one mirror-prox iteration (see the module docstring)."""

    def __init__(self, trainer: Trainer, config: Config) -> None:
        self.trainer = trainer
        self.config = config

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
        from nlhf.models import sample, sample_pair

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
        trainer.optimizer.zero_grad(set_to_none=True)

        def loss_fn(batch: PromptBatch) -> tuple[torch.Tensor, dict[str, float]]:
            t0 = time.perf_counter()
            y, y_opp, anchor_lp = self._rollout(batch, step, salt, anchor, opponent, at_anchor)
            sample_seconds = time.perf_counter() - t0
            mixed, total = prox_target(y.ref_logprobs, anchor_lp, cfg.tau, 1.0 / cfg.eta)
            loss, metrics = preference_loss_step(trainer, batch, y, y_opp, total, mixed)
            metrics["prox_kl"] = float((y.policy_logprobs - anchor_lp).sum(-1).mean())
            metrics["sample_seconds"] = sample_seconds
            return loss, metrics

        # per-chunk losses and their metrics, gradients accumulated (and summed over the
        # processes by clip_and_step), metrics averaged over every process's chunks
        sums = trainer.accumulate(loss_fn, chunks, step)
        try:
            sums["grad_norm"] = trainer.clip_and_step()
        except NonFiniteError as exc:
            raise NonFiniteError(exc.quantity, step) from None
        return sums

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
                if phase == "update":
                    lookahead = trainable_weights(model)  # θ_{k+½}
                    self._reset(anchor, optimizer_state)
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
        out = {key: mean(upd, key) for key in ("loss", "win_rate", "kl", "length")}
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

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


def run(config: Config) -> int:
    return train_and_report(config, NashMP, "nash-mp")

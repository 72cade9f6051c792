"""The SPO update of the NLHF route: a segment's win rate as a reward, PPO with a critic and GAE.

    algorithm, last = train(Config(update="spo"), every_pair(return_preference))
    algorithm, last = train(Config(update="spo", beta=0.0), model.prob_matrix)  # self-play

Swamy et al. 2024 (SPO) turn win rates into the reward of an ordinary RL learner with a value
function; the Nash-MD objective P(π ≻ π_β) − τ·KL(π‖μ) is carried the same way, so credit
reaches across segments (a Pong point is decided tens of steps after the paddle's hit).  Each
core step (:meth:`ControlSPO.update`):

1. rollout: ``n_envs`` copies play π and ``opponents`` copies play the opponent π_β ∝
   π^(1−β)·μ^β (μ the frozen initial policy; β = 0: none, every copy plays π), ``n_steps``
   steps each; kept as ``last_rollout``;
2. segments (:class:`Streams`): each copy's steps are cut into segments of ``length`` steps, a
   new one at each episode start; a segment still open at a rollout's end goes on in the next;
   one whose episode ends early goes on in its end state (action 0, masked), as labelled ones;
3. rewards (:meth:`ControlSPO.rewards`): each π segment's mean P(σ ≻ σ′) over the opponents'
   segments that ended in the same rollout (β = 0: over π's other segments) minus a baseline
   (``baseline``), at the step the segment ends (none when a time limit cut it), and
   −τ·(log π(a_t | s_t) − log μ(a_t | s_t)) at every step of π;
4. GAE(γ, λ) from the critic over π's streams and PPO's passes (the clipped policy loss −
   ``ent_coef``·entropy + ``vf_coef``·value loss of :class:`~nlhf.control.ppo.ControlPPO`).

Logged besides PPO's metrics: ``win_rate`` (mean P̄ of π's segments), ``kl`` (Σ log π/μ per π
segment), ``segments``, ``segment_return``/``opponent_return`` (true, per segment).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch

from nlhf.control.labelling import episode_truncated, max_steps
from nlhf.control.nash import Config, Continuations, Prefer, advantages_of
from nlhf.control.ppo import ControlPPO
from nlhf.control.rollout import ControlRollout
from nlhf.control.segments import SegmentBatch
from nlhf.control.trainer import build_trainer
from nlhf.losses import leave_one_out_win_rates
from nlhf.models.mixture import mixture_logits
from nlhf.train.core import Trainer

KEPT = ("obs", "actions", "rewards", "logprobs")
"""The per-step tensors a segment keeps (the log-probs of π at the rollout)."""

PreferMatrix = Callable[[SegmentBatch, SegmentBatch], torch.Tensor]
"""prefer(a, b) → [A, B] P(a_i ≻ b_j) for every pair (``SegmentPreferenceModel.prob_matrix``)."""


def every_pair(prefer: Prefer) -> PreferMatrix:
    """The :data:`PreferMatrix` of a pairwise ``prefer`` (e.g. ``nash.return_preference``)."""

    def matrix(a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        rows = torch.arange(len(a)).repeat_interleave(len(b))
        cols = torch.arange(len(b)).repeat(len(a))
        return prefer(a[rows], b[cols]).reshape(len(a), len(b))

    return matrix


class Streams:
    """Each copy's stream of steps, cut into segments of ``length`` steps: one ends after
    ``length`` steps of its episode or with the episode; the open one carries over."""

    def __init__(self, copies: int, length: int) -> None:
        self.length = length
        self.open: list[dict[str, torch.Tensor]] = [{} for _ in range(copies)]

    def cut(self, rollout: ControlRollout) -> tuple[Continuations, torch.Tensor, list[tuple]]:
        """(the segments that end in ``rollout``, their log-probs [B, L] (0 off the mask),
        the (t, copy) of the step each ends at), in the order of copies, then time."""
        steps, copies = rollout.actions.shape
        parts = {
            "obs": rollout.obs, "actions": rollout.actions, "rewards": rollout.rewards,
            "logprobs": rollout.logprobs,
        }  # fmt: skip
        rows: list[dict[str, torch.Tensor]] = []
        ends: list[tuple[int, int]] = []
        for n in range(copies):
            held = self.open[n]
            start = 0
            for t in range(steps):
                done = bool(rollout.dones[t, n])
                size = (len(held["actions"]) if held else 0) + t + 1 - start
                if size < self.length and not done:
                    continue
                row = {k: self._join(held, k, v[start : t + 1, n]) for k, v in parts.items()}
                rows.append(self._pad(row, rollout.final_obs.get((t, n))))
                ends.append((t, n))
                held, start = {}, t + 1
            if held or start < steps:
                self.open[n] = {k: self._join(held, k, v[start:, n]) for k, v in parts.items()}
            else:
                self.open[n] = {}
        if not rows:
            empty = torch.zeros(0, self.length)
            obs = torch.zeros(0, self.length, rollout.obs.shape[-1])
            return Continuations(obs, empty.long(), empty, empty.bool()), empty, ends
        stacked = {k: torch.stack([r[k] for r in rows]) for k in (*KEPT, "mask")}
        segments = Continuations(
            stacked["obs"], stacked["actions"], stacked["rewards"], stacked["mask"]
        )
        return segments, stacked["logprobs"], ends

    @staticmethod
    def _join(held: dict[str, torch.Tensor], key: str, new: torch.Tensor) -> torch.Tensor:
        return torch.cat([held[key], new]) if held else new.clone()

    def _pad(self, row: dict[str, torch.Tensor], final: torch.Tensor | None) -> dict:
        """A segment that its episode ended early goes on in the end state ``final``."""
        size, pad = len(row["actions"]), self.length - len(row["actions"])
        row["mask"] = torch.arange(self.length) < size
        if pad:
            row["obs"] = torch.cat([row["obs"], final.expand(pad, -1)])
            row["actions"] = torch.cat([row["actions"], torch.zeros(pad, dtype=torch.long)])
            row["rewards"] = torch.cat([row["rewards"], torch.zeros(pad)])
            row["logprobs"] = torch.cat([row["logprobs"], torch.zeros(pad)])
        return row

    def state_dict(self) -> list[dict[str, torch.Tensor]]:
        return [{k: v.clone() for k, v in held.items()} for held in self.open]

    def load_state_dict(self, state: list[dict[str, torch.Tensor]]) -> None:
        if len(state) != len(self.open):
            raise ValueError(f"the saved streams have {len(state)} copies, this {len(self.open)}")
        self.open = [{k: v.clone() for k, v in held.items()} for held in state]


def learners_of(rollout: ControlRollout, n: int) -> ControlRollout:
    """The first ``n`` copies of ``rollout`` (π's, the ones trained on)."""
    return ControlRollout(
        obs=rollout.obs[:, :n], actions=rollout.actions[:, :n], logprobs=rollout.logprobs[:, :n],
        values=rollout.values[:, :n], rewards=rollout.rewards[:, :n], dones=rollout.dones[:, :n],
        episodes=rollout.episodes[:, :n], next_obs=rollout.next_obs[:n],
        finished=[e for e in rollout.finished if e.env < n],
        final_obs={k: v for k, v in rollout.final_obs.items() if k[1] < n},
    )  # fmt: skip


class ControlSPO(ControlPPO):
    """``update`` = rollout, segment rewards, GAE, then PPO's passes on π's copies."""

    config: Config  # type: ignore[assignment]

    def __init__(self, trainer: Trainer, config: Config, prefer: PreferMatrix) -> None:
        n_opponents = config.opponents if config.beta > 0 else 0
        super().__init__(trainer, config, copies=config.n_envs + n_opponents)  # type: ignore[arg-type]
        self.reference = copy.deepcopy(self.policy).requires_grad_(False)  # μ
        self.prefer = prefer
        self.learners = config.n_envs
        self.streams = Streams(self.runner.n, config.segment_length())
        self.max_steps = max_steps(self.runner)

    def act(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """π's logits on the learners' copies, the mixture's on the opponents'; the values."""
        logits, values = self.policy.logits(obs), self.policy.value(obs)
        if self.runner.n > self.learners:
            tail = slice(self.learners, None)
            mixed = mixture_logits(logits[tail], self.reference.logits(obs[tail]), self.config.beta)
            logits = torch.cat([logits[: self.learners], mixed])
        return logits, values

    def play(self) -> ControlRollout:
        """1. ``n_steps`` steps of every copy (π or the opponent π_β)."""
        return self.runner.collect(self.act, self.config.n_steps, self.policy.device)

    def win_rates(self, mine: Continuations, theirs: Continuations | None) -> torch.Tensor:
        """[B] mean P(σ ≻ σ′) of each of π's segments over the opponents' (None: over π's
        other segments, the leave-one-out win rate; ½ for a lone segment)."""
        b = len(mine)
        if (theirs is None and b < 2) or (theirs is not None and len(theirs) == 0):
            return torch.full((b,), 0.5)
        device = self.policy.device
        other = mine if theirs is None else theirs
        p = torch.as_tensor(self.prefer(mine.to(device), other.to(device)), dtype=torch.float32)
        if p.shape != (b, len(other)):
            raise ValueError(f"prefer returned shape {tuple(p.shape)} for {b} × {len(other)}")
        p = p.cpu()
        return p.mean(-1) if theirs is not None else leave_one_out_win_rates(p)

    @torch.no_grad()
    def rewards(self, rollout: ControlRollout) -> tuple[torch.Tensor, dict[str, float]]:
        """3. [T, n_envs] rewards of π's steps: −τ·(log π − log μ) at each, plus P̄ minus the
        baseline at the step each segment ends (leave_one_out: the mean P̄ of the rollout's
        other π segments; half: ½).  A segment cut by the game's time limit is not scored
        (its end state would read as a lost game, as its labels are left out)."""
        segments, logprobs, ends = self.streams.cut(rollout)
        cut_short = episode_truncated(rollout, self.max_steps)  # by the time limit: unscored
        scored = torch.tensor([not cut_short.get(end, False) for end in ends], dtype=torch.bool)
        learner = torch.tensor([n < self.learners for _, n in ends], dtype=torch.bool)
        ours = learner & scored
        mine = segments[ours]
        theirs = segments[~learner & scored] if self.runner.n > self.learners else None
        win = self.win_rates(mine, theirs)
        device = self.policy.device
        learners = learners_of(rollout, self.learners)
        ref, _ = self.reference.evaluate(learners.obs.to(device), learners.actions.to(device))
        rewards = -self.config.tau * (learners.logprobs - ref.cpu())
        places = [end for end, keep in zip(ends, ours.tolist(), strict=True) if keep]
        scores = advantages_of(win[None], self.config.baseline)[0] if len(win) else win
        for (t, n), score in zip(places, scores.tolist(), strict=True):
            rewards[t, n] += score
        seg_ref, _ = self.reference.evaluate(mine.obs.to(device), mine.actions.to(device))
        kl = ((logprobs[ours] - seg_ref.cpu()) * mine.mask).sum(-1)
        metrics = {"segments": float(len(mine))}
        if len(mine):
            metrics.update(
                win_rate=float(win.mean()),
                kl=float(kl.mean()),
                segment_return=float(mine.rewards.sum(-1).mean()),
            )
        if theirs is not None and len(theirs):
            metrics["opponent_return"] = float(theirs.rewards.sum(-1).mean())
        return rewards, metrics

    def learning(self, rollout: ControlRollout) -> tuple[ControlRollout, list[Any]]:
        finished = [e for e in rollout.finished if e.env < self.learners]
        return learners_of(rollout, self.learners), finished

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "streams": self.streams.state_dict(),
            "reference": {k: v.clone() for k, v in self.reference.state_dict().items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.streams.load_state_dict(state["streams"])
        self.reference.load_state_dict(state["reference"])


def train(config: Config, prefer: PreferMatrix) -> tuple[ControlSPO, dict[str, float]]:
    """Train to ``config.steps`` (resuming from ``<out>/checkpoints``) against ``prefer``; the
    policy, critic included, is saved to ``<out>/policy``."""
    trainer = build_trainer(config)  # type: ignore[arg-type]
    algorithm = ControlSPO(trainer, config, prefer)
    last = trainer.run(algorithm, "control-spo")
    algorithm.runner.close()
    return algorithm, last

"""Bradley–Terry reward model over segments, and the fit that both segment judges share.

    model = SegmentRewardModel(obs_dim=4, n_actions=2, members=3)
    report = fit(model, batch_a, batch_b, labels, FitConfig())   # labels: 1, 0 or ½ per pair
    report.val_accuracy, report.weight_decay
    reward = model.normalized(ref_obs, ref_actions, std=1.0)     # a copy for the policy
    r = reward.step_rewards(obs, actions)                        # [...] per-step r̂

The model (Christiano et al. 2017) is a per-step r̂(o, a) MLP summed over a segment, so that
P(a ≻ b) = σ(R̂(a) − R̂(b)); the fit reads it through the random-answer term
P = (1 − ε)·σ(logit) + ε/2 (ε = 0.1: a labeller answers at random one time in ten).
:func:`fit` steps: 1. hold out a share (1/e) of the labelled pairs, 2. draw each ensemble
member's bootstrap sample of the rest, 3. train with AdamW on the cross-entropy against the
label (a tie is the soft target ½), 4. after each epoch adapt the weight decay so that the
held-out loss stays between 1.1 and 1.5 times the training loss (Christiano's adaptive L2,
applied as AdamW's decoupled decay), 5. report accuracies on the decided (non-tie) pairs.
``normalized`` shifts and scales each member so that r̂ has mean 0 and std ``std`` over
reference steps (Christiano: std 1; Ibarz et al. 2018 on Atari: 0.05); the fit's
probabilities always use the raw sums.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from nlhf.config import Checked, ConfigError, option
from nlhf.control.segments import SegmentBatch
from nlhf.losses import preference_loss, random_answer_logit


def step_inputs(obs: torch.Tensor, actions: torch.Tensor, n_actions: int) -> torch.Tensor:
    """[..., obs_dim + n_actions]: the observation features and the one-hot action (the
    features alone when ``n_actions`` is 0: a judge that does not see the actions)."""
    if n_actions == 0:
        return obs.to(torch.float32)
    onehot = F.one_hot(actions.long(), n_actions).to(torch.float32)
    return torch.cat([obs.to(torch.float32), onehot], dim=-1)


def mlp(inputs: int, hidden: int, outputs: int) -> nn.Sequential:
    """Two hidden layers with leaky ReLU (Christiano et al.'s MuJoCo reward network)."""
    return nn.Sequential(
        nn.Linear(inputs, hidden),
        nn.LeakyReLU(0.01),
        nn.Linear(hidden, hidden),
        nn.LeakyReLU(0.01),
        nn.Linear(hidden, outputs),
    )


class SegmentRewardModel(nn.Module):
    """``members`` per-step reward MLPs; a segment's return is the sum over its steps."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, members: int = 1):
        super().__init__()
        if members < 1:
            raise ValueError(f"members must be ≥ 1, got {members}")
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, hidden
        self.members = nn.ModuleList(mlp(obs_dim + n_actions, hidden, 1) for _ in range(members))
        self.register_buffer("shift", torch.zeros(members))
        self.register_buffer("scale", torch.ones(members))

    def member_step_rewards(self, m: int, obs: torch.Tensor, actions: torch.Tensor):
        """[...] raw r̂ of member m for each step (leading dims of ``actions``)."""
        return self.members[m](step_inputs(obs, actions, self.n_actions))[..., 0]

    def member_logit(self, m: int, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[B] log-odds of a ≻ b under member m: R̂(a) − R̂(b)."""
        returns = self.member_step_rewards(
            m, torch.cat([a.obs, b.obs]), torch.cat([a.actions, b.actions])
        ).sum(-1)
        return returns[: len(a)] - returns[len(a) :]

    def prob(self, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[B] P(a ≻ b), the mean over members."""
        logits = [self.member_logit(m, a, b) for m in range(len(self.members))]
        return torch.sigmoid(torch.stack(logits)).mean(0)

    def step_rewards(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """[...] the reward for a policy: each member shifted and scaled, then averaged."""
        rewards = [
            (self.member_step_rewards(m, obs, actions) - self.shift[m]) * self.scale[m]
            for m in range(len(self.members))
        ]
        return torch.stack(rewards).mean(0)

    @torch.no_grad()
    def normalized(
        self, obs: torch.Tensor, actions: torch.Tensor, std: float = 1.0
    ) -> SegmentRewardModel:
        """A copy whose members each have mean 0 and std ``std`` over the reference steps."""
        out = copy.deepcopy(self)
        for m in range(len(out.members)):
            raw = out.member_step_rewards(m, obs, actions).flatten()
            out.shift[m] = raw.mean()
            out.scale[m] = std / raw.std().clamp(min=1e-8)
        return out


# --------------------------------------------------------------------------- the shared fit

#: The adapted weight decay stays in this range, so that it cannot run away on data so small or
#: so clean that the held-out loss never comes near the training loss.
DECAY_BOUNDS = (1e-6, 10.0)


@dataclass
class FitConfig(Checked):
    """How a segment reward or preference model is fitted to labelled pairs."""

    epochs: int = option(40, "passes over the training pairs")
    batch_size: int = option(64, "pairs per gradient step")
    lr: float = option(1e-3, "AdamW learning rate")
    holdout: float = option(
        1 / math.e, "share of pairs held out for validation (Christiano et al.: 1/e)"
    )
    noise: float = option(
        0.1, "share ε of random answers in P = (1 − ε)·σ(logit) + ε/2 (Christiano et al.: 0.1)"
    )
    weight_decay: float = option(1e-3, "initial AdamW weight decay; adapted when adapt_l2")
    adapt_l2: bool = option(
        True,
        "after each epoch scale the weight decay by l2_step when held-out loss > 1.5× training "
        "loss and divide by it when < 1.1× (Christiano et al.'s adaptive L2)",
    )
    l2_step: float = option(2.0, "factor of one weight-decay adaptation")
    bootstrap: bool = option(
        True, "each ensemble member trains on its own bootstrap sample of the training pairs"
    )
    seed: int = option(0, "seed of the split, the bootstrap samples and the batch order")

    def check(self) -> None:
        for name, ok, want in (
            ("epochs", self.epochs >= 1, "≥ 1"),
            ("batch_size", self.batch_size >= 1, "≥ 1"),
            ("lr", self.lr > 0, "> 0"),
            ("holdout", 0 <= self.holdout < 1, "in [0, 1)"),
            ("noise", 0 <= self.noise < 1, "in [0, 1)"),
            ("weight_decay", self.weight_decay >= 0, "≥ 0"),
            ("l2_step", self.l2_step > 1, "> 1"),
        ):
            if not ok:
                raise ConfigError(f"{name}={getattr(self, name)}: must be {want}")


@dataclass
class FitResult:
    """What a fit measured; accuracies count decided (non-tie) pairs only."""

    train_accuracy: float
    val_accuracy: float  # NaN without held-out pairs
    train_loss: float
    val_loss: float
    weight_decay: float  # the value at the end of the fit
    n_train: int
    n_val: int


def split(n: int, holdout: float, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
    """(train, val) index tensors of a random split; at least one training pair."""
    order = torch.randperm(n, generator=generator)
    n_val = min(round(n * holdout), n - 1)
    return order[n_val:], order[:n_val]


def _loss(model, m, a, b, labels, noise) -> torch.Tensor:
    return preference_loss(random_answer_logit(model.member_logit(m, a, b), noise), labels)


@torch.no_grad()
def evaluate(model, a, b, labels, noise: float) -> tuple[float, float]:
    """(member-mean loss, accuracy of the ensemble's P on decided pairs) on these pairs."""
    if len(labels) == 0:
        return math.nan, math.nan
    loss = np.mean([float(_loss(model, m, a, b, labels, noise)) for m in range(len(model.members))])
    decided = labels != 0.5
    if not decided.any():
        return float(loss), math.nan
    p = model.prob(a[decided], b[decided])
    return float(loss), float(((p > 0.5) == (labels[decided] > 0.5)).float().mean())


def fit(
    model: nn.Module,
    a: SegmentBatch,
    b: SegmentBatch,
    labels: torch.Tensor | np.ndarray,
    config: FitConfig | None = None,
) -> FitResult:
    """Fit ``model`` (one with ``members``, ``member_logit`` and ``prob``) to P(a_i ≻ b_i) =
    labels_i; labels are 1, 0 or ½, NaN rows must be dropped before.

    A small loop of its own rather than a run of the training core: it is a warm-started refit
    inside one step of a route, whose checkpoint already holds the judge, and it needs
    per-member bootstrap samples and a weight decay adapted between epochs, while a core run
    would bring its own output folder, checkpoints, schedule and metrics log."""
    config = config or FitConfig()
    labels = torch.as_tensor(np.asarray(labels, dtype=np.float32))
    if torch.isnan(labels).any():
        raise ValueError("labels hold NaN (can't tell): drop those pairs before fitting")
    if not (len(a) == len(b) == len(labels) > 0):
        raise ValueError(f"pairs and labels disagree: {len(a)}, {len(b)}, {len(labels)}")
    generator = torch.Generator().manual_seed(config.seed)
    train, val = split(len(labels), config.holdout, generator)  # 1. hold out
    k = len(model.members)
    samples = [  # 2. bootstrap
        train[torch.randint(len(train), (len(train),), generator=generator)]
        if config.bootstrap and k > 1
        else train
        for _ in range(k)
    ]
    decay = config.weight_decay
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=decay)
    for _ in range(config.epochs):
        model.train()
        orders = [s[torch.randperm(len(s), generator=generator)] for s in samples]
        for start in range(0, len(train), config.batch_size):  # 3. train
            loss = sum(
                _loss(model, m, a[rows], b[rows], labels[rows], config.noise)
                for m, rows in enumerate(o[start : start + config.batch_size] for o in orders)
            )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        if config.adapt_l2 and len(val):  # 4. adaptive L2
            model.eval()
            train_loss, _ = evaluate(model, a[train], b[train], labels[train], config.noise)
            val_loss, _ = evaluate(model, a[val], b[val], labels[val], config.noise)
            ratio = val_loss / max(train_loss, 1e-8)
            decay *= config.l2_step if ratio > 1.5 else 1 / config.l2_step if ratio < 1.1 else 1
            decay = min(max(decay, DECAY_BOUNDS[0]), DECAY_BOUNDS[1])
            for group in optimizer.param_groups:
                group["weight_decay"] = decay
    model.eval()
    train_loss, train_acc = evaluate(model, a[train], b[train], labels[train], config.noise)
    val_loss, val_acc = evaluate(model, a[val], b[val], labels[val], config.noise)  # 5. report
    return FitResult(train_acc, val_acc, train_loss, val_loss, decay, len(train), len(val))

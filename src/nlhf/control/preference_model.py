"""Pairwise preference model over segments, P(a ≻ b), antisymmetric by construction.

    model = SegmentPreferenceModel(obs_dim=4, n_actions=2)
    report = fit(model, batch_a, batch_b, labels, FitConfig())   # the reward model's fit
    p = model.prob(batch_a, batch_b)                             # [B] P(a ≻ b)
    p = model.prob_matrix(pool_a, pool_b)                        # [A, B] every pair

The segment-side twin of ``nlhf.models.preference_model``: there a transformer encodes each
response once; here a per-step MLP h_t = φ(o_t, a_t) encodes each step and a segment is read
as a return R = Σ_t wᵀh_t and an embedding e = mean_t h_t.  Then

    P(a ≻ b) = σ( R(a) − R(b) + g(e_a, e_b) − g(e_b, e_a) ),   g an MLP over [e_a, e_b].

The logit is odd under swapping a and b, so P(a ≻ b) + P(b ≻ a) = 1 and P(a ≻ a) = ½ hold for
any weights.  With g = 0 it is the Bradley–Terry reward model (R a sum of per-step rewards);
g lets it express intransitive preferences that no reward can.  g's last layer starts at
zero, so the model starts as a Bradley–Terry model and grows its pairwise part from the data
(as the language model's A = W − Wᵀ starts at 0).  Fitted with the reward model's
:func:`~nlhf.control.reward_model.fit` (held-out share, ties as soft labels, random answers).
"""

from __future__ import annotations

import torch
from torch import nn

from nlhf.control.reward_model import mlp, step_inputs
from nlhf.control.segments import SegmentBatch


class _Member(nn.Module):
    """One preference model: a step encoder, a reward head and the pairwise head g."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int):
        super().__init__()
        self.n_actions = n_actions
        self.encoder = nn.Sequential(
            nn.Linear(obs_dim + n_actions, hidden),
            nn.LeakyReLU(0.01),
            nn.Linear(hidden, hidden),
            nn.LeakyReLU(0.01),
        )
        self.reward_head = nn.Linear(hidden, 1)
        self.pair_head = mlp(2 * hidden, hidden, 1)
        nn.init.zeros_(self.pair_head[-1].weight)
        nn.init.zeros_(self.pair_head[-1].bias)

    def embed(self, batch: SegmentBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(R, e): the segment return [B] and its mean step embedding [B, hidden]."""
        h = self.encoder(step_inputs(batch.obs, batch.actions, self.n_actions))
        return self.reward_head(h)[..., 0].sum(-1), h.mean(-2)

    def logit_matrix(self, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[A, B] log-odds of a_i ≻ b_j for every pair, each segment encoded once."""
        r_a, e_a = self.embed(a)
        r_b, e_b = self.embed(b)
        n, m = len(a), len(b)
        left = torch.cat([e_a[:, None].expand(n, m, -1), e_b[None].expand(n, m, -1)], -1)
        right = torch.cat([e_b[None].expand(n, m, -1), e_a[:, None].expand(n, m, -1)], -1)
        g = self.pair_head(torch.stack([left, right]))[..., 0]
        return (r_a[:, None] - r_b[None]) + (g[0] - g[1])

    def logit(self, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        n = len(a)
        r, e = self.embed(
            SegmentBatch(torch.cat([a.obs, b.obs]), torch.cat([a.actions, b.actions]))
        )
        e_a, e_b = e[:n], e[n:]
        g = self.pair_head(torch.cat([torch.cat([e_a, e_b], -1), torch.cat([e_b, e_a], -1)]))[:, 0]
        return (r[:n] - r[n:]) + (g[:n] - g[n:])


class SegmentPreferenceModel(nn.Module):
    """``members`` antisymmetric pairwise models (one by default); P is their mean."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: int = 64, members: int = 1):
        super().__init__()
        if members < 1:
            raise ValueError(f"members must be ≥ 1, got {members}")
        self.obs_dim, self.n_actions, self.hidden = obs_dim, n_actions, hidden
        self.members = nn.ModuleList(_Member(obs_dim, n_actions, hidden) for _ in range(members))

    def member_logit(self, m: int, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[B] log-odds of a ≻ b under member m, exactly odd under swapping a and b."""
        return self.members[m].logit(a, b)

    def prob(self, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[B] P(a ≻ b), the mean over members."""
        logits = [self.member_logit(m, a, b) for m in range(len(self.members))]
        return torch.sigmoid(torch.stack(logits)).mean(0)

    def prob_matrix(self, a: SegmentBatch, b: SegmentBatch) -> torch.Tensor:
        """[A, B] P(a_i ≻ b_j) of every pair (the mean over members), each segment encoded
        once: what a segment's win rate against a pool of segments reads."""
        logits = [member.logit_matrix(a, b) for member in self.members]
        return torch.sigmoid(torch.stack(logits)).mean(0)

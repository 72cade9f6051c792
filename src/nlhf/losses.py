"""Every training objective as a pure tensor function: no models, no I/O, easy to test.

Shapes: ``B`` sequences, ``T`` completion tokens; ``mask`` is a (B, T) bool tensor that is
True on real completion tokens (EOS included) and False on padding after EOS.  Per-token
log-probs are log π(y_t | x, y_<t) of the *sampled* tokens, in float32.  Every loss returns
a scalar to minimize, averaged over the batch.

    from nlhf.losses import nash_md_pg_loss, dpo_loss, ppo_policy_loss, gae
    loss = nash_md_pg_loss(logprobs, ref_logprobs, mask, preference, tau=0.05)

Conventions for the regularization strengths, which other libraries name differently:
``tau`` is the NLHF paper's KL coefficient τ (TRL's Nash-MD calls it ``beta``); ``beta`` in
DPO/IPO is the inverse temperature of the implicit reward; ``kl_coef`` is PPO's KL penalty;
in the Nash family (SPPO, INPO, online IPO) ``eta`` is the step size, i.e. KL(π‖π_t) weighs
1/η (docs/nash-family.md maps each paper's names onto this).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

# --------------------------------------------------------------------------- masked reductions


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean over the masked-in entries (over all of them when ``dim`` is None)."""
    mask = mask.to(x.dtype)
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def token_share(mask: torch.Tensor, global_tokens: float) -> float:
    """The weight of a chunk's token mean in the token mean of the whole (global) batch: its
    masked-in tokens over ``global_tokens``, so Σ share·mean = masked sum / global count."""
    return float(mask.sum()) / global_tokens


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True) -> torch.Tensor:
    """Normalize to unit variance (and zero mean) over the masked-in entries."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(x.dtype)


def suffix_sum(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """out[:, t] = Σ_{s ≥ t} x[:, s]·mask[:, s]: the total of the remaining suffix."""
    x = x * mask.to(x.dtype)
    return x.flip(-1).cumsum(-1).flip(-1)


# --------------------------------------------------------------------------- KL estimators


def kl_estimate(
    logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str = "k1"
) -> torch.Tensor:
    """Per-token estimators of KL(π‖μ) from samples of π (Schulman's k1, k2, k3).

    With log r = log μ − log π:  k1 = −log r (unbiased, can be negative),
    k2 = ½(log r)² (biased, low variance), k3 = (r − 1) − log r (unbiased, ≥ 0).
    """
    log_ratio = ref_logprobs - logprobs
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio**2
    if kind == "k3":
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}; choose k1, k2 or k3")


def exact_kl(logits: torch.Tensor, ref_logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sequence KL(π‖μ) summed along the completion, exact over the vocabulary (B,).

    ``logits`` and ``ref_logits`` are (B, T, V): position t holds the logits of the
    distribution token t was drawn from, under π and under μ.  Each position contributes
    Σ_v π(v) log(π(v)/μ(v)) (fp32), masked positions nothing.  Taken along samples of π, the
    sum is the sequence KL with the sampling noise of the tokens themselves removed (Tang et
    al. 2024, App. D); its expectation equals that of :func:`kl_estimate`'s k1 summed.
    """
    return masked_sum(position_kl(logits, ref_logits), mask, dim=-1)


def position_kl(logits: torch.Tensor, ref_logits: torch.Tensor) -> torch.Tensor:
    """KL(π(·|y_<t)‖μ(·|y_<t)) at every position (B, T), fp32, differentiable in ``logits``:
    the terms :func:`exact_kl` sums."""
    logp = F.log_softmax(logits.float(), dim=-1)
    logq = F.log_softmax(ref_logits.float(), dim=-1)
    return (logp.exp() * (logp - logq)).sum(-1)


# --------------------------------------------------------------------------- NLHF


def nash_md_pg_loss(
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    preference: torch.Tensor,
    tau: float,
    kl: torch.Tensor | None = None,
) -> torch.Tensor:
    """Nash-MD policy-gradient surrogate (NLHF paper, deep-learning section).

    Its gradient is an unbiased estimate of −∇θ [P(π_θ ≻ π_β) − τ·KL(π_θ‖μ)] with π_β fixed,
    from y ~ π_θ (one per row) and y′ ~ π_β, ``preference`` = P(y ≻ y′ | x) (or a 0/1 sample):

        ∇ ≈ −(P(y ≻ y′) − ½)·Σ_t ∇log π_θ(y_t | ·) + τ·Σ_t ∇log π_θ(y_t | ·)·Σ_{s≥t} k_s,

    with k_s = log π_θ(y_s | ·) − log μ(y_s | ·).  The ½ is a baseline (E ∇log π = 0) and each
    token's score is weighted by the KL of the remaining suffix only, since earlier tokens'
    terms have zero expected correlation with it.  Args as in the module docstring;
    ``logprobs`` carries the gradient, the rest does not.

    With ``kl`` (B, T), the exact per-position KL(π_θ‖μ) of :func:`position_kl` carrying its
    gradient, the KL term is estimated without sampling the tokens it is taken over:

        τ·Σ_t ∇KL_t + τ·Σ_t ∇log π_θ(y_t | ·)·Σ_{s>t} KL_s,

    the first sum pulling every token of the vocabulary towards μ (not only the sampled ones),
    the second the score of the later positions' exact KL.  Same expectation, lower variance.
    """
    mask = mask.bool()
    advantages = preference.detach().to(logprobs.dtype) - 0.5
    if kl is None:
        weights = nash_md_pg_weights(advantages, logprobs, ref_logprobs, mask, tau)
        return -masked_sum(weights * logprobs, mask, dim=-1).mean()
    later = suffix_sum(kl.detach(), mask) - kl.detach() * mask
    weights = (advantages[:, None] - tau * later) * mask
    return (
        tau * masked_sum(kl, mask, dim=-1) - masked_sum(weights * logprobs, mask, dim=-1)
    ).mean()


def nash_md_pg_weights(
    advantages: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    tau: float,
) -> torch.Tensor:
    """The per-token weights of ∇log π(y_t | ·) in :func:`nash_md_pg_loss`: A − τ·Σ_{s≥t} k_s,
    k_s = log π(y_s | ·) − log μ(y_s | ·), zero off the mask; ``advantages`` (B,) is P − ½
    there, or any advantage (a learned baseline's).  Nothing carries a gradient."""
    kl_to_go = suffix_sum(logprobs.detach() - ref_logprobs.detach(), mask)
    return (advantages.detach()[:, None] - tau * kl_to_go) * mask


def prox_target(
    ref_logprobs: torch.Tensor, anchor_logprobs: torch.Tensor, tau: float, lam: float
) -> tuple[torch.Tensor, float]:
    """Fold τ·KL(π‖μ) + λ·KL(π‖π_k) into one KL term for :func:`nash_md_pg_loss`.

    Returns (target log-probs, coefficient): per token, τ·(log π − log μ) + λ·(log π − log π_k)
    = (τ+λ)·(log π − target) with target = (τ·log μ + λ·log π_k)/(τ+λ).
    """
    total = tau + lam
    return (tau * ref_logprobs + lam * anchor_logprobs) / total, total


# --------------------------------------------------------------------------- judges


def bradley_terry_loss(
    chosen_rewards: torch.Tensor,
    rejected_rewards: torch.Tensor,
    margin: torch.Tensor | None = None,
    weight: torch.Tensor | None = None,
) -> torch.Tensor:
    """−log σ(r(y_w) − r(y_l) − margin): the reward model's negative log-likelihood."""
    diff = chosen_rewards - rejected_rewards
    if margin is not None:
        diff = diff - margin
    nll = -F.logsigmoid(diff)
    if weight is not None:
        return (nll * weight).sum() / weight.sum()
    return nll.mean()


def random_answer_logit(logit: torch.Tensor, noise: float) -> torch.Tensor:
    """The log-odds of P = (1 − ε)·σ(logit) + ε/2: a labeler who answers at random with
    probability ε (Christiano et al. 2017 use ε = 0.1), computed in log space; odd in
    ``logit``, the identity at ε = 0."""
    if noise <= 0:
        return logit
    keep = torch.log1p(torch.tensor(-float(noise), dtype=logit.dtype))
    rand = torch.full_like(logit, float(torch.log(torch.tensor(noise / 2, dtype=torch.float64))))
    log_p = torch.logaddexp(keep + F.logsigmoid(logit), rand)
    log_q = torch.logaddexp(keep + F.logsigmoid(-logit), rand)
    return log_p - log_q


def preference_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Binary cross-entropy of P(y ≻ y′) = σ(logit) against a label or soft probability."""
    return F.binary_cross_entropy_with_logits(logits, target.to(logits.dtype))


# --------------------------------------------------------------------------- offline/online pairs


def _implicit_margin(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
) -> torch.Tensor:
    return (chosen_logps - ref_chosen_logps) - (rejected_logps - ref_rejected_logps)


def dpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """DPO: −log σ(β·h), h = log π(y_w)/μ(y_w) − log π(y_l)/μ(y_l) (sequence log-probs)."""
    h = _implicit_margin(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return -F.logsigmoid(beta * h).mean()


def ipo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    beta: float,
) -> torch.Tensor:
    """IPO: (h − 1/(2β))², which regresses the log-ratio margin to a finite target."""
    h = _implicit_margin(chosen_logps, rejected_logps, ref_chosen_logps, ref_rejected_logps)
    return ((h - 1.0 / (2.0 * beta)) ** 2).mean()


def order_pairs(
    seq_logps: torch.Tensor, preference: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split (2B,) values of [a rows; b rows] into (chosen, rejected) by P(a ≻ b).

    Returns (chosen, rejected, p_chosen = max(P, 1 − P), decided = P ≠ ½); a tie keeps a first.
    """
    n = preference.shape[0]
    a_wins = preference >= 0.5
    a, b = seq_logps[:n], seq_logps[n:]
    chosen = torch.where(a_wins, a, b)
    rejected = torch.where(a_wins, b, a)
    p_chosen = torch.where(a_wins, preference, 1.0 - preference)
    return chosen, rejected, p_chosen, preference != 0.5


def online_pair_loss(
    logps: torch.Tensor,
    ref_logps: torch.Tensor,
    preference: torch.Tensor,
    beta: float,
    loss_type: str = "dpo",
    label: str = "hard",
) -> torch.Tensor:
    """The online DPO/IPO loss of B judged pairs.

    ``label=hard``: the pair ordered by P (a tie, P = ½, is left out; all tied: loss 0 with
    the graph kept); ``label=soft``: p = P(y_w ≻ y_l) is the target (DPO: cross-entropy
    against σ(βh); IPO: (h − (p − ½)/β)²).

    ``logps`` (2B,) sequence log π of [a; b] (carries the gradient), ``ref_logps`` (2B,) their
    log μ, ``preference`` (B,) P(a ≻ b).
    """
    if loss_type not in ("dpo", "ipo"):
        raise ValueError(f"loss_type must be dpo or ipo, got {loss_type!r}")
    if label not in ("hard", "soft"):
        raise ValueError(f"label must be hard or soft, got {label!r}")
    preference = preference.to(logps.dtype)
    chosen, rejected, p, decided = order_pairs(logps, preference)
    ref_chosen, ref_rejected, _, _ = order_pairs(ref_logps.to(logps.dtype), preference)
    if label == "soft":
        h = (chosen - ref_chosen) - (rejected - ref_rejected)
        if loss_type == "dpo":
            return preference_loss(beta * h, p)
        return ((h - (p - 0.5) / beta) ** 2).mean()
    if not decided.any():
        return logps.sum() * 0.0  # every pair tied: no information, but keep the graph
    loss_fn = dpo_loss if loss_type == "dpo" else ipo_loss
    return loss_fn(
        chosen[decided], rejected[decided], ref_chosen[decided], ref_rejected[decided], beta
    )


# --------------------------------------------------------------------------- the Nash family
#
# One regression covers most of the general-preference family (docs/nash-family.md): the
# policy's log-ratio against a set of anchors (π_ref, π_t, past iterates; weights λ_j summing
# to 1 make a geometric mixture), pushed towards a target by a distance.  Strengths: ``tau``
# weights KL(π‖π_ref); ``eta`` is the step size, the weight of KL(π‖π_t) being 1/η.


def anchored_logratio(
    logps: torch.Tensor, anchors: list[torch.Tensor], weights: list[float]
) -> torch.Tensor:
    """log π(y) − Σ_j λ_j log π_j(y): the log-ratio against the geometric mixture Π_j π_j^λ_j
    (unnormalized) of the anchors, for sequence log-probs of any shape."""
    if len(anchors) != len(weights) or not anchors:
        raise ValueError(f"{len(anchors)} anchors but {len(weights)} weights")
    return logps - sum(
        w * a.detach().to(logps.dtype) for w, a in zip(weights, anchors, strict=True)
    )


def family_loss(
    margin: torch.Tensor, target: torch.Tensor | float, distance: str = "squared"
) -> torch.Tensor:
    """The family's distance between a log-ratio (margin) and its target, averaged.

    ``squared``: (margin − target)²; ``logistic``: the cross-entropy of σ(margin) against the
    probability ``target`` (1 for a hard label, which gives DPO's −log σ(margin))."""
    if distance == "squared":
        return ((margin - target) ** 2).mean()
    if distance == "logistic":
        return preference_loss(
            margin, torch.as_tensor(target, dtype=margin.dtype).expand_as(margin)
        )
    raise ValueError(f"distance must be squared or logistic, got {distance!r}")


def leave_one_out_win_rates(preferences: torch.Tensor) -> torch.Tensor:
    """P̂(y_i ≻ π) = mean_{j ≠ i} P(y_i ≻ y_j) for each of K samples of one prompt, from the
    (…, K, K) matrix of pairwise preferences; unbiased for P(y_i ≻ π) when the samples are
    independent draws of π (SPPO's pipeline averages σ(s_i − s_j) over all j, itself included)."""
    k = preferences.shape[-1]
    if k < 2:
        raise ValueError("leave-one-out win rates need at least 2 samples")
    eye = torch.eye(k, dtype=torch.bool, device=preferences.device)
    return preferences.masked_fill(eye, 0.0).sum(-1) / (k - 1)


def sppo_loss(
    logps: torch.Tensor, anchor_logps: torch.Tensor, win_rates: torch.Tensor, eta: float
) -> torch.Tensor:
    """SPPO: (log π(y)/π_t(y) − η·(P̂(y ≻ π_t) − ½))² per sample, averaged (Wu et al. 2024);
    the regression form of π_{t+1} ∝ π_t·exp(η·P(y ≻ π_t))."""
    margin = anchored_logratio(logps, [anchor_logps], [1.0])
    return family_loss(margin, eta * (win_rates.detach().to(logps.dtype) - 0.5))


def inpo_loss(
    chosen_logps: torch.Tensor,
    rejected_logps: torch.Tensor,
    ref_chosen: torch.Tensor,
    ref_rejected: torch.Tensor,
    anchor_chosen: torch.Tensor,
    anchor_rejected: torch.Tensor,
    tau: float,
    eta: float,
) -> torch.Tensor:
    """INPO: (h − 1/(2η))² with h the log-ratio margin of (y_w, y_l) against the geometric
    mixture π_ref^{τ/η}·π_t^{1−τ/η} (Zhang et al. 2024); IPO against π_t when τ = 0."""
    if not 0.0 <= tau <= eta:
        raise ValueError(f"INPO needs 0 ≤ tau ≤ eta, got tau={tau}, eta={eta}")
    weights = [tau / eta, 1.0 - tau / eta]
    margin = anchored_logratio(chosen_logps, [ref_chosen, anchor_chosen], weights)
    margin = margin - anchored_logratio(rejected_logps, [ref_rejected, anchor_rejected], weights)
    return family_loss(margin, 1.0 / (2.0 * eta))


def online_ipo_loss(
    logps_a: torch.Tensor,
    logps_b: torch.Tensor,
    ref_a: torch.Tensor,
    ref_b: torch.Tensor,
    target_gap: torch.Tensor,
    tau: float,
) -> torch.Tensor:
    """Online IPO: (log π/π_ref(a) − log π/π_ref(b) − gap/τ)², with gap = P(a ≻ b) − ½
    (Calandriello et al. 2024) or P(a ≻ y″) − P(b ≻ y″) against a third sample (EGPO)."""
    margin = anchored_logratio(logps_a, [ref_a], [1.0]) - anchored_logratio(logps_b, [ref_b], [1.0])
    return family_loss(margin, target_gap.detach().to(logps_a.dtype) / tau)


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Negative log-likelihood per token, averaged over all demonstration tokens."""
    return -masked_mean(logprobs, mask.bool())


# --------------------------------------------------------------------------- PPO


def kl_penalized_rewards(
    scores: torch.Tensor,
    logprobs: torch.Tensor,
    ref_logprobs: torch.Tensor,
    mask: torch.Tensor,
    kl_coef: float,
) -> torch.Tensor:
    """Per-token rewards: −kl_coef·(log π − log μ) at every token, plus the sequence score
    at the last real token (the classic sentiment-PPO reward shaping)."""
    mask = mask.bool()
    rewards = -kl_coef * (logprobs - ref_logprobs) * mask
    last = mask.long().cumsum(-1).argmax(-1)  # index of the last True per row
    has_token = mask.any(-1)
    rewards[has_token, last[has_token]] += scores[has_token].to(rewards.dtype)
    return rewards


def gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    mask: torch.Tensor | None = None,
    gamma: float = 1.0,
    lam: float = 0.95,
    dones: torch.Tensor | None = None,
    next_value: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalized advantage estimation over (B, T) steps, time along the last axis.

    δ_t = r_t + γ·(1 − d_t)·V_{t+1} − V_t,  A_t = δ_t + γλ·(1 − d_t)·A_{t+1}.  Two layouts:
    right-padded token sequences (``mask``: V = 0 after the last real token, and advantages and
    returns are zero where it is False), or streams in which an episode may end at any step
    (``dones[:, t]``: step t ended its episode, so nothing after it is bootstrapped) with
    ``next_value`` (B,) the value of the state after the last step (default 0).
    Returns (advantages, returns = advantages + values).
    """
    mask_f = torch.ones_like(values) if mask is None else mask.to(values.dtype)
    alive = torch.ones_like(values) if dones is None else 1.0 - dones.to(values.dtype)
    values = values * mask_f
    rewards = rewards * mask_f
    advantages = torch.zeros_like(values)
    running = torch.zeros_like(values[:, 0])
    last = torch.zeros_like(running) if next_value is None else next_value.to(values.dtype)
    for t in reversed(range(values.shape[1])):
        after = values[:, t + 1] if t + 1 < values.shape[1] else last
        delta = rewards[:, t] + gamma * alive[:, t] * after - values[:, t]
        running = (delta + gamma * lam * alive[:, t] * running) * mask_f[:, t]
        advantages[:, t] = running
    return advantages, (advantages + values) * mask_f


def explained_variance(
    values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    mean: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = masked_mean,
) -> float:
    """1 − Var[R − V] / Var[R] over the masked-in entries, 0 when the returns are constant;
    ``mean(x, mask)`` is the masked mean to use (one over every process, say)."""
    var_returns = mean((returns - mean(returns, mask)) ** 2, mask)
    if float(var_returns) < 1e-12:
        return 0.0
    residual = returns - values
    var_residual = mean((residual - mean(residual, mask)) ** 2, mask)
    return float(1.0 - var_residual / var_returns)


def ppo_policy_loss(
    logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO's clipped surrogate, token-averaged; also returns the clip fraction and approx. KL."""
    mask = mask.bool()
    ratio = torch.exp(logprobs - old_logprobs)
    unclipped = -advantages * ratio
    clipped = -advantages * torch.clamp(ratio, 1.0 - clip, 1.0 + clip)
    loss = masked_mean(torch.maximum(unclipped, clipped), mask)
    with torch.no_grad():
        stats = {
            "clip_fraction": masked_mean((clipped > unclipped).float(), mask),
            "approx_kl": masked_mean(kl_estimate(logprobs, old_logprobs, "k3"), mask),
        }
    return loss, stats


def ppo_value_loss(
    values: torch.Tensor,
    old_values: torch.Tensor,
    returns: torch.Tensor,
    mask: torch.Tensor,
    clip: float = 0.2,
) -> torch.Tensor:
    """½·max((V − R)², (clip(V, V_old ± clip) − R)²), token-averaged."""
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    loss = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * masked_mean(loss, mask.bool())

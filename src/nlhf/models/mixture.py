"""The geometric mixture of two next-token distributions, the opponent of Nash-MD.

For a policy π and a reference μ, the token-level mixture of Munos et al. (2023) is

    π_β(· | x, y_<n)  ∝  π(· | x, y_<n)^(1−β) · μ(· | x, y_<n)^β ,   0 ≤ β ≤ 1,

so β = 0 is the policy itself and β = 1 the reference.  In log space this is a weighted sum
of log-probabilities followed by one normalization, done here in fp32:

    from nlhf.models.mixture import mixture_logits
    logp_mix = mixture_logits(policy_logits, ref_logits, beta=0.125)   # (..., V), normalized

The inputs may be raw logits or log-probabilities (any per-row normalization constant
cancels); the output is always a normalized log-distribution.
"""

from __future__ import annotations

import torch


def check_beta(beta: float) -> float:
    """Return ``beta`` as a float, or raise if it is not a number in [0, 1]."""
    try:
        value = float(beta)
    except (TypeError, ValueError):
        raise ValueError(f"beta must be a number in [0, 1], got {beta!r}") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"beta must be in [0, 1], got {value}")
    return value


def mixture_logits(
    policy_logits: torch.Tensor, ref_logits: torch.Tensor, beta: float
) -> torch.Tensor:
    """Normalized log-probabilities of π^(1−β) μ^β over the last axis, in fp32.

    ``policy_logits`` and ``ref_logits`` have the same shape (..., V).  β = 0 and β = 1 return
    exactly ``log_softmax`` of one side (the other side is not read, so it may hold -inf or
    anything else); in between, tokens that either side rules out (-inf) stay ruled out.
    """
    beta = check_beta(beta)
    if policy_logits.shape != ref_logits.shape:
        raise ValueError(
            f"policy logits {tuple(policy_logits.shape)} and reference logits "
            f"{tuple(ref_logits.shape)} differ in shape"
        )
    if beta == 0.0:
        return torch.log_softmax(policy_logits.float(), dim=-1)
    if beta == 1.0:
        return torch.log_softmax(ref_logits.float(), dim=-1)
    return mix_logprobs(
        torch.log_softmax(policy_logits.float(), dim=-1),
        torch.log_softmax(ref_logits.float(), dim=-1),
        beta,
    )


def mix_logprobs(policy_logp: torch.Tensor, ref_logp: torch.Tensor, beta: float) -> torch.Tensor:
    """:func:`mixture_logits` for inputs that are already fp32 log-probabilities."""
    if beta == 0.0:
        return policy_logp
    if beta == 1.0:
        return ref_logp
    return torch.log_softmax((1.0 - beta) * policy_logp + beta * ref_logp, dim=-1)

"""Token log-probs through the LM head, a few positions at a time, without keeping the logits.

    from nlhf.models.lm_head import head_kl, head_logprobs, plain_head
    head = plain_head(model)                       # (weight, bias), or None: use the logits
    lp = head_logprobs(hidden, *head, tokens)      # (N,) fp32 log π(token | hidden), with grad
    kl = head_kl(hidden, *head, reference_logits)  # (N,) exact KL(π‖μ) per position, no grad

A training forward that takes log π of the sampled tokens from the full logits keeps the
(positions, vocabulary) logits for its backward pass, which builds their softmax and their
gradient at the same size: 100 MB each for 512 positions of SmolLM2's 49,152-token vocabulary
in float32, at the start of the backward pass, near a step's memory peak.
:class:`HeadLogprobs` computes the logits of :data:`CHUNK_ELEMENTS`
worth of positions at a time, keeps only each position's log-sum-exp, and in the backward
pass computes each chunk's logits again (one more matrix product of the head) to form its
gradient (the idea of Liger Kernel's fused linear cross-entropy).  Only the final hidden
states, the head's weight and one number per position stay between the passes.

:func:`plain_head` says when the model's logits are exactly ``linear(hidden, weight, bias)``
of its last hidden states: the families this is tested on (Llama, GPT-2), unsharded, with a
head no adapter wraps.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from nlhf.losses import position_kl
from nlhf.models.activations import plain_linear
from nlhf.models.lm import AdapterDisabled, hf_model, is_sharded

PLAIN_HEAD_TYPES = ("llama", "gpt2")
"""``config.model_type`` of the families whose logits are the head's linear map, unscaled."""

CHUNK_ELEMENTS = 1 << 22
"""Logits computed at once: positions per chunk × vocabulary (16 MB in float32)."""


def plain_head(model: Any) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The head's (weight, bias) when ``model``'s logits are ``linear(last hidden, weight,
    bias)`` and its body can be called alone; None otherwise (then use its logits)."""
    if isinstance(model, AdapterDisabled) or is_sharded(model):
        return None  # the view switches its adapter off around whole calls; FSDP shards
    base = hf_model(model)
    head = base.get_output_embeddings()
    if getattr(base.config, "model_type", None) not in PLAIN_HEAD_TYPES or not plain_linear(head):
        return None
    return head.weight, head.bias


def head_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, tokens: torch.Tensor
) -> torch.Tensor:
    """log softmax(linear(hidden, weight, bias))[token] (N,) in float32 for hidden (N, d) and
    tokens (N,), differentiable in hidden, weight and bias; see :class:`HeadLogprobs`."""
    return HeadLogprobs.apply(hidden, weight, bias, tokens, _rows(weight))


@torch.no_grad()
def head_kl(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    reference_logits: torch.Tensor,
) -> torch.Tensor:
    """KL(π‖μ) at each position (N,), fp32, no gradient: π's logits ``linear(hidden, weight,
    bias)`` formed a chunk at a time against μ's ``reference_logits`` (N, V)."""
    chunk = _rows(weight)
    out = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
    for start in range(0, hidden.shape[0], chunk):
        part = slice(start, start + chunk)
        logits = F.linear(hidden[part], weight, bias)
        out[part] = position_kl(logits, reference_logits[part].to(logits.device))
    return out


def _rows(weight: torch.Tensor) -> int:
    """Positions per chunk: :data:`CHUNK_ELEMENTS` logits over the head's vocabulary."""
    return max(1, CHUNK_ELEMENTS // weight.shape[0])


class HeadLogprobs(torch.autograd.Function):
    """:func:`head_logprobs`, ``chunk`` positions at a time in both passes; it saves the
    inputs and each position's log-sum-exp, never the logits."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, chunk):
        lse = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        out = torch.empty_like(lse)
        for start in range(0, hidden.shape[0], chunk):
            part = slice(start, start + chunk)
            logits = F.linear(hidden[part], weight, bias).float()
            lse[part] = torch.logsumexp(logits, dim=-1)
            out[part] = logits.gather(-1, tokens[part, None]).squeeze(-1) - lse[part]
        ctx.save_for_backward(hidden, weight, bias, tokens, lse)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, bias, tokens, lse = ctx.saved_tensors
        want_hidden, want_weight, want_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if want_hidden else None
        # summed over chunks in float32 whatever the weight's dtype, as one product would be
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if want_weight else None
        grad_bias = torch.zeros_like(bias) if want_bias else None
        for start in range(0, hidden.shape[0], ctx.chunk):
            part = slice(start, start + ctx.chunk)
            h, g = hidden[part], grad_out[part].float()
            # d log p(token) / d logits = onehot(token) − softmax(logits)
            grad_logits = F.linear(h, weight, bias).float().sub_(lse[part, None]).exp_()
            grad_logits.mul_(-g[:, None])
            grad_logits.scatter_add_(-1, tokens[part, None], g[:, None])
            grad_logits = grad_logits.to(hidden.dtype)
            if want_hidden:
                grad_hidden[part] = grad_logits @ weight
            if want_weight:
                grad_weight.addmm_(grad_logits.t().float(), h.float())
            if want_bias:
                grad_bias += grad_logits.sum(0)
        if grad_weight is not None:
            grad_weight = grad_weight.to(weight.dtype)
        return grad_hidden, grad_weight, grad_bias, None, None

"""PPO's critic: a scalar head on the policy's final hidden states, and the one forward pass
that gives both the policy's log-probs and the values of a batch of completions.

    from nlhf.train.value_head import ValueHead, logprobs_and_values
    head = ValueHead(hidden_size=576)
    out = logprobs_and_values(policy.model, head, prompt_ids, prompt_mask, tokens, mask)
    out.logprobs, out.values, out.entropy        # each (B, T), fp32, 0 where mask is 0

Positions.  ``values[:, t]`` is V(x, y_<t): the head applied to the last layer's hidden state
at the position whose logits give token t (the last prompt token for t = 0), the state
before y_t is chosen.  Log-probs follow :mod:`nlhf.models.logprobs` (left-padded prompts,
``position_ids = clamp(cumsum(mask) − 1, 0)``, fp32 from the temperature-1 logits).

Trunk.  The head shares the policy's trunk, as in trlX's and TRL's causal LM "with value
head": one forward gives logits and values, and with ``detach_trunk=False`` the value loss
also trains the trunk's trainable weights (the LoRA adapter under LoRA, every weight
otherwise; the frozen base weights stay frozen).  ``detach_trunk=True`` stops that
gradient, so only the head learns from the value loss and the adapter learns only from the
policy loss.  The head is a single linear layer, zero-initialized (V ≡ 0 at the start), in
fp32 whatever the model's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nlhf.models.lm import Caller, as_model, hf_model
from nlhf.models.logprobs import (
    check_left_padded,
    check_right_padded,
    logits_kl,
    position_ids_from_mask,
    shared_prompt_forward,
    shared_prompts,
    token_logprobs,
)
from nlhf.models.policy import Policy


class ValueHead(nn.Module):
    """V(h) = w·h + b on a final hidden state h (fp32, starts at w = 0, b = 0)."""

    def __init__(self, hidden_size: int) -> None:
        super().__init__()
        self.linear = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.linear.weight)
        nn.init.zeros_(self.linear.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.float()).squeeze(-1)


def _causal_lm(model: Any) -> Any:
    """The causal LM of a :class:`Policy`, or ``model`` itself (a peft or HF causal LM)."""
    return as_model(model.model if isinstance(model, Policy) else model, "policy")


def hidden_size(model: Any) -> int:
    """The width of ``model``'s final hidden states (a Policy, peft or HF causal LM)."""
    config = hf_model(_causal_lm(model)).config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "hidden_size", None)
    if not isinstance(size, int):
        raise ValueError(f"{type(config).__name__} has no integer hidden_size for a value head")
    return size


@dataclass
class PolicyValueOutput:
    """Per-token quantities of given completions, (B, T) fp32, 0 where the mask is 0."""

    logprobs: torch.Tensor
    """log π(y_t | x, y_<t); differentiable when gradients are enabled."""
    values: torch.Tensor
    """V(x, y_<t) from the value head; differentiable when gradients are enabled."""
    entropy: torch.Tensor
    """H(π(· | x, y_<t)), computed without gradient (a metric)."""
    kl: torch.Tensor | None = None
    """Exact KL(π‖μ) of each completion (B,) against ``reference_logits``, when given."""


def logprobs_and_values(
    model: Any,
    head: ValueHead,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    detach_trunk: bool = False,
    reference_logits: torch.Tensor | None = None,
) -> PolicyValueOutput:
    """One forward of ``model`` (a Policy, peft or HF causal LM) over prompt + completion;
    with μ's ``reference_logits`` (B, T, V) of the completions, also their exact KL."""
    if completion_ids.shape != completion_mask.shape or completion_ids.ndim != 2:
        raise ValueError(
            f"completion_ids {tuple(completion_ids.shape)} and completion_mask "
            f"{tuple(completion_mask.shape)} must both be (batch, length)"
        )
    if prompt_ids.shape[0] != completion_ids.shape[0]:
        raise ValueError(f"{prompt_ids.shape[0]} prompts but {completion_ids.shape[0]} completions")
    check_left_padded(prompt_mask, "prompt_mask")
    check_right_padded(completion_mask)
    model = _causal_lm(model)
    caller = Caller(model)
    shared = shared_prompts(model, prompt_ids, prompt_mask, completion_ids.shape[0])
    if shared is not None:  # repeated prompts run once
        logits, hidden = shared_prompt_forward(
            caller, *shared, completion_ids, completion_mask, hidden=True
        )
    else:
        steps = completion_ids.shape[1]
        mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
        logits, hidden = caller.forward(
            torch.cat([prompt_ids, completion_ids], dim=1),
            mask,
            position_ids_from_mask(mask),
            logits_to_keep=steps + 1,
            hidden=True,
        )
        logits, hidden = logits[:, :-1], hidden[:, :-1]
    if detach_trunk:
        hidden = hidden.detach()
    keep = completion_mask.bool()
    logprobs = token_logprobs(logits, completion_ids).masked_fill(~keep, 0.0)
    values = head(hidden).masked_fill(~keep, 0.0)
    with torch.no_grad():
        logp = torch.log_softmax(logits.float(), dim=-1)
        entropy = -(logp.exp() * logp).sum(-1).masked_fill(~keep, 0.0)
    del logp
    kl = None if reference_logits is None else logits_kl(logits, reference_logits, keep)
    return PolicyValueOutput(logprobs, values, entropy, kl)

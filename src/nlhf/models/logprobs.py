"""Log-probabilities of given completions under a causal LM, with left-padded prompts.

    from nlhf.models.logprobs import completion_logprobs
    lp = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    lp.shape == completion_ids.shape        # fp32, 0 where completion_mask is 0
    lp.sum(-1)                              # per-sequence log-probability
    kl = completion_kl(policy.model, policy.reference, prompt_ids, prompt_mask,
                       completion_ids, completion_mask)  # (B,) exact KL(π‖μ), no gradient

Conventions shared with the sampler (:mod:`nlhf.models.sampling`):

- prompts are left-padded: each row of ``prompt_mask`` is 0…0 1…1 with at least one 1;
- completions start right after the prompt; ``completion_mask`` marks their real tokens
  (1 up to and including EOS, 0 after), so it must be 1…1 0…0 per row;
- ``position_ids = clamp(cumsum(attention_mask) − 1, min=0)``, so the first real prompt token
  of every row sits at position 0 whatever its padding;
- log-probs are taken in fp32 from the model's unmodified (temperature 1) logits.
"""

from __future__ import annotations

from typing import Any

import torch

from nlhf.losses import exact_kl
from nlhf.models.lm import Caller, as_model


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """``clamp(cumsum(mask) − 1, min=0)`` along the last axis: positions that ignore padding."""
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp_(min=0)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log_softmax(logits)[..., token]`` in fp32 without materializing the log-softmax."""
    logits = logits.float()
    picked = torch.gather(logits, -1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def check_left_padded(mask: torch.Tensor, name: str = "attention_mask") -> None:
    """Raise, naming the first bad row, unless every row is 0…0 1…1 with at least one 1."""
    if mask.ndim != 2:
        raise ValueError(f"{name} must have shape (batch, length), got {tuple(mask.shape)}")
    m = mask.long()
    if m.numel() and not bool(((m == 0) | (m == 1)).all()):
        raise ValueError(f"{name} must contain only 0 and 1")
    bad = (m[:, 1:] < m[:, :-1]).any(dim=1).nonzero()
    if bad.numel():
        raise ValueError(
            f"{name} row {int(bad[0])} is not left-padded (its ones must form one block "
            f"at the right end): {m[int(bad[0])].tolist()}"
        )
    empty = (m.sum(dim=1) == 0).nonzero()
    if empty.numel():
        raise ValueError(f"{name} row {int(empty[0])} is empty (no prompt token)")


def check_right_padded(mask: torch.Tensor, name: str = "completion_mask") -> None:
    """Raise, naming the first bad row, unless every row is 1…1 0…0 (possibly all zeros)."""
    m = mask.long()
    bad = (m[:, 1:] > m[:, :-1]).any(dim=1).nonzero()
    if bad.numel():
        raise ValueError(
            f"{name} row {int(bad[0])} has a 1 after a 0 (tokens after the end of a "
            f"completion): {m[int(bad[0])].tolist()}"
        )


def completion_logprobs(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-token log-probs (kB, T) of ``completion_ids`` after the prompts, 0 where masked.

    ``model`` is a Hugging Face causal LM, a peft model or ``policy.reference`` (for a
    :class:`~nlhf.models.policy.Policy`, call its ``logprobs`` or pass ``policy.model``).
    Gradients flow if they are enabled and the model has trainable parameters.  There may be
    k ≥ 1 completions per prompt (B prompt rows, kB completion rows; completion row j follows
    prompt row j mod B): with k > 1 the prompts run once and their KV cache (with its
    gradient path) serves every copy, which saves their share of the forward and backward.
    """
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    if completion_ids.shape[1] == 0:
        return torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
    logits = completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    lp = token_logprobs(logits, completion_ids)
    return lp.masked_fill(completion_mask == 0, 0.0)


def completion_logits(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The logits (kB, T, V) of the distributions each completion token was drawn from
    (position t: after the prompt and tokens < t), in the model's dtype; arguments and
    gradients as in :func:`completion_logprobs`."""
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    caller = Caller(as_model(model, "model"))
    batch, steps = prompt_ids.shape[0], completion_ids.shape[1]
    copies = completion_ids.shape[0] // batch
    if copies > 1:
        return _shared_prompt_logits(
            caller, prompt_ids, prompt_mask, completion_ids, completion_mask, copies
        )
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    logits = caller(input_ids, mask, position_ids_from_mask(mask), logits_to_keep=steps + 1)
    return logits[:, :-1]


@torch.no_grad()
def completion_kl(
    model: Any,
    reference: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
    rows: int = 8,
) -> torch.Tensor:
    """Exact KL(π‖μ) of each completion (kB,), fp32: Σ over its positions of the KL between
    the model's and the reference's next-token distributions over the whole vocabulary
    (:func:`nlhf.losses.exact_kl`).  No gradient; ``rows`` completions per forward keep the
    two (rows, T, V) logit tensors small.  Arguments as in :func:`completion_logprobs`."""
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    copies = completion_ids.shape[0] // prompt_ids.shape[0]
    prompt_ids, prompt_mask = prompt_ids.repeat(copies, 1), prompt_mask.repeat(copies, 1)
    out = torch.zeros(completion_ids.shape[0], dtype=torch.float32, device=completion_ids.device)
    if completion_ids.shape[1] == 0:
        return out
    for start in range(0, completion_ids.shape[0], rows):
        part = slice(start, start + rows)
        args = (prompt_ids[part], prompt_mask[part], completion_ids[part], completion_mask[part])
        out[part] = exact_kl(
            completion_logits(model, *args),
            completion_logits(reference, *args).to(out.device),
            completion_mask[part].bool(),
        ).to(out.device)
    return out


def _checked(
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None,
) -> torch.Tensor:
    """Raise on shapes or masks that break the module's conventions; the completion mask
    (all ones when None)."""
    if prompt_ids.shape != prompt_mask.shape:
        raise ValueError(
            f"prompt_ids {tuple(prompt_ids.shape)} and prompt_mask "
            f"{tuple(prompt_mask.shape)} differ in shape"
        )
    batch = prompt_ids.shape[0]
    if completion_ids.ndim != 2 or batch == 0 or completion_ids.shape[0] % batch:
        raise ValueError(
            f"completion_ids {tuple(completion_ids.shape)} must be (rows, length) with rows a "
            f"multiple of the prompts' batch size {batch}"
        )
    if completion_mask is None:
        completion_mask = torch.ones_like(completion_ids)
    elif completion_mask.shape != completion_ids.shape:
        raise ValueError(
            f"completion_mask {tuple(completion_mask.shape)} and completion_ids "
            f"{tuple(completion_ids.shape)} differ in shape"
        )
    check_left_padded(prompt_mask, "prompt_mask")
    check_right_padded(completion_mask)
    return completion_mask


def _shared_prompt_logits(
    caller: Caller,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    copies: int,
) -> torch.Tensor:
    """:func:`completion_logits` with ``copies`` completions per prompt: the prompts'
    forward once, its cache repeated for every copy, then the completions' forward."""
    cache = caller.new_cache()  # growing cache: its row selection is differentiable
    prompt_mask = prompt_mask.long()
    first = caller(
        prompt_ids, prompt_mask, position_ids_from_mask(prompt_mask), cache=cache, logits_to_keep=1
    )  # the distribution of each completion's first token
    rows = torch.arange(prompt_ids.shape[0], device=prompt_ids.device).repeat(copies)
    cache.reorder_cache(rows)
    mask = torch.cat([prompt_mask.repeat(copies, 1), completion_mask.long()], dim=1)
    steps = completion_ids.shape[1]
    positions = position_ids_from_mask(mask)[:, -steps:]
    logits = first.index_select(0, rows)
    if steps > 1:
        rest = caller(completion_ids[:, :-1], mask[:, :-1], positions[:, :-1], cache=cache)
        logits = torch.cat([logits, rest], dim=1)
    return logits

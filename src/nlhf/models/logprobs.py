"""Log-probabilities of given completions under a causal LM, with left-padded prompts.

    from nlhf.models.logprobs import completion_logprobs
    lp = completion_logprobs(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    lp.shape == completion_ids.shape        # fp32, 0 where completion_mask is 0
    lp.sum(-1)                              # per-sequence log-probability
    ref_lp, ref_logits = completion_logprobs_and_logits(policy.reference, prompt_ids, ...)
    lp, kl = completion_logprobs_and_kl(policy.model, prompt_ids, ..., ref_logits)
    kl.shape == (B,)          # exact KL(π‖μ) of each completion, from the forward lp took
    completion_kl(policy.model, policy.reference, prompt_ids, ...)   # the same, two forwards

Conventions shared with the sampler (:mod:`nlhf.models.sampling`):

- prompts are left-padded: each row of ``prompt_mask`` is 0…0 1…1 with at least one 1;
- completions start right after the prompt; ``completion_mask`` marks their real tokens
  (1 up to and including EOS, 0 after), so it must be 1…1 0…0 per row;
- ``position_ids = clamp(cumsum(attention_mask) − 1, min=0)``, so the first real prompt token
  of every row sits at position 0 whatever its padding;
- log-probs are taken in fp32 from the model's unmodified (temperature 1) logits.

The exact KL needs both models' whole-vocabulary logits at every position; a trainer's step
already runs both forwards, so it keeps the reference's logits and hands them to the policy's
forward, which takes the KL of its own (detached) logits in chunks of rows.  For a model with
a plain LM head (Llama, GPT-2: :mod:`nlhf.models.lm_head`) the policy's forward stops at the
last hidden states, and its log-probs and KL come from the head a chunk of positions at a
time, so the logits of every position are never held at once.
"""

from __future__ import annotations

from typing import Any

import torch

from nlhf.losses import exact_kl, masked_sum
from nlhf.models.lm import Caller, as_model, drops_cache
from nlhf.models.lm_head import head_kl, head_logprobs, plain_head


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
    prompt row j mod B): with k > 1, or prompt rows that repeat, each distinct prompt runs
    once and its KV cache (with its gradient path) serves every completion that follows it,
    which saves the repeats' share of the forward and backward (:func:`shared_prompt_forward`).
    A model whose head is a plain linear map (:func:`nlhf.models.lm_head.plain_head`) never
    forms the logits of all positions at once: they are taken a chunk at a time.
    """
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    lean = head_states(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    if lean is None:
        return completion_logprobs_and_logits(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask
        )[0]
    return states_logprobs(*lean, completion_ids, completion_mask)


def completion_logprobs_and_logits(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` and the logits (kB, T, V) they came from, from one forward
    (the logits in the model's dtype; (kB, 0, 0) for empty completions, with no forward)."""
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    if completion_ids.shape[1] == 0:
        zeros = torch.zeros(completion_ids.shape, dtype=torch.float32, device=completion_ids.device)
        return zeros, zeros.new_zeros(completion_ids.shape[0], 0, 0)
    logits = completion_logits(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    lp = token_logprobs(logits, completion_ids)
    return lp.masked_fill(completion_mask == 0, 0.0), logits


def completion_logprobs_and_kl(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor | None,
    reference_logits: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`completion_logprobs` (with their gradient) and, from the same forward, each
    completion's exact KL(π‖μ) (kB,) against the reference's ``reference_logits`` (kB, T, V)
    of the same completions: :func:`completion_kl`'s value without its two forwards."""
    completion_mask = _checked(prompt_ids, prompt_mask, completion_ids, completion_mask)
    lean = head_states(model, prompt_ids, prompt_mask, completion_ids, completion_mask)
    if lean is None:
        lp, logits = completion_logprobs_and_logits(
            model, prompt_ids, prompt_mask, completion_ids, completion_mask
        )
        return lp, logits_kl(logits, reference_logits, completion_mask)
    states, head = lean
    if reference_logits.shape[:2] != completion_ids.shape:
        raise ValueError(
            f"reference_logits {tuple(reference_logits.shape)} and completion_ids "
            f"{tuple(completion_ids.shape)} must share (rows, positions)"
        )
    terms = head_kl(states.detach().flatten(0, 1), *head, reference_logits.flatten(0, 1))
    kl = masked_sum(terms.view(completion_ids.shape), completion_mask.bool(), dim=-1)
    return states_logprobs(states, head, completion_ids, completion_mask), kl


def states_logprobs(
    states: torch.Tensor,
    head: tuple[torch.Tensor, torch.Tensor | None],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """Per-token log-probs (kB, T) from the last hidden states (kB, T, d) before each
    completion token and the head's (weight, bias), computed at real tokens only, 0 elsewhere."""
    real = completion_mask.flatten().nonzero().squeeze(-1)
    picked = head_logprobs(
        states.flatten(0, 1).index_select(0, real),
        *head,
        completion_ids.flatten().index_select(0, real),
    )
    out = picked.new_zeros(completion_ids.numel()).index_copy(0, real, picked)
    return out.view(completion_ids.shape)


@torch.no_grad()
def logits_kl(
    logits: torch.Tensor, reference_logits: torch.Tensor, mask: torch.Tensor, rows: int = 8
) -> torch.Tensor:
    """Exact KL(π‖μ) of each row (B,), fp32, no gradient: :func:`nlhf.losses.exact_kl` of
    (B, T, V) logits of π and μ, ``rows`` rows at a time, so its fp32 temporaries stay
    (rows, T, V) whatever the batch."""
    if reference_logits.shape[:2] != logits.shape[:2] or mask.shape != logits.shape[:2]:
        raise ValueError(
            f"logits {tuple(logits.shape)}, reference_logits {tuple(reference_logits.shape)} "
            f"and mask {tuple(mask.shape)} must share (rows, positions)"
        )
    out = torch.zeros(logits.shape[0], dtype=torch.float32, device=logits.device)
    if logits.shape[1] == 0:
        return out
    for start in range(0, logits.shape[0], rows):
        part = slice(start, start + rows)
        out[part] = exact_kl(
            logits[part].detach(),
            reference_logits[part].to(logits.device),
            mask[part].to(logits.device).bool(),
        )
    return out


def head_states(
    model: Any,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor | None]] | None:
    """The last hidden states (kB, T, d) the head turns into :func:`completion_logits`, from
    the model's body alone, and the head's (weight, bias); None for a model without a plain
    head (:func:`nlhf.models.lm_head.plain_head`) or empty completions, which take the
    logits.  Arguments (already checked) and gradients as in :func:`completion_logits`."""
    head = plain_head(as_model(model, "model"))
    if head is None or completion_ids.shape[1] == 0:
        return None
    caller = Caller(model)
    steps = completion_ids.shape[1]
    shared = shared_prompts(model, prompt_ids, prompt_mask, completion_ids.shape[0])
    if shared is not None:
        states, _ = shared_prompt_forward(
            caller, *shared, completion_ids, completion_mask, head=False
        )
        return states, head
    prompt_ids, prompt_mask = per_completion(prompt_ids, prompt_mask, completion_ids.shape[0])
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    states = caller.states(input_ids, mask, position_ids_from_mask(mask), keep=steps + 1)
    return states[:, :-1], head


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
    steps = completion_ids.shape[1]
    shared = shared_prompts(model, prompt_ids, prompt_mask, completion_ids.shape[0])
    if shared is not None:
        return shared_prompt_forward(caller, *shared, completion_ids, completion_mask)[0]
    prompt_ids, prompt_mask = per_completion(prompt_ids, prompt_mask, completion_ids.shape[0])
    input_ids = torch.cat([prompt_ids, completion_ids], dim=1)
    mask = torch.cat([prompt_mask.long(), completion_mask.long()], dim=1)
    logits = caller(input_ids, mask, position_ids_from_mask(mask), logits_to_keep=steps + 1)
    return logits[:, :-1]


def shared_prompts(
    model: Any, prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completions: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
    """The distinct prompts and, for each completion row, the one it follows, when fewer
    distinct prompts than completions would run (k copies per prompt, or repeated prompt
    rows); None when every completion has a prompt of its own, or when ``model`` would drop
    the prompt's cache in the second forward (:func:`~nlhf.models.lm.drops_cache`)."""
    if drops_cache(model):
        return None
    copies = completions // prompt_ids.shape[0]
    ids, mask, inverse = distinct_prompts(prompt_ids, prompt_mask)
    if ids.shape[0] == completions:
        return None
    return ids, mask, inverse.repeat(copies)


def per_completion(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completions: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt rows repeated so that each of ``completions`` rows has its own (completion
    row j follows prompt row j mod B, as in :func:`shared_prompts`)."""
    copies = completions // prompt_ids.shape[0]
    if copies == 1:
        return prompt_ids, prompt_mask
    return prompt_ids.repeat(copies, 1), prompt_mask.repeat(copies, 1)


def distinct_prompts(
    prompt_ids: torch.Tensor, prompt_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, mask) of the distinct prompt rows and each row's index among them; the rows as
    they are, with the identity index, when none repeats."""
    key = torch.cat([prompt_ids, prompt_mask.to(prompt_ids.dtype)], dim=1)
    found, inverse = torch.unique(key, dim=0, return_inverse=True)
    if found.shape[0] == prompt_ids.shape[0]:
        return prompt_ids, prompt_mask, torch.arange(prompt_ids.shape[0], device=key.device)
    width = prompt_ids.shape[1]
    return found[:, :width], found[:, width:].to(prompt_mask.dtype), inverse


def shared_prompt_forward(
    caller: Caller,
    prompt_ids: torch.Tensor,
    prompt_mask: torch.Tensor,
    rows: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
    hidden: bool = False,
    head: bool = True,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logits (and with ``hidden`` the last layer's hidden states) at every completion
    position, for completion row j following prompt row ``rows[j]``: each prompt's forward
    once, its cache (and its gradient path) selected for every completion that follows it,
    then the completions' forward, which saves the repeated prompts' share of the forward and
    the backward.  Without ``head``, the first tensor is the last hidden states instead of
    the logits (:meth:`Caller.states`: the head never runs)."""
    cache = caller.new_cache()  # growing cache: its row selection is differentiable

    def run(ids, mask, positions, keep=0):
        if head:
            return caller.forward(ids, mask, positions, cache, keep, hidden=hidden)
        return caller.states(ids, mask, positions, cache, keep), None

    prompt_mask = prompt_mask.long()
    first, first_hidden = run(
        prompt_ids, prompt_mask, position_ids_from_mask(prompt_mask), 1
    )  # the distribution of each completion's first token
    cache.reorder_cache(rows)
    mask = torch.cat([prompt_mask.index_select(0, rows), completion_mask.long()], dim=1)
    steps = completion_ids.shape[1]
    positions = position_ids_from_mask(mask)[:, -steps:]
    logits = first.index_select(0, rows)
    states = None if first_hidden is None else first_hidden.index_select(0, rows)
    if steps > 1:
        rest, rest_hidden = run(completion_ids[:, :-1], mask[:, :-1], positions[:, :-1])
        logits = torch.cat([logits, rest], dim=1)
        if states is not None:
            states = torch.cat([states, rest_hidden], dim=1)
    return logits, states


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

"""KV-cached batched sampling from a policy π, its reference μ, or their geometric mixture.

    from nlhf.models import sample, sample_pair
    out = sample(policy, prompt_ids, attention_mask, max_new_tokens=32)           # y ~ π
    out = sample(policy, prompt_ids, attention_mask, 32, reference=policy.reference,
                 beta=0.125, generator=torch.Generator().manual_seed(0))          # y ~ π_β
    y, y_mix = sample_pair(policy, prompt_ids, attention_mask, 32,
                           reference=policy.reference, beta=0.125)                # Nash-MD-PG

What is sampled.  Per token, π_β(·|x, y_<n) ∝ π(·|x, y_<n)^(1−β) μ(·|x, y_<n)^β, normalized
in log space (:func:`nlhf.models.mixture.mixture_logits`): β = 0 samples π, β = 1 samples μ.
Temperature, top-k and top-p (:mod:`nlhf.models.warping`) then reshape that distribution and
one token is drawn per row.  Generation stops at ``max_new_tokens`` or once every row has
produced an EOS token; the EOS token belongs to the completion (mask 1), everything after it
is ``pad_token_id`` with mask 0.

What is recorded, for every sampled token, in fp32, 0 where the mask is 0:

- ``policy_logprobs``: log π(y_n | x, y_<n) under the unmodified (temperature 1) policy;
- ``ref_logprobs``: log μ(y_n | x, y_<n) likewise, or None when no reference is given;
- ``sampling_logprobs``: log-prob under the distribution the token was actually drawn from
  (mixture, then temperature / top-k / top-p);
- ``exact_kl``: KL(π‖μ) over the whole vocabulary at the token's position, with a reference.

These equal a fresh full forward pass (:meth:`Policy.logprobs`) on the returned tokens.

How.  One decode loop serves every row: per token, one batched forward of the policy over all
sample rows (``sample_pair``: [y rows ; y′ rows]) and one of the reference over the rows that
need μ, each with a KV cache allocated once, so the cost is linear in the length.  For
Llama-family and GPT-2 models (bare, fully fine-tuned or under LoRA) both forwards run on the
lean path (:mod:`nlhf.models.decode_lean`: the model's weights driven by torch ops, a static
cache, no transformers call per token); any other model goes through transformers
(:mod:`nlhf.models.decode_general`).  On either path a LoRA policy and its adapter-disabled
reference share one forward, each row with its own adapter.  Both paths sample the same tokens.
Each distinct prompt runs once per model (rows that repeat a prompt, or ``num_samples``
copies, share it) and fills the cache of every row that continues it.  The loop
runs in eval mode (restored afterwards) under ``torch.no_grad``.  With a model sharded by
FSDP (``fsdp=true``) every forward is a collective, so the loop stops early only once the
rows of every process have ended.

``policy`` may be a :class:`~nlhf.models.policy.Policy`, a Hugging Face causal LM or a peft
model; ``reference`` may be None, ``policy.reference``, or any causal LM with the same
vocabulary.  ``generator`` may be None (torch's global RNG), a ``torch.Generator``, or one
generator per prompt row: then a row's sample depends only on its own prompt and generator,
not on the rest of the batch or its padding.  Every sampler of the package seeds those with
:func:`row_generators` (seed, step, row, salt), so its text is the same however rows are batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from nlhf.config import ConfigError
from nlhf.models.decode import Forwards, Layout, LeanForwards
from nlhf.models.decode_general import GeneralForwards, can_fuse
from nlhf.models.decode_lean import lean_unsupported
from nlhf.models.lm import (
    AdapterDisabled,
    as_model,
    eval_mode,
    hf_model,
    is_peft_model,
    is_sharded,
    model_device,
)
from nlhf.models.logprobs import check_left_padded
from nlhf.models.mixture import check_beta, mix_logprobs
from nlhf.models.policy import Policy
from nlhf.models.text import eos_token_ids, pad_token_id
from nlhf.models.warping import SamplingSettings, draw_noise, pick, warp

Generators = torch.Generator | Sequence[torch.Generator] | None
DECODERS = ("auto", "lean", "transformers")
"""``auto``: the lean decode path when both models support it, else transformers."""


def row_generators(seed: int, step: int, rows: list[int], salt: int = 0) -> list[torch.Generator]:
    """One generator per sampled row, seeded by (seed, step, row, salt): pass them to
    :func:`sample` and a row's completion depends on none of the others in its batch."""
    return [
        torch.Generator().manual_seed(((seed * 1_000_003 + step) * 65_537 + row) * 31 + salt)
        for row in rows
    ]


@dataclass
class SampleOutput:
    """Completions of one batch of prompts and their per-token log-probs (see module doc)."""

    tokens: torch.Tensor
    """(B, T) token ids; ``pad_token_id`` after EOS."""
    mask: torch.Tensor
    """(B, T) long, 1 for completion tokens (up to and including EOS), 0 after."""
    policy_logprobs: torch.Tensor
    """(B, T) fp32 log π of each token, temperature 1; 0 where masked."""
    ref_logprobs: torch.Tensor | None
    """(B, T) fp32 log μ of each token, temperature 1; 0 where masked; None without reference."""
    sampling_logprobs: torch.Tensor
    """(B, T) fp32 log-prob under the distribution actually sampled; 0 where masked."""
    beta: float
    """The mixture coefficient the tokens were drawn with (0: π, 1: μ)."""
    exact_kl: torch.Tensor | None = None
    """(B, T) fp32 KL(π(·|x, y_<t) ‖ μ(·|x, y_<t)) over the whole vocabulary at every position,
    temperature 1; 0 where masked; None without reference.  Summed along a row, the exact KL
    of the completion (:func:`nlhf.losses.exact_kl`) from the loop's own logits."""

    @property
    def lengths(self) -> torch.Tensor:
        """(B,) number of completion tokens per row (EOS included)."""
        return self.mask.sum(dim=1)

    def with_prompt(
        self, prompt_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(ids, mask) of prompt + completion, ready for a reward model or a loss forward
        (the prompts repeated when there are several completions per prompt)."""
        copies = self.tokens.shape[0] // prompt_ids.shape[0]
        ids = torch.cat([prompt_ids.to(self.tokens.device).repeat(copies, 1), self.tokens], dim=1)
        mask = attention_mask.to(self.mask.device).long().repeat(copies, 1)
        return ids, torch.cat([mask, self.mask], dim=1)


def sample(
    policy: Any,
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int = 32,
    reference: Any = None,
    beta: float = 0.0,
    temperature: float = 1.0,
    generator: Generators = None,
    *,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    fuse: bool | None = None,
    num_samples: int = 1,
    decoder: str = "auto",
) -> SampleOutput:
    """Sample ``num_samples`` completions per prompt from π_β (β = 0: the policy; β = 1: the
    reference).

    With a ``reference``, ``ref_logprobs`` are recorded (also for β = 0); β > 0 requires
    one.  ``eos_token_id`` / ``pad_token_id`` default to the policy's tokenizer, then the
    model's configs.  ``fuse`` (LoRA policy with ``policy.reference`` only): run policy and
    reference rows in one forward; None picks it whenever possible.  ``num_samples`` > 1:
    the output has ``num_samples`` × B rows, row j continuing prompt j mod B, from one decode
    loop that runs each prompt once; a sequence of generators then gives one per output row.
    ``decoder``: ``auto`` (the lean path where supported), ``lean`` (required: an error
    otherwise) or ``transformers``.  See the module doc.
    """
    if int(num_samples) < 1:
        raise ValueError(f"num_samples must be ≥ 1, got {num_samples}")
    outs = _decode(
        policy,
        reference,
        prompt_ids,
        attention_mask,
        max_new_tokens,
        [beta] * int(num_samples),
        [reference is not None] * int(num_samples),
        SamplingSettings(temperature, top_k, top_p),
        generator,
        eos_token_id,
        pad_token_id,
        fuse,
        decoder,
    )
    if len(outs) == 1:
        return outs[0]
    return SampleOutput(
        tokens=torch.cat([o.tokens for o in outs]),
        mask=torch.cat([o.mask for o in outs]),
        policy_logprobs=torch.cat([o.policy_logprobs for o in outs]),
        ref_logprobs=None if reference is None else torch.cat([o.ref_logprobs for o in outs]),
        sampling_logprobs=torch.cat([o.sampling_logprobs for o in outs]),
        beta=beta,
        exact_kl=None if reference is None else torch.cat([o.exact_kl for o in outs]),
    )


def sample_pair(
    policy: Any,
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int = 32,
    reference: Any = None,
    beta: float = 0.125,
    temperature: float = 1.0,
    generator: Generators = None,
    *,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    fuse: bool | None = None,
    policy_ref_logprobs: bool = True,
    decoder: str = "auto",
) -> tuple[SampleOutput, SampleOutput]:
    """y ~ π and y′ ~ π_β for every prompt, from one decode loop: Nash-MD-PG's rollout.

    Both outputs carry policy and reference log-probs (the reference ones of y give the KL
    term).  ``policy_ref_logprobs=False`` drops y's rows from the reference forward and leaves
    ``y.ref_logprobs`` None.  A ``reference`` is required.  Other arguments as in :func:`sample`.
    """
    if reference is None:
        raise ValueError(
            "sample_pair needs a reference model (the mixture and the KL term use it); "
            "pass reference=policy.reference"
        )
    first, second = _decode(
        policy,
        reference,
        prompt_ids,
        attention_mask,
        max_new_tokens,
        [0.0, beta],
        [policy_ref_logprobs, True],
        SamplingSettings(temperature, top_k, top_p),
        generator,
        eos_token_id,
        pad_token_id,
        fuse,
        decoder,
    )
    return first, second


# --------------------------------------------------------------------------- the loop


def _unwrap(model: Any) -> Any:
    """The causal LM of a :class:`Policy`; anything else as it is."""
    return model.model if isinstance(model, Policy) else model


def _check_reference(policy_model: Any, ref_model: Any) -> None:
    if is_peft_model(policy_model) and ref_model is not None:
        base = policy_model.get_base_model()
        if ref_model is base or ref_model is policy_model.base_model:
            raise ValueError(
                "reference is the peft policy's base model, whose layers still apply the "
                "adapter; pass policy.reference (or AdapterDisabled(model)) instead"
            )


def _decode(
    policy: Any,
    reference: Any,
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    betas: list[float],
    want_ref: list[bool],
    settings: SamplingSettings,
    generator: Generators,
    eos_token_id: int | Sequence[int] | None,
    pad_id: int | None,
    fuse: bool | None,
    decoder: str = "auto",
) -> list[SampleOutput]:
    """Sample one group of B rows per entry of ``betas`` in a single KV-cached loop."""
    betas = [check_beta(b) for b in betas]
    if reference is None and any(b > 0.0 for b in betas):
        raise ValueError(
            f"beta={max(betas)} samples the mixture π^(1−β)·μ^β, which needs a reference "
            "model: pass reference=policy.reference (or another causal LM)"
        )
    if int(max_new_tokens) < 1:
        raise ValueError(f"max_new_tokens must be ≥ 1, got {max_new_tokens}")
    if decoder not in DECODERS:
        raise ValueError(f"decoder must be one of {', '.join(DECODERS)}, got {decoder!r}")
    tokenizer = policy.tokenizer if isinstance(policy, Policy) else None
    policy_model = as_model(_unwrap(policy), "policy")
    ref_model = None if reference is None else as_model(_unwrap(reference), "reference")
    _check_reference(policy_model, ref_model)
    eos_ids = (
        eos_token_ids(policy_model, tokenizer)
        if eos_token_id is None
        else [int(e) for e in ([eos_token_id] if isinstance(eos_token_id, int) else eos_token_id)]
    )
    pad = pad_token_id(policy_model, tokenizer) if pad_id is None else int(pad_id)
    _check_prompts(prompt_ids, attention_mask)
    generator = _check_generators(generator, prompt_ids.shape[0], len(betas))

    fused = ref_model is not None and can_fuse(policy_model, ref_model)
    if fuse and not fused:
        raise ValueError(
            "fuse=True needs a LoRA (not DoRA) peft policy and reference=policy.reference"
        )
    fused = fused and fuse is not False
    modules = [
        policy_model if not isinstance(policy_model, AdapterDisabled) else policy_model.peft_model
    ]
    if isinstance(ref_model, nn.Module):
        modules.append(ref_model)
    device = model_device(policy_model)
    prompt_mask = attention_mask.to(device).long()
    _check_positions(policy_model, prompt_mask, int(max_new_tokens))
    layout = Layout(
        prompt_ids=prompt_ids.to(device),
        prompt_mask=prompt_mask,
        groups=len(betas),
        ref_groups=[g for g, beta in enumerate(betas) if beta > 0.0 or want_ref[g]],
        capacity=prompt_ids.shape[1] + int(max_new_tokens),
    )
    with torch.no_grad(), eval_mode(*modules):
        forwards = _forwards(policy_model, ref_model, fused, layout, decoder)
        lockstep = is_sharded(policy_model) or is_sharded(ref_model)
        loop = _Loop(forwards, layout, betas, int(max_new_tokens), lockstep)
        return loop.run(settings, generator, eos_ids, pad)


def _check_prompts(prompt_ids: torch.Tensor, attention_mask: torch.Tensor) -> None:
    if prompt_ids.ndim != 2 or prompt_ids.shape != attention_mask.shape:
        raise ValueError(
            f"prompt_ids {tuple(prompt_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must both be (batch, length)"
        )
    check_left_padded(attention_mask)


def _check_generators(generator: Generators, batch: int, groups: int) -> Generators:
    """``generator`` as a torch.Generator, None, or a list of one per prompt or output row."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    generator = list(generator)
    if len(generator) not in (batch, batch * groups):
        raise ValueError(
            f"{len(generator)} generators given for {batch} prompts (one per prompt, or "
            f"one per output row: {batch * groups})"
        )
    return generator


def _check_positions(model: Any, prompt_mask: torch.Tensor, max_new_tokens: int) -> None:
    limit = getattr(hf_model(model).config, "max_position_embeddings", None)
    longest = int(prompt_mask.sum(dim=1).max()) + max_new_tokens
    if isinstance(limit, int) and longest > limit:
        raise ConfigError(
            f"prompt of {longest - max_new_tokens} tokens + max_new_tokens="
            f"{max_new_tokens} exceeds the model's {limit} positions; truncate the "
            "prompts (from the left) or lower max_new_tokens"
        )


def _forwards(
    policy_model: Any, ref_model: Any, fused: bool, layout: Layout, decoder: str
) -> Forwards:
    """The lean forwards when ``decoder`` allows them and both models are supported, else
    the general ones through transformers."""
    if decoder == "transformers":
        return GeneralForwards(policy_model, ref_model, fused, layout)
    models = [policy_model] + ([ref_model] if ref_model is not None else [])
    reasons = [why for why in map(lean_unsupported, models) if why is not None]
    if not reasons:
        return LeanForwards(policy_model, ref_model, layout, fused)
    if decoder == "lean":
        raise ValueError(f"decoder='lean' cannot run this model: {reasons[0]}")
    return GeneralForwards(policy_model, ref_model, fused, layout)


class _Loop:
    """One decode: draw a token per row per step, record it and its log-probs, feed it back."""

    def __init__(
        self,
        forwards: Forwards,
        layout: Layout,
        betas: list[float],
        max_new_tokens: int,
        lockstep: bool,
    ) -> None:
        self.forwards, self.layout, self.betas = forwards, layout, betas
        self.max_new_tokens, self.lockstep = max_new_tokens, lockstep
        self.device = layout.prompt_ids.device
        self.ref_slot = {g: k for k, g in enumerate(layout.ref_groups)}
        self.ref_index = layout.ref_index() if layout.ref_groups else None

    def run(
        self,
        settings: SamplingSettings,
        generator: Generators,
        eos_ids: list[int],
        pad: int,
    ) -> list[SampleOutput]:
        pol_logits, ref_logits = self.forwards.prefill()
        record = _Record(self.layout, self.max_new_tokens, pad, self.device)
        eos = torch.tensor(eos_ids, dtype=torch.long, device=self.device)
        for t in range(self.max_new_tokens):
            pol_logp, ref_logp = _log_softmax(pol_logits, ref_logits)
            warped = warp(self._mixture(pol_logp, ref_logp), settings)
            tok = pick(warped, self._noise(generator, warped.shape[-1]))
            col = record.add(t, tok, pol_logp, ref_logp, warped, self.ref_index)
            if eos.numel():
                record.finished |= torch.isin(col.squeeze(1), eos)
            if t == self.max_new_tokens - 1 or self._all_finished(record.finished):
                break
            pol_logits, ref_logits = self.forwards.step(col, t)
        return record.outputs(self.betas, self.ref_slot)

    def _mixture(self, pol_logp: torch.Tensor, ref_logp: torch.Tensor | None) -> torch.Tensor:
        """The distribution each row draws from: π_β of its group's β."""
        if not any(self.betas):  # every row samples the policy itself
            return pol_logp
        B, dists = self.layout.batch, []
        for g, beta in enumerate(self.betas):
            pol_g = pol_logp[g * B : (g + 1) * B]
            if beta == 0.0:
                dists.append(pol_g)
            else:
                k = self.ref_slot[g]
                dists.append(mix_logprobs(pol_g, ref_logp[k * B : (k + 1) * B], beta))
        return dists[0] if len(dists) == 1 else torch.cat(dists, dim=0)

    def _all_finished(self, finished: torch.Tensor) -> bool:
        """Every row has ended; with a sharded model, every process's rows (each forward is
        a collective, so all processes decode the same number of tokens)."""
        done = bool(finished.all())
        if not self.lockstep:
            return done

        flag = torch.tensor([1.0 if done else 0.0], device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item() > 0.0)

    def _noise(self, generator: Generators, vocab: int) -> torch.Tensor:
        rows = self.layout.rows
        if (
            generator is None
            or isinstance(generator, torch.Generator)
            or len(generator) == rows  # one generator per output row
        ):
            return draw_noise((rows, vocab), generator, self.device)
        batch = self.layout.batch
        return torch.cat([draw_noise((batch, vocab), generator, self.device) for _ in self.betas])


def _log_softmax(
    pol_logits: torch.Tensor, ref_logits: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """fp32 log-probabilities of both models' next-token logits."""
    pol_logp = torch.log_softmax(pol_logits.float(), dim=-1)
    if ref_logits is None:
        return pol_logp, None
    if ref_logits.shape[-1] != pol_logp.shape[-1]:
        raise ValueError(
            f"policy and reference vocabularies differ: {pol_logp.shape[-1]} vs "
            f"{ref_logits.shape[-1]} logits"
        )
    return pol_logp, torch.log_softmax(ref_logits.float(), dim=-1)


class _Record:
    """The tokens, masks and log-probs of a decode, preallocated for every step."""

    def __init__(self, layout: Layout, steps: int, pad: int, device: torch.device) -> None:
        rows, ref_rows = layout.rows, layout.ref_rows
        self.batch, self.pad, self.steps = layout.batch, pad, 0
        self.tokens = torch.full((rows, steps), pad, dtype=torch.long, device=device)
        self.mask = torch.zeros((rows, steps), dtype=torch.long, device=device)
        self.pol_lp = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        self.ref_lp = torch.zeros((ref_rows, steps), dtype=torch.float32, device=device)
        self.kl = torch.zeros((ref_rows, steps), dtype=torch.float32, device=device)
        self.samp_lp = torch.zeros((rows, steps), dtype=torch.float32, device=device)
        self.finished = torch.zeros(rows, dtype=torch.bool, device=device)

    def add(
        self,
        t: int,
        tok: torch.Tensor,
        pol_logp: torch.Tensor,
        ref_logp: torch.Tensor | None,
        warped: torch.Tensor,
        ref_index: torch.Tensor | None,
    ) -> torch.Tensor:
        """Record step ``t`` (pad and mask 0 on ended rows); the fed tokens (rows, 1)."""
        finished = self.finished
        tok = tok.masked_fill(finished, self.pad)
        self.mask[:, t] = (~finished).long()
        self.tokens[:, t] = tok
        col = tok.unsqueeze(1)
        self.pol_lp[:, t] = pol_logp.gather(1, col).squeeze(1).masked_fill(finished, 0.0)
        self.samp_lp[:, t] = warped.gather(1, col).squeeze(1).masked_fill(finished, 0.0)
        if ref_logp is not None:
            ref_finished = finished.index_select(0, ref_index)
            ref_lp = ref_logp.gather(1, col.index_select(0, ref_index)).squeeze(1)
            self.ref_lp[:, t] = ref_lp.masked_fill(ref_finished, 0.0)
            pol = pol_logp.index_select(0, ref_index)
            kl = (pol.exp() * (pol - ref_logp)).sum(-1)
            self.kl[:, t] = kl.masked_fill(ref_finished, 0.0)
        self.steps = t + 1
        return col

    def outputs(self, betas: list[float], ref_slot: dict[int, int]) -> list[SampleOutput]:
        """One :class:`SampleOutput` per group, cut to the steps decoded."""
        B, steps, outputs = self.batch, self.steps, []
        for g, beta in enumerate(betas):
            rows = slice(g * B, (g + 1) * B)
            ref_part = kl_part = None
            if g in ref_slot:
                k = ref_slot[g]
                ref_part = self.ref_lp[k * B : (k + 1) * B, :steps].contiguous()
                kl_part = self.kl[k * B : (k + 1) * B, :steps].contiguous()
            outputs.append(
                SampleOutput(
                    tokens=self.tokens[rows, :steps].contiguous(),
                    mask=self.mask[rows, :steps].contiguous(),
                    policy_logprobs=self.pol_lp[rows, :steps].contiguous(),
                    ref_logprobs=ref_part,
                    sampling_logprobs=self.samp_lp[rows, :steps].contiguous(),
                    beta=beta,
                    exact_kl=kl_part,
                )
            )
        return outputs

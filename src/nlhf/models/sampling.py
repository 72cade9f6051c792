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
  (mixture, then temperature / top-k / top-p).

These equal a fresh full forward pass (:meth:`Policy.logprobs`) on the returned tokens.

How.  One decode loop serves every row: per token, one batched forward of the policy over all
sample rows (``sample_pair``: [y rows ; y′ rows]) and one of the reference over the rows that
need μ, both with their own KV cache, so the cost is linear in the length.  When the
reference is the LoRA policy's adapter-disabled view, policy and reference rows share a single
forward (peft's per-row ``adapter_names``) and a single cache.  The prompt is run once per
model and its cache copied to the rows that share it.  The loop runs in eval mode (restored
afterwards) under ``torch.no_grad``.  With a model sharded over processes by FSDP
(``fsdp=true``) every forward is a collective, so the loop stops early only once the rows of
every process have ended.

``policy`` may be a :class:`~nlhf.models.policy.Policy`, a Hugging Face causal LM or a peft
model; ``reference`` may be None, ``policy.reference``, or any causal LM with the same
vocabulary.  ``generator`` may be None (torch's global RNG), a ``torch.Generator``, or one
generator per prompt row: then a row's sample depends only on its own prompt and generator,
not on the rest of the batch or its padding.  Every sampler of the package seeds those with
:func:`row_generators` (seed, step, row, salt), so its text is the same however rows are batched.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from nlhf.config import ConfigError
from nlhf.models.lm import (
    AdapterDisabled,
    Caller,
    as_model,
    hf_model,
    is_peft_model,
    is_sharded,
    model_device,
)
from nlhf.models.logprobs import check_left_padded, position_ids_from_mask
from nlhf.models.mixture import check_beta, mix_logprobs
from nlhf.models.policy import Policy
from nlhf.models.text import eos_token_ids, pad_token_id
from nlhf.models.warping import SamplingSettings, draw_noise, pick, warp

Generators = torch.Generator | Sequence[torch.Generator] | None


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
) -> SampleOutput:
    """Sample ``num_samples`` completions per prompt from π_β (β = 0: the policy; β = 1: the
    reference).

    With a ``reference``, ``ref_logprobs`` are recorded (also for β = 0); β > 0 requires
    one.  ``eos_token_id`` / ``pad_token_id`` default to the policy's tokenizer, then the
    model's configs.  ``fuse`` (LoRA policy with ``policy.reference`` only): run policy and
    reference rows in one forward; None picks it whenever possible.  ``num_samples`` > 1:
    the output has ``num_samples`` × B rows, row j continuing prompt j mod B, from one decode
    loop that runs each prompt once; a sequence of generators then gives one per output row.
    See the module doc.
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
    )
    return first, second


# --------------------------------------------------------------------------- the loop


@contextmanager
def _eval_mode(*modules: nn.Module):
    """Put modules in eval mode for the block, then restore each one's training flag."""
    states = [(m, m.training) for m in modules]
    for module, _ in states:
        module.eval()
    try:
        yield
    finally:
        for module, was_training in states:
            module.train(was_training)


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

    if prompt_ids.ndim != 2 or prompt_ids.shape != attention_mask.shape:
        raise ValueError(
            f"prompt_ids {tuple(prompt_ids.shape)} and attention_mask "
            f"{tuple(attention_mask.shape)} must both be (batch, length)"
        )
    check_left_padded(attention_mask)
    batch = prompt_ids.shape[0]
    if generator is not None and not isinstance(generator, torch.Generator):
        generator = list(generator)
        if len(generator) not in (batch, batch * len(betas)):
            raise ValueError(
                f"{len(generator)} generators given for {batch} prompts (one per prompt, or "
                f"one per output row: {batch * len(betas)})"
            )

    fused = ref_model is not None and _can_fuse(policy_model, ref_model)
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
    with torch.no_grad(), _eval_mode(*modules):
        loop = _Loop(
            policy_model,
            ref_model,
            fused,
            prompt_ids,
            attention_mask,
            betas,
            want_ref,
            max_new_tokens,
        )
        return loop.run(settings, generator, eos_ids, pad)


def _can_fuse(policy_model: Any, ref_model: Any) -> bool:
    """Policy and reference rows can share a forward: plain LoRA (peft's ``adapter_names``
    supports neither DoRA nor other adapter types) with its own adapter-disabled view."""
    if not (isinstance(ref_model, AdapterDisabled) and ref_model.peft_model is policy_model):
        return False
    config = policy_model.peft_config.get(policy_model.active_adapter)
    return str(getattr(config, "peft_type", "")).endswith("LORA") and not getattr(
        config, "use_dora", False
    )


class _Loop:
    """State of one decode: row layout, caches, attention masks, positions."""

    def __init__(
        self,
        policy_model: Any,
        ref_model: Any,
        fused: bool,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        betas: list[float],
        want_ref: list[bool],
        max_new_tokens: int,
    ) -> None:
        self.policy = Caller(policy_model)
        self.ref = None if ref_model is None or fused else Caller(ref_model)
        self.fused = fused
        self.lockstep = is_sharded(policy_model) or is_sharded(ref_model)
        self.device = model_device(policy_model)
        self.prompt_ids = prompt_ids.to(self.device)
        self.prompt_mask = prompt_mask.to(self.device).long()
        self.betas = betas
        self.batch = prompt_ids.shape[0]
        self.max_new_tokens = int(max_new_tokens)
        # Rows: policy forward over every group; reference forward over groups needing μ.
        self.groups = len(betas)
        self.ref_groups = [g for g in range(self.groups) if betas[g] > 0.0 or want_ref[g]]
        self.rows = self.groups * self.batch
        self.ref_rows = len(self.ref_groups) * self.batch
        self._check_positions(policy_model)
        self.cache_length = prompt_ids.shape[1] + self.max_new_tokens
        if fused:
            adapter, self.ref_adapter = policy_model.active_adapter, ref_model.adapter
            self.adapter_names = [adapter] * self.rows + [self.ref_adapter] * self.ref_rows

    def _check_positions(self, model: Any) -> None:
        limit = getattr(hf_model(model).config, "max_position_embeddings", None)
        longest = int(self.prompt_mask.sum(dim=1).max()) + self.max_new_tokens
        if isinstance(limit, int) and longest > limit:
            raise ConfigError(
                f"prompt of {longest - self.max_new_tokens} tokens + max_new_tokens="
                f"{self.max_new_tokens} exceeds the model's {limit} positions; truncate the "
                "prompts (from the left) or lower max_new_tokens"
            )

    # ------------------------------------------------------------------ prefill
    def _prefill(
        self, caller: Caller, copies: int, adapter_names: list[str] | None, rows_per_copy: list[int]
    ) -> tuple[Any, torch.Tensor]:
        """Run the prompt once per distinct row kind, then copy its cache to every row.

        ``rows_per_copy`` maps each output row block (of B rows) to the block of the prefill
        batch it copies; the prefill batch holds ``copies`` blocks.
        """
        ids = self.prompt_ids.repeat(copies, 1)
        mask = self.prompt_mask.repeat(copies, 1)
        cache = caller.new_cache(self.cache_length)
        logits = caller(
            ids,
            mask,
            position_ids_from_mask(mask),
            cache=cache,
            logits_to_keep=1,
            adapter_names=adapter_names,
        )[:, -1]
        arange = torch.arange(self.batch, device=self.device)
        index = torch.cat([arange + block * self.batch for block in rows_per_copy])
        if hasattr(cache, "reorder_cache"):
            cache.reorder_cache(index)
            return cache, logits.index_select(0, index)
        # Caches without row selection: run the prompt on every row instead.
        cache = caller.new_cache(self.cache_length)
        ids, mask = ids.index_select(0, index), mask.index_select(0, index)
        names = None if adapter_names is None else [adapter_names[int(i)] for i in index]
        logits = caller(
            ids,
            mask,
            position_ids_from_mask(mask),
            cache=cache,
            logits_to_keep=1,
            adapter_names=names,
        )[:, -1]
        return cache, logits

    # ------------------------------------------------------------------ run
    def run(
        self,
        settings: SamplingSettings,
        generator: Generators,
        eos_ids: list[int],
        pad: int,
    ) -> list[SampleOutput]:
        B, G, T, dev = self.batch, self.groups, self.max_new_tokens, self.device
        n_ref_groups = len(self.ref_groups)
        if self.fused:
            kinds = 2 if n_ref_groups else 1
            names = self.adapter_names[:1] * B + [self.ref_adapter] * B * (kinds - 1)
            cache, logits = self._prefill(self.policy, kinds, names, [0] * G + [1] * n_ref_groups)
            ref_cache = None
            pol_logits, ref_logits = logits[: self.rows], logits[self.rows :]
        else:
            cache, pol_logits = self._prefill(self.policy, 1, None, [0] * G)
            ref_cache, ref_logits = None, None
            if self.ref is not None:
                ref_cache, ref_logits = self._prefill(self.ref, 1, None, [0] * n_ref_groups)

        prompt_len = self.prompt_mask.shape[1]
        total_rows = self.rows + (self.ref_rows if self.fused else 0)
        step_mask = torch.cat(
            [
                self.prompt_mask.repeat(total_rows // B, 1),
                torch.ones(total_rows, T, dtype=torch.long, device=dev),
            ],
            dim=1,
        )
        next_pos = self.prompt_mask.sum(dim=1).repeat(total_rows // B).unsqueeze(1)
        ref_index = (
            torch.cat([torch.arange(B, device=dev) + g * B for g in self.ref_groups])
            if n_ref_groups
            else None
        )
        ref_slot = {g: k for k, g in enumerate(self.ref_groups)}
        eos = torch.tensor(eos_ids, dtype=torch.long, device=dev)

        tokens = torch.full((self.rows, T), pad, dtype=torch.long, device=dev)
        mask = torch.zeros((self.rows, T), dtype=torch.long, device=dev)
        pol_lp = torch.zeros((self.rows, T), dtype=torch.float32, device=dev)
        ref_lp = torch.zeros((self.ref_rows, T), dtype=torch.float32, device=dev)
        samp_lp = torch.zeros((self.rows, T), dtype=torch.float32, device=dev)
        finished = torch.zeros(self.rows, dtype=torch.bool, device=dev)
        steps = 0
        for t in range(T):
            pol_logp = torch.log_softmax(pol_logits.float(), dim=-1)
            ref_logp = None
            if ref_logits is not None:
                if ref_logits.shape[-1] != pol_logp.shape[-1]:
                    raise ValueError(
                        f"policy and reference vocabularies differ: {pol_logp.shape[-1]} vs "
                        f"{ref_logits.shape[-1]} logits"
                    )
                ref_logp = torch.log_softmax(ref_logits.float(), dim=-1)
            if not any(self.betas):  # every row samples the policy itself
                dist = pol_logp
            else:
                dists = []
                for g, beta in enumerate(self.betas):
                    pol_g = pol_logp[g * B : (g + 1) * B]
                    if beta == 0.0:
                        dists.append(pol_g)
                    else:
                        k = ref_slot[g]
                        dists.append(mix_logprobs(pol_g, ref_logp[k * B : (k + 1) * B], beta))
                dist = dists[0] if G == 1 else torch.cat(dists, dim=0)
            warped = warp(dist, settings)
            tok = pick(warped, self._noise(generator, warped.shape[-1]))
            tok = tok.masked_fill(finished, pad)
            live = ~finished
            mask[:, t] = live.long()
            tokens[:, t] = tok
            col = tok.unsqueeze(1)
            pol_lp[:, t] = pol_logp.gather(1, col).squeeze(1).masked_fill(finished, 0.0)
            samp_lp[:, t] = warped.gather(1, col).squeeze(1).masked_fill(finished, 0.0)
            if ref_logp is not None:
                ref_tok = col.index_select(0, ref_index)
                ref_lp[:, t] = (
                    ref_logp.gather(1, ref_tok)
                    .squeeze(1)
                    .masked_fill(finished.index_select(0, ref_index), 0.0)
                )
            if eos.numel():
                finished = finished | torch.isin(tok, eos)
            steps = t + 1
            if t == T - 1 or self._all_finished(finished):
                break
            # Feed the new tokens: all policy rows (then the reference rows, if fused).
            width = prompt_len + t + 1
            if self.fused:
                feed = col if not n_ref_groups else torch.cat([col, col.index_select(0, ref_index)])
                logits = self.policy(
                    feed,
                    step_mask[:, :width],
                    next_pos + t,
                    cache=cache,
                    adapter_names=self.adapter_names,
                )[:, -1]
                pol_logits, ref_logits = logits[: self.rows], logits[self.rows :]
            else:
                pol_logits = self.policy(
                    col, step_mask[: self.rows, :width], next_pos + t, cache=cache
                )[:, -1]
                if self.ref is not None:
                    ref_feed = col.index_select(0, ref_index)
                    ref_logits = self.ref(
                        ref_feed,
                        step_mask[: self.ref_rows, :width],
                        next_pos[: self.ref_rows] + t,
                        cache=ref_cache,
                    )[:, -1]

        outputs = []
        for g, beta in enumerate(self.betas):
            rows = slice(g * B, (g + 1) * B)
            ref_part = None
            if g in ref_slot:
                k = ref_slot[g]
                ref_part = ref_lp[k * B : (k + 1) * B, :steps].contiguous()
            outputs.append(
                SampleOutput(
                    tokens=tokens[rows, :steps].contiguous(),
                    mask=mask[rows, :steps].contiguous(),
                    policy_logprobs=pol_lp[rows, :steps].contiguous(),
                    ref_logprobs=ref_part,
                    sampling_logprobs=samp_lp[rows, :steps].contiguous(),
                    beta=beta,
                )
            )
        return outputs

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
        if (
            generator is None
            or isinstance(generator, torch.Generator)
            or len(generator) == self.rows  # one generator per output row
        ):
            return draw_noise((self.rows, vocab), generator, self.device)
        return torch.cat(
            [draw_noise((self.batch, vocab), generator, self.device) for _ in self.betas]
        )

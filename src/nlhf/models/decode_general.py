"""Decode forwards through transformers: any causal LM, plain, peft-wrapped or sharded.

Each model is called through :class:`~nlhf.models.lm.Caller` with its own KV cache
(:func:`nlhf.models.kv_cache.new_cache`, preallocated for prompt + new tokens).  The prompt
runs once per model and its cache is copied to every row that continues it (a cache without
row selection runs the prompt on every row instead).  When the reference is a LoRA policy's
adapter-disabled view (:func:`can_fuse`), policy and reference rows run as one forward with
one cache, each row choosing its adapter through peft's ``adapter_names``.

    forwards = GeneralForwards(policy_model, ref_model, fused, layout)
    pol_logits, ref_logits = forwards.prefill()
    pol_logits, ref_logits = forwards.step(tokens, t)

The lean path for supported architectures is :mod:`nlhf.models.decode_lean`; both give the
same logits to float rounding.
"""

from __future__ import annotations

from typing import Any

import torch

from nlhf.models.decode import Layout, Logits
from nlhf.models.lm import AdapterDisabled, Caller
from nlhf.models.logprobs import position_ids_from_mask


def can_fuse(policy_model: Any, ref_model: Any) -> bool:
    """Policy and reference rows can share a forward: plain LoRA (peft's ``adapter_names``
    supports neither DoRA nor other adapter types) with its own adapter-disabled view."""
    if not (isinstance(ref_model, AdapterDisabled) and ref_model.peft_model is policy_model):
        return False
    config = policy_model.peft_config.get(policy_model.active_adapter)
    return str(getattr(config, "peft_type", "")).endswith("LORA") and not getattr(
        config, "use_dora", False
    )


class GeneralForwards:
    """Policy and reference forwards through transformers (see the module docstring)."""

    def __init__(self, policy_model: Any, ref_model: Any, fused: bool, layout: Layout) -> None:
        self.layout = layout
        self.policy = Caller(policy_model)
        self.ref = (
            None if ref_model is None or fused or not layout.ref_groups else Caller(ref_model)
        )
        self.fused = fused
        self.ref_index = layout.ref_index() if layout.ref_groups else None
        B = layout.batch
        total = layout.rows + (layout.ref_rows if fused else 0)
        self.step_mask = torch.cat(
            [
                layout.prompt_mask.repeat(total // B, 1),
                torch.ones(total, layout.capacity - layout.prompt_mask.shape[1]).to(
                    layout.prompt_mask
                ),
            ],
            dim=1,
        )
        self.next_pos = layout.prompt_mask.sum(dim=1).repeat(total // B).unsqueeze(1)
        if fused:
            self.adapter = policy_model.active_adapter
            self.ref_adapter = ref_model.adapter
            self.adapter_names = [self.adapter] * layout.rows + [self.ref_adapter] * layout.ref_rows

    def prefill(self) -> Logits:
        layout = self.layout
        refs = len(layout.ref_groups)
        if self.fused:
            kinds = [self.adapter, self.ref_adapter] if refs else [self.adapter]
            self.cache, logits = self._prefill(
                self.policy, len(kinds), kinds, [0] * layout.groups + [1] * refs
            )
            return logits[: layout.rows], (logits[layout.rows :] if refs else None)
        self.cache, pol = self._prefill(self.policy, 1, None, [0] * layout.groups)
        if self.ref is None:
            return pol, None
        self.ref_cache, ref = self._prefill(self.ref, 1, None, [0] * refs)
        return pol, ref

    def step(self, tokens: torch.Tensor, t: int) -> Logits:
        layout = self.layout
        width = layout.prompt_mask.shape[1] + t + 1
        if self.fused:
            feed = (
                tokens
                if self.ref_index is None
                else torch.cat([tokens, tokens.index_select(0, self.ref_index)])
            )
            logits = self.policy(
                feed,
                self.step_mask[:, :width],
                self.next_pos + t,
                cache=self.cache,
                adapter_names=self.adapter_names,
            )[:, -1]
            return logits[: layout.rows], (
                logits[layout.rows :] if self.ref_index is not None else None
            )
        pol = self.policy(
            tokens, self.step_mask[: layout.rows, :width], self.next_pos + t, cache=self.cache
        )[:, -1]
        if self.ref is None:
            return pol, None
        ref = self.ref(
            tokens.index_select(0, self.ref_index),
            self.step_mask[: layout.ref_rows, :width],
            self.next_pos[: layout.ref_rows] + t,
            cache=self.ref_cache,
        )[:, -1]
        return pol, ref

    def _prefill(
        self, caller: Caller, copies: int, adapters: list[str] | None, rows_per_copy: list[int]
    ) -> tuple[Any, torch.Tensor]:
        """Run each distinct prompt once per row kind, then copy its cache to every row.

        ``rows_per_copy`` maps each output row block (of B rows) to the block of the prefill
        batch it copies; the prefill batch holds ``copies`` blocks of the distinct prompts,
        block k run with adapter ``adapters[k]`` (fused LoRA) or the model as it is (None).
        """
        layout = self.layout
        distinct, distinct_mask, prompt_rows = layout.distinct()
        U = distinct.shape[0]  # each distinct prompt runs once per copy
        ids, mask = distinct.repeat(copies, 1), distinct_mask.repeat(copies, 1)
        adapter_names = None if adapters is None else [a for a in adapters for _ in range(U)]
        cache = caller.new_cache(layout.capacity)
        logits = caller(
            ids,
            mask,
            position_ids_from_mask(mask),
            cache=cache,
            logits_to_keep=1,
            adapter_names=adapter_names,
        )[:, -1]
        index = torch.cat([prompt_rows + block * U for block in rows_per_copy])
        if hasattr(cache, "reorder_cache"):
            cache.reorder_cache(index)
            return cache, logits.index_select(0, index)
        # Caches without row selection: run the prompt on every row instead.
        cache = caller.new_cache(layout.capacity)
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

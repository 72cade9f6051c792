"""The forward passes of one decode: policy and reference logits per token, for the sampler.

The sampler (:mod:`nlhf.models.sampling`) owns what is drawn and recorded; a *forwards*
object owns how the next-token logits are computed.  Rows follow one :class:`Layout`: the
policy runs G groups of B rows (one group per mixture coefficient, each continuing the B
prompts), the reference runs the groups that need μ.  Two implementations:

- :class:`LeanForwards` (this module): policy and reference of the architectures
  :mod:`nlhf.models.decode_lean` supports (bare, fully fine-tuned or under LoRA); one
  ``step`` per token computes both models' logits with static KV caches, no transformers
  call, and a LoRA policy's rows share each forward with its reference's;
- :class:`~nlhf.models.decode_general.GeneralForwards`: any causal LM through transformers,
  including peft policies whose reference is their adapter-disabled view (then policy and
  reference rows share one forward).

:func:`nlhf.models.sampling.sample` picks the lean one whenever both models allow it
(``decoder="auto"``); ``decoder="transformers"`` forces the general one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import torch

from nlhf.models.decode_lean import LeanLM, lean_parts
from nlhf.models.logprobs import distinct_prompts

Logits = tuple[torch.Tensor, torch.Tensor | None]
"""(policy logits of every policy row, reference logits of every reference row or None)."""


@dataclass
class Layout:
    """Which rows each model runs: B prompts, ``groups`` blocks of policy rows, the reference
    over the blocks listed in ``ref_groups``."""

    prompt_ids: torch.Tensor
    prompt_mask: torch.Tensor
    groups: int
    ref_groups: list[int]
    capacity: int
    """Positions a row can hold: padded prompt length + new tokens."""

    @property
    def batch(self) -> int:
        return self.prompt_ids.shape[0]

    @property
    def rows(self) -> int:
        return self.groups * self.batch

    @property
    def ref_rows(self) -> int:
        return len(self.ref_groups) * self.batch

    def distinct(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The distinct prompts (ids, mask) and the one each of the B rows continues: a
        prefill runs each once (one prompt sampled many times is prefilled once)."""
        return distinct_prompts(self.prompt_ids, self.prompt_mask)

    def ref_index(self) -> torch.Tensor:
        """Policy rows whose tokens the reference is fed (its rows, in order)."""
        arange = torch.arange(self.batch, device=self.prompt_ids.device)
        return torch.cat([arange + g * self.batch for g in self.ref_groups])


class Forwards(Protocol):
    def prefill(self) -> Logits:
        """Run the prompts; the first next-token logits of every row."""
        ...

    def step(self, tokens: torch.Tensor, t: int) -> Logits:
        """Feed token ``t`` (policy rows, 1) of every row; the next logits."""
        ...


class LeanForwards:
    """Policy and reference as :class:`~nlhf.models.decode_lean.LeanLM`: one call per token.

    ``shared``: the reference runs the policy's own base (a LoRA policy and its
    adapter-disabled view), so both models' rows run as one :class:`LeanLM` whose blocks
    choose their adapter: every base weight is read once per token for both."""

    def __init__(self, policy_model: Any, ref_model: Any, layout: Layout, shared: bool) -> None:
        self.layout = layout
        args = (layout.prompt_ids, layout.prompt_mask)
        self.ref = self.shared = None
        refs = len(layout.ref_groups) if ref_model is not None else 0
        if refs:
            self.ref_index = layout.ref_index()
        if shared and refs:
            adapters = [lean_parts(policy_model)[1]] * layout.groups
            adapters += [lean_parts(ref_model)[1]] * refs
            self.shared = LeanLM.build(
                policy_model, *args, layout.groups + refs, layout.capacity, adapters
            )
            return
        self.policy = LeanLM.build(policy_model, *args, layout.groups, layout.capacity)
        if refs:
            self.ref = LeanLM.build(ref_model, *args, refs, layout.capacity)

    def _split(self, logits: torch.Tensor) -> Logits:
        rows = self.layout.rows
        return logits[:rows], logits[rows:]

    def prefill(self) -> Logits:
        if self.shared is not None:
            return self._split(self.shared.prefill())
        pol = self.policy.prefill()
        return pol, None if self.ref is None else self.ref.prefill()

    def step(self, tokens: torch.Tensor, t: int) -> Logits:
        if self.shared is not None:
            feed = torch.cat([tokens, tokens.index_select(0, self.ref_index)])
            return self._split(self.shared.step(feed, t))
        pol = self.policy.step(tokens, t)
        if self.ref is None:
            return pol, None
        return pol, self.ref.step(tokens.index_select(0, self.ref_index), t)

"""A KV cache that is allocated once for the whole generation and filled in place.

transformers' ``DynamicCache`` grows each layer with ``torch.cat`` at every token, so decoding
T tokens copies the cache O(T²) times; at 128 new tokens on the tiny benchmark GPT-2 that
copying is about a third of the decode time.  :func:`new_cache` keeps ``DynamicCache`` (and
so everything transformers knows about it: masks, sliding layers, sequence length) but
swaps each plain full-attention layer for :class:`PreallocatedLayer`, which writes new keys
and values into a buffer sized for prompt + max new tokens and hands attention a view of the
filled part.  Layers of any other kind (sliding windows, linear attention) stay as they are.

    from nlhf.models.kv_cache import new_cache
    cache = new_cache(model.config, capacity=prompt_len + max_new_tokens)
"""

from __future__ import annotations

from typing import Any

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


def new_cache(config: Any, capacity: int | None = None) -> Any:
    """A ``DynamicCache`` for ``config``; with ``capacity``, its full-attention layers are
    :class:`PreallocatedLayer` of that many positions."""
    try:
        cache = DynamicCache(config=config)
    except TypeError:  # pragma: no cover - transformers releases without the config argument
        return DynamicCache()
    layers = getattr(cache, "layers", None)
    if capacity is None or not isinstance(layers, list):
        return cache
    cache.layers = [
        PreallocatedLayer(capacity) if type(layer) is DynamicLayer else layer for layer in layers
    ]
    return cache


class PreallocatedLayer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in buffers of ``capacity`` positions."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self.length = 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        rows, heads = key_states.shape[:2]
        self._keys = key_states.new_zeros(rows, heads, self.capacity, key_states.shape[-1])
        self._values = value_states.new_zeros(rows, heads, self.capacity, value_states.shape[-1])
        self._sync()
        self.is_initialized = True

    def _sync(self) -> None:
        """Point ``keys`` / ``values`` (read by transformers) at the filled part of the buffers."""
        self.keys = self._keys[:, :, : self.length]
        self.values = self._values[:, :, : self.length]

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        start, stop = self.length, self.length + key_states.shape[-2]
        if stop > self.capacity:
            raise RuntimeError(
                f"KV cache of {self.capacity} positions is full (asked for {stop}); "
                "create it with a larger capacity"
            )
        self._keys[:, :, start:stop] = key_states
        self._values[:, :, start:stop] = value_states
        self.length = stop
        self._sync()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Select (and repeat) rows: row ``i`` of the result is row ``beam_idx[i]``."""
        if self.is_initialized:
            self._keys = self._keys.index_select(0, beam_idx.to(self._keys.device))
            self._values = self._values.index_select(0, beam_idx.to(self._values.device))
            self._sync()

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        if self.is_initialized:
            self.reorder_cache(torch.as_tensor(indices, device=self._keys.device).long())

    def batch_repeat_interleave(self, repeats: int) -> None:
        if self.is_initialized:
            rows = torch.arange(self._keys.shape[0], device=self._keys.device)
            self.reorder_cache(rows.repeat_interleave(repeats))

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove > 0:
            raise ValueError("crop expects a negative number of tokens to remove")
        self.length = max(0, self.length + tokens_to_remove)
        if self.is_initialized:
            self._sync()

    def reset(self) -> None:
        self.length = 0
        if self.is_initialized:
            self._sync()

"""A lean forward pass for decoding Llama-family (SmolLM2) and GPT-2 models.

transformers' forward is general: per call it builds masks, cache objects, output dataclasses
and dispatches through attention interfaces and hooks, a fixed cost per token that is large
next to a small model's arithmetic.  :class:`LeanLM` runs the same layers with torch's
functional ops straight on the model's own weight tensors (nothing is copied), with a static
KV cache allocated once for every row and every position of the decode
(:class:`StaticCache`): the prompt runs once and its keys and values are written into each
block of rows that continues it; each new token writes one slot; no step allocates a cache.

    if lean_supported(model):
        lm = LeanLM.build(model, prompt_ids, prompt_mask, blocks=2, capacity=P + T)
        logits = lm.prefill()                 # (B, V), the prompts' next-token logits
        logits = lm.step(tokens, t)           # (2B, V) after feeding token t of every row

Only the exact classes ``LlamaForCausalLM`` and ``GPT2LMHeadModel`` with plain settings are
supported (:func:`lean_supported` says why not otherwise); every other model, a peft model,
a sharded or hooked one decodes through transformers (:mod:`nlhf.models.decode_general`).
The logits equal transformers' to float rounding (tests/test_models_decode.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2LMHeadModel, LlamaForCausalLM

from nlhf.models.lm import is_peft_model, is_sharded
from nlhf.models.logprobs import distinct_prompts, position_ids_from_mask


def lean_unsupported(model: Any) -> str | None:
    """Why ``model`` cannot take the lean path, or None when it can."""
    if not isinstance(model, nn.Module) or is_peft_model(model) or is_sharded(model):
        return "not a plain transformers model (peft, sharded or a view)"
    if type(model) not in (LlamaForCausalLM, GPT2LMHeadModel):
        return f"{type(model).__name__} is not LlamaForCausalLM or GPT2LMHeadModel"
    if any(hasattr(m, "_hf_hook") for m in model.modules()):
        return "accelerate hooks (a device map or offloading)"
    if any(not p.is_floating_point() for p in model.parameters()):
        return "quantized weights"
    config = model.config
    if isinstance(model, GPT2LMHeadModel):
        if config.add_cross_attention or config.reorder_and_upcast_attn:
            return "GPT-2 with cross-attention or reordered attention"
    elif getattr(config, "sliding_window", None) or (
        getattr(config, "layer_types", None)
        and any(kind != "full_attention" for kind in config.layer_types)
    ):
        return "Llama with sliding-window layers"
    return None


def lean_supported(model: Any) -> bool:
    return lean_unsupported(model) is None


class StaticCache:
    """Keys and values of every layer, (rows, kv heads, capacity, head dim), allocated once."""

    def __init__(
        self, layers: int, rows: int, heads: int, capacity: int, head_dim: int, like: torch.Tensor
    ) -> None:
        shape = (rows, heads, capacity, head_dim)
        self.keys = [like.new_zeros(shape) for _ in range(layers)]
        self.values = [like.new_zeros(shape) for _ in range(layers)]

    def fill(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, rows: torch.Tensor
    ) -> None:
        """Write a prefill's (U, heads, P, d) keys and values of the distinct prompts into
        every block of B rows, row b taking prompt ``rows[b]``."""
        batch, length = rows.shape[0], keys.shape[2]
        blocks = self.keys[layer].shape[0] // batch
        for cache, new in ((self.keys[layer], keys), (self.values[layer], values)):
            cache.view(blocks, batch, *cache.shape[1:])[:, :, :, :length] = new.index_select(
                0, rows
            )

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, slot: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one position at ``slot``; views of the filled part (positions ≤ slot)."""
        self.keys[layer][:, :, slot : slot + 1] = keys
        self.values[layer][:, :, slot : slot + 1] = values
        return self.keys[layer][:, :, : slot + 1], self.values[layer][:, :, : slot + 1]


class LeanLM:
    """One model's decode over ``blocks`` × B rows, each block continuing the B prompts."""

    def __init__(
        self,
        model: nn.Module,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        blocks: int,
        capacity: int,
    ) -> None:
        self.model = model
        self.prompt_ids, self.prompt_mask = prompt_ids, prompt_mask.long()
        self.batch, self.prompt_len = prompt_ids.shape
        self.rows = blocks * self.batch
        keys_valid = torch.ones(self.rows, capacity, dtype=torch.bool, device=prompt_ids.device)
        keys_valid[:, : self.prompt_len] = self.prompt_mask.bool().repeat(blocks, 1)
        self.keys_valid = keys_valid[:, None, None, :]  # (rows, 1, 1, capacity) for SDPA
        self.next_pos = self.prompt_mask.sum(dim=1).repeat(blocks).unsqueeze(1)
        self.weight = next(model.parameters())
        self.cache = StaticCache(
            self.layers, self.rows, self.kv_heads, capacity, self.head_dim, self.weight
        )

    @staticmethod
    def build(model: nn.Module, *args: Any, **kwargs: Any) -> LeanLM:
        """The :class:`LeanLM` subclass of ``model``'s architecture."""
        kind = LeanLlama if isinstance(model, LlamaForCausalLM) else LeanGPT2
        return kind(model, *args, **kwargs)

    # ---------------------------------------------------------------- the two passes
    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Run each distinct prompt once; the next-token logits of the B rows (B, V)."""
        ids, mask, self.prompt_rows = distinct_prompts(self.prompt_ids, self.prompt_mask)
        valid = mask.bool()[:, None, None, :]
        causal = torch.ones(self.prompt_len, self.prompt_len, dtype=torch.bool).tril_()
        # A padding query sees itself, so no row of the mask is empty (SDPA would give NaN).
        eye = torch.eye(self.prompt_len, dtype=torch.bool)
        attend = (causal.to(mask.device) & valid) | eye.to(mask.device)
        x = self.embed(ids, position_ids_from_mask(mask))
        x = self.layers_forward(x, position_ids_from_mask(mask), attend, slot=None)
        return self.head(x[:, -1]).index_select(0, self.prompt_rows)

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Feed token ``t`` of every row (rows, 1); the next-token logits (rows, V)."""
        slot = self.prompt_len + t
        positions = self.next_pos + t
        x = self.embed(tokens, positions)
        x = self.layers_forward(x, positions, self.keys_valid[..., : slot + 1], slot=slot)
        return self.head(x[:, -1])

    def attend(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor,
        slot: int | None,
    ) -> torch.Tensor:
        """Attention of (rows, heads, n, d) queries; the cache takes k and v first (prefill:
        every block at once; a step: one slot).  Returns (rows, n, heads × d)."""
        if slot is None:
            self.cache.fill(layer, k, v, self.prompt_rows)
        else:
            k, v = self.cache.append(layer, k, v, slot)
        out = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, scale=self.scaling(layer), enable_gqa=k.shape[1] != q.shape[1]
        )
        return out.transpose(1, 2).reshape(q.shape[0], q.shape[2], -1)

    # ---------------------------------------------------------------- per architecture
    layers: int
    kv_heads: int
    head_dim: int

    def embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def layers_forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, slot: int | None
    ) -> torch.Tensor:
        raise NotImplementedError

    def head(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def scaling(self, layer: int) -> float:
        raise NotImplementedError


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LeanLlama(LeanLM):
    """LlamaForCausalLM (SmolLM2): RMSNorm, rotary positions, grouped-query attention, SwiGLU."""

    def __init__(self, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        attn = model.model.layers[0].self_attn
        self.layers = len(model.model.layers)
        self.kv_heads = model.config.num_key_value_heads
        self.head_dim = attn.head_dim
        self._scaling = attn.scaling
        super().__init__(model, *args, **kwargs)

    def scaling(self, layer: int) -> float:
        return self._scaling

    def embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.model.model.embed_tokens.weight)

    def layers_forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, slot: int | None
    ) -> torch.Tensor:
        cos, sin = self.model.model.rotary_emb(x, positions)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        rows, n = x.shape[:2]
        for i, layer in enumerate(self.model.model.layers):
            attn, mlp = layer.self_attn, layer.mlp
            h = _rms_norm(layer.input_layernorm, x)
            q = _linear(attn.q_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            k = _linear(attn.k_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            v = _linear(attn.v_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            x = x + _linear(attn.o_proj, self.attend(i, q, k, v, mask, slot))
            h = _rms_norm(layer.post_attention_layernorm, x)
            gate = mlp.act_fn(_linear(mlp.gate_proj, h))
            x = x + _linear(mlp.down_proj, gate * _linear(mlp.up_proj, h))
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self.model.lm_head, _rms_norm(self.model.model.norm, x))


class LeanGPT2(LeanLM):
    """GPT2LMHeadModel: learned positions, LayerNorm, Conv1D projections, tanh-GELU MLP."""

    def __init__(self, model: nn.Module, *args: Any, **kwargs: Any) -> None:
        attn = model.transformer.h[0].attn
        self.layers = len(model.transformer.h)
        self.kv_heads = attn.num_heads
        self.head_dim = attn.head_dim
        super().__init__(model, *args, **kwargs)

    def scaling(self, layer: int) -> float:
        return self.model.transformer.h[layer].attn.scaling

    def embed(self, ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        transformer = self.model.transformer
        return F.embedding(ids, transformer.wte.weight) + F.embedding(
            positions, transformer.wpe.weight
        )

    def layers_forward(
        self, x: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor, slot: int | None
    ) -> torch.Tensor:
        rows, n, width = x.shape
        for i, block in enumerate(self.model.transformer.h):
            attn, mlp = block.attn, block.mlp
            h = _layer_norm(block.ln_1, x)
            q, k, v = _conv1d(attn.c_attn, h).split(width, dim=2)
            q, k, v = (z.view(rows, n, -1, self.head_dim).transpose(1, 2) for z in (q, k, v))
            x = x + _conv1d(attn.c_proj, self.attend(i, q, k, v, mask, slot))
            h = _layer_norm(block.ln_2, x)
            x = x + _conv1d(mlp.c_proj, mlp.act(_conv1d(mlp.c_fc, h)))
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(self.model.lm_head, _layer_norm(self.model.transformer.ln_f, x))


def _linear(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.linear(x, module.weight, module.bias)


def _conv1d(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' Conv1D (weight stored as (in, out)) on (rows, n, in)."""
    out = torch.addmm(module.bias, x.reshape(-1, x.shape[-1]), module.weight)
    return out.view(*x.shape[:-1], -1)


def _layer_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.layer_norm(x, module.normalized_shape, module.weight, module.bias, module.eps)


def _rms_norm(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """transformers' LlamaRMSNorm: normalized in float32, scaled in the model's dtype."""
    variance = x.float().pow(2).mean(-1, keepdim=True)
    normed = (x.float() * torch.rsqrt(variance + module.variance_epsilon)).to(x.dtype)
    return module.weight * normed

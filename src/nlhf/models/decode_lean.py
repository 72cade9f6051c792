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
supported, bare or under plain LoRA adapters on linear layers (a peft policy or its
:class:`~nlhf.models.lm.AdapterDisabled` view: each block of rows runs its own adapter, or
none, over the one base, so a LoRA policy and its reference share every weight read);
:func:`lean_unsupported` says why not otherwise, and such models, sharded or hooked ones
decode through transformers (:mod:`nlhf.models.decode_general`).  The logits equal
transformers' (and peft's) to float rounding (tests/test_models_decode.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GPT2LMHeadModel, LlamaForCausalLM

from nlhf.models.lm import BASE_ADAPTER, AdapterDisabled, is_peft_model, is_sharded
from nlhf.models.logprobs import distinct_prompts, position_ids_from_mask

LoRA = tuple[torch.Tensor, torch.Tensor, float]
"""One adapter of one linear layer: (A weight, B weight, scaling); its output adds
scaling · B(A(x))."""


def lean_parts(model: Any) -> tuple[Any, str | None]:
    """(the transformers model whose layers run, the adapter its rows apply or None): a peft
    policy runs its active adapter over its base, an adapter-disabled view the adapter it
    names (none for the bare base); a plain model is its own base."""
    if isinstance(model, AdapterDisabled):
        base = model.peft_model.get_base_model()
        return base, (None if model.adapter == BASE_ADAPTER else model.adapter)
    if is_peft_model(model):
        return model.get_base_model(), model.active_adapter
    return model, None


def _adapter_unsupported(model: Any) -> str | None:
    """Why the adapters of a peft model (or view) are beyond the lean path, or None."""
    from peft.tuners.lora import Linear as LoraLinear  # noqa: PLC0415 - only peft models
    from peft.tuners.tuners_utils import BaseTunerLayer  # noqa: PLC0415
    from peft.utils.other import AuxiliaryTrainingWrapper  # noqa: PLC0415

    peft = model.peft_model if isinstance(model, AdapterDisabled) else model
    _, adapter = lean_parts(model)
    if len(peft.active_adapters) != 1:
        return "several active adapters"
    for module in _layers(peft.get_base_model()):
        if isinstance(module, AuxiliaryTrainingWrapper):
            return "modules_to_save or trainable tokens beside the adapter"
        if not isinstance(module, BaseTunerLayer):
            continue
        if type(module) is not LoraLinear:
            return f"{type(module).__name__} adapter layers (only LoRA on linear layers)"
        if module.merged or module.disable_adapters:
            return "merged or disabled adapter layers"
        if adapter is not None and (
            adapter in module.lora_variant or getattr(module, "lora_bias", {}).get(adapter)
        ):
            return "a LoRA variant (DoRA and the like) or a LoRA bias"
    return None


def _layers(model: nn.Module):
    """Every module of ``model``, each LoRA layer with its base layer but without its
    adapters' modules (however many adapters a tournament attaches, a walk stays short)."""
    stack = [model]
    while stack:
        module = stack.pop()
        yield module
        if hasattr(module, "lora_A") and hasattr(module, "base_layer"):
            stack.append(module.base_layer)
        else:
            stack.extend(module.children())


def lean_unsupported(model: Any) -> str | None:
    """Why ``model`` cannot take the lean path, or None when it can."""
    if is_sharded(model):
        return "a sharded model (FSDP)"
    if is_peft_model(model) or isinstance(model, AdapterDisabled):
        if why := _adapter_unsupported(model):
            return why
        model = lean_parts(model)[0]
    if not isinstance(model, nn.Module):
        return "not a transformers model"
    if type(model) not in (LlamaForCausalLM, GPT2LMHeadModel):
        return f"{type(model).__name__} is not LlamaForCausalLM or GPT2LMHeadModel"
    layers = list(_layers(model))
    if any(hasattr(m, "_hf_hook") for m in layers):
        return "accelerate hooks (a device map or offloading)"
    if any(not p.is_floating_point() for m in layers for p in m.parameters(recurse=False)):
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
        """Write a prefill's (U, heads, P, d) keys and values into every row, row r taking
        prefill row ``rows[r]``."""
        length = keys.shape[2]
        for cache, new in ((self.keys[layer], keys), (self.values[layer], values)):
            cache[:, :, :length] = new.index_select(0, rows)

    def append(
        self, layer: int, keys: torch.Tensor, values: torch.Tensor, slot: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write one position at ``slot``; views of the filled part (positions ≤ slot)."""
        self.keys[layer][:, :, slot : slot + 1] = keys
        self.values[layer][:, :, slot : slot + 1] = values
        return self.keys[layer][:, :, : slot + 1], self.values[layer][:, :, : slot + 1]


class LeanLM:
    """One model's decode over ``blocks`` × B rows, each block continuing the B prompts.

    ``adapters`` (one per block): the LoRA adapter that block's rows run, None for the bare
    base; by default every block runs what ``model`` runs (:func:`lean_parts`)."""

    def __init__(
        self,
        model: Any,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        blocks: int,
        capacity: int,
        adapters: list[str | None] | None = None,
    ) -> None:
        self.model, own = lean_parts(model)
        adapters = [own] * blocks if adapters is None else list(adapters)
        if len(adapters) != blocks:
            raise ValueError(f"{blocks} blocks need {blocks} adapters, got {len(adapters)}")
        self.prompt_ids, self.prompt_mask = prompt_ids, prompt_mask.long()
        self.batch, self.prompt_len = prompt_ids.shape
        self.rows = blocks * self.batch
        self.kinds = list(dict.fromkeys(adapters))  # distinct adapters: one prefill each
        self.block_kind = [self.kinds.index(a) for a in adapters]
        self.lora = _lora_weights(self.model, [a for a in self.kinds if a is not None])
        self.segments = _segments([a for a in adapters for _ in range(self.batch)])
        keys_valid = torch.ones(self.rows, capacity, dtype=torch.bool, device=prompt_ids.device)
        keys_valid[:, : self.prompt_len] = self.prompt_mask.bool().repeat(blocks, 1)
        self.keys_valid = keys_valid[:, None, None, :]  # (rows, 1, 1, capacity) for SDPA
        self.next_pos = self.prompt_mask.sum(dim=1).repeat(blocks).unsqueeze(1)
        self.weight = next(self.model.parameters())
        self.cache = StaticCache(
            self.layers, self.rows, self.kv_heads, capacity, self.head_dim, self.weight
        )

    @staticmethod
    def build(model: Any, *args: Any, **kwargs: Any) -> LeanLM:
        """The :class:`LeanLM` subclass of ``model``'s architecture."""
        kind = LeanLlama if isinstance(lean_parts(model)[0], LlamaForCausalLM) else LeanGPT2
        return kind(model, *args, **kwargs)

    # ---------------------------------------------------------------- the two passes
    @torch.no_grad()
    def prefill(self) -> torch.Tensor:
        """Run each distinct prompt once per distinct adapter; the next-token logits of every
        row (rows, V)."""
        ids, mask, prompt_rows = distinct_prompts(self.prompt_ids, self.prompt_mask)
        U, kinds = ids.shape[0], len(self.kinds)
        ids, mask = ids.repeat(kinds, 1), mask.repeat(kinds, 1)
        self.prompt_rows = torch.cat([prompt_rows + k * U for k in self.block_kind])
        valid = mask.bool()[:, None, None, :]
        causal = torch.ones(self.prompt_len, self.prompt_len, dtype=torch.bool).tril_()
        # A padding query sees itself, so no row of the mask is empty (SDPA would give NaN).
        eye = torch.eye(self.prompt_len, dtype=torch.bool)
        attend = (causal.to(mask.device) & valid) | eye.to(mask.device)
        steps, self.segments = self.segments, _segments([a for a in self.kinds for _ in range(U)])
        try:
            x = self.embed(ids, position_ids_from_mask(mask))
            x = self.layers_forward(x, position_ids_from_mask(mask), attend, slot=None)
            return self.head(x[:, -1]).index_select(0, self.prompt_rows)
        finally:
            self.segments = steps

    @torch.no_grad()
    def step(self, tokens: torch.Tensor, t: int) -> torch.Tensor:
        """Feed token ``t`` of every row (rows, 1); the next-token logits (rows, V)."""
        slot = self.prompt_len + t
        positions = self.next_pos + t
        x = self.embed(tokens, positions)
        x = self.layers_forward(x, positions, self.keys_valid[..., : slot + 1], slot=slot)
        return self.head(x[:, -1])

    def linear(self, module: nn.Module, x: torch.Tensor, conv1d: bool = False) -> torch.Tensor:
        """``module`` on (rows, n, in), each segment of rows adding its adapter's LoRA term
        (as peft adds it: in the adapter's dtype, cast back); ``conv1d``: transformers'
        Conv1D, weight stored (in, out)."""
        out = _conv1d(module, x) if conv1d else F.linear(x, module.weight, module.bias)
        adapters = self.lora.get(module)
        if not adapters:
            return out
        for start, stop, name in self.segments:
            if (weights := adapters.get(name)) is None:  # the bare base, or not adapted here
                continue
            a, b, scaling = weights
            whole = stop - start == x.shape[0]
            delta = F.linear(F.linear((x if whole else x[start:stop]).to(a.dtype), a), b)
            delta = (delta * scaling).to(out.dtype)
            if whole:
                out = out + delta
            else:
                out[start:stop] += delta
        return out

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
        out = _attention(q, k, v, mask, self.scaling(layer))
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


def _attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float
) -> torch.Tensor:
    """Softmax attention of (rows, heads, n, d) queries on (rows, kv heads, L, d) keys and
    values, each kv head serving a group of consecutive query heads; ``mask`` (rows, 1, n, L)
    True where a query may attend.  Two batched matrix products with the softmax in float32:
    what SDPA computes, without its slow bfloat16 path on CPU (several times slower per
    decode step here)."""
    rows, heads, n, d = q.shape
    kv = k.shape[1]
    group = heads // kv
    scores = torch.matmul(q.reshape(rows, kv, group * n, d), k.transpose(-1, -2)).float()
    scores = scores.mul_(scale).view(rows, kv, group, n, -1)
    scores = scores.masked_fill_(~mask.unsqueeze(2), float("-inf"))
    weights = scores.softmax(-1).to(v.dtype).view(rows, kv, group * n, -1)
    return torch.matmul(weights, v).view(rows, heads, n, d)


def _segments(row_adapters: list[str | None]) -> list[tuple[int, int, str | None]]:
    """(start, stop, adapter) of each run of consecutive rows with the same adapter."""
    out: list[tuple[int, int, str | None]] = []
    for r, name in enumerate(row_adapters):
        if out and out[-1][2] == name:
            out[-1] = (out[-1][0], r + 1, name)
        else:
            out.append((r, r + 1, name))
    return out


def _lora_weights(model: nn.Module, adapters: list[str]) -> dict[nn.Module, dict[str, LoRA]]:
    """Per LoRA-wrapped linear layer of ``model``, the (A, B, scaling) of each of ``adapters``
    it carries (peft's dropout is off in eval, so it is left out)."""
    if not adapters:
        return {}
    out = {}
    for module in _layers(model):
        if hasattr(module, "lora_A") and hasattr(module, "base_layer"):
            out[module] = {
                name: (module.lora_A[name].weight, module.lora_B[name].weight, module.scaling[name])
                for name in adapters
                if name in module.lora_A
            }
    return out


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LeanLlama(LeanLM):
    """LlamaForCausalLM (SmolLM2): RMSNorm, rotary positions, grouped-query attention, SwiGLU."""

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        base = lean_parts(model)[0]
        attn = base.model.layers[0].self_attn
        self.layers = len(base.model.layers)
        self.kv_heads = base.config.num_key_value_heads
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
            q = self.linear(attn.q_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            k = self.linear(attn.k_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            v = self.linear(attn.v_proj, h).view(rows, n, -1, self.head_dim).transpose(1, 2)
            q = q * cos + _rotate_half(q) * sin
            k = k * cos + _rotate_half(k) * sin
            x = x + self.linear(attn.o_proj, self.attend(i, q, k, v, mask, slot))
            h = _rms_norm(layer.post_attention_layernorm, x)
            gate = mlp.act_fn(self.linear(mlp.gate_proj, h))
            x = x + self.linear(mlp.down_proj, gate * self.linear(mlp.up_proj, h))
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.model.lm_head, _rms_norm(self.model.model.norm, x))


class LeanGPT2(LeanLM):
    """GPT2LMHeadModel: learned positions, LayerNorm, Conv1D projections, tanh-GELU MLP."""

    def __init__(self, model: Any, *args: Any, **kwargs: Any) -> None:
        base = lean_parts(model)[0]
        attn = base.transformer.h[0].attn
        self.layers = len(base.transformer.h)
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
            q, k, v = self.linear(attn.c_attn, h, conv1d=True).split(width, dim=2)
            q, k, v = (z.view(rows, n, -1, self.head_dim).transpose(1, 2) for z in (q, k, v))
            x = x + self.linear(attn.c_proj, self.attend(i, q, k, v, mask, slot), conv1d=True)
            h = _layer_norm(block.ln_2, x)
            x = x + self.linear(
                mlp.c_proj, mlp.act(self.linear(mlp.c_fc, h, conv1d=True)), conv1d=True
            )
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.model.lm_head, _layer_norm(self.model.transformer.ln_f, x))


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

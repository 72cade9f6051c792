"""Copies, swaps and distances of a model's trainable weights (the opponents of the Nash trainers).

    anchor = trainable_weights(model)            # an fp32 copy, by parameter name
    with swapped_weights(model, anchor):         # sample from those weights instead
        y = sample(policy, ...)
    relative_distance(anchor, model)             # ‖θ − θ_anchor‖ / ‖θ_anchor‖

The swap re-points each parameter's tensor (no copy, no second model) and puts the policy's own
back afterwards, bit for bit; a parameter sharded by FSDP is copied into instead, since FSDP
gathers from its own storage.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from nlhf.train.sharding import whole


def trainable_weights(model: nn.Module) -> dict[str, torch.Tensor]:
    """An fp32 copy of every trainable parameter, by name (the adapter's only, under LoRA)."""
    return {
        name: p.detach().to(torch.float32, copy=True)
        for name, p in model.named_parameters()
        if p.requires_grad
    }


@torch.no_grad()
def relative_distance(weights: dict[str, torch.Tensor], model: nn.Module) -> float:
    """‖θ − w‖ / ‖w‖ over the tensors of ``weights`` (θ: the model's current parameters)."""
    params = dict(model.named_parameters())
    diff = sum((params[n].float() - w).pow(2).sum() for n, w in weights.items())
    norm = sum(w.pow(2).sum() for w in weights.values())
    # sharded: both sums stay partial until this one gather
    diff, norm = (float(x) for x in whole(torch.stack([diff, norm])))
    return (diff / max(norm, 1e-30)) ** 0.5


@contextmanager
def swapped_weights(model: nn.Module, weights: dict[str, torch.Tensor]) -> Iterator[None]:
    """Run the block with ``weights`` (name → tensor) in place of those parameters' values.

    The parameters' own tensors are re-pointed, not copied, and put back on exit (also on an
    error), so the model's weights afterwards are exactly what they were.  Tensors whose dtype
    or device differs from the parameter's are converted (a copy) for the block.  Parameters
    sharded by FSDP (``fsdp=true``) are copied into instead (FSDP gathers from its own
    storage, which re-pointing would bypass), and copied back on exit.
    """
    params = dict(model.named_parameters())
    unknown = sorted(set(weights) - set(params))
    if unknown:
        raise KeyError(f"swapped_weights: the model has no parameters named {unknown[:3]}")

    saved: dict[str, torch.Tensor] = {}
    copied: dict[str, torch.Tensor] = {}
    try:
        with torch.no_grad():
            for name, value in weights.items():
                p = params[name]
                if value.shape != p.shape:
                    raise ValueError(
                        f"swapped_weights: {name} has shape {tuple(value.shape)}, "
                        f"the parameter {tuple(p.shape)}"
                    )
                if isinstance(p, DTensor):
                    copied[name] = p.detach().clone()
                    p.copy_(value.to(p.dtype))
                else:
                    saved[name] = p.data
                    p.data = value.to(device=p.device, dtype=p.dtype)
        yield
    finally:
        with torch.no_grad():
            for name, original in saved.items():
                params[name].data = original
            for name, original in copied.items():
                params[name].copy_(original)

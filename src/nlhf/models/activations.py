"""Activations that cost less: GPT-2's GELU as one kernel, a SwiGLU MLP that saves less.

    from nlhf.models.activations import fuse_gelu, lean_swiglu
    fuse_gelu(model)          # in place; returns how many activation modules it swapped
    lean_swiglu(model)        # in place; returns how many MLPs it changed

``fuse_gelu``: GPT-2 and its relatives (``gelu_new``, ``gelu_fast``) compute the tanh
approximation of GELU as six to eight elementwise ops in Python; transformers'
``gelu_pytorch_tanh`` is the same function as one call of ``F.gelu(approximate="tanh")``
(outputs differ by float rounding, at most 2.4e-7 on unit-normal inputs).
``lean_swiglu``: a Llama-style MLP, down(SiLU(gate(x)) · up(x)), keeps four tensors of the
intermediate width per token for its backward pass (gate(x), up(x), SiLU(gate(x)) and the
product); :class:`SwiGLUDown` keeps the first two and recomputes the rest elementwise in the
backward pass, which takes about a quarter off a Llama layer's saved activations with no extra
matrix product (the idea of Liger Kernel's SwiGLU).  Projections wrapped by an adapter, and
forwards without gradient, run as written.  :class:`~nlhf.models.policy.Policy` applies both
to every model it wraps; neither changes the config or the weights, so a saved model loads
anywhere as before.
"""

from __future__ import annotations

from types import MethodType

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2CLS

SLOW_GELU_NAMES = ("gelu_new", "gelu_fast")


def fuse_gelu(model: nn.Module) -> int:
    """Replace each tanh-GELU module built from elementwise ops with the fused one; returns
    the number replaced."""
    slow = tuple(ACT2CLS[name] for name in SLOW_GELU_NAMES)
    fused = ACT2CLS["gelu_pytorch_tanh"]
    swaps = [
        (parent, name)
        for parent in model.modules()
        for name, child in parent.named_children()
        if type(child) in slow
    ]
    for parent, name in swaps:
        setattr(parent, name, fused())
    return len(swaps)


def lean_swiglu(model: nn.Module) -> int:
    """Make each Llama-style SwiGLU MLP keep only its two projections for the backward pass;
    returns the number of MLPs changed."""
    found = [m for m in model.modules() if _is_swiglu(m)]
    for mlp in found:
        mlp.forward = MethodType(_swiglu_forward, mlp)
    return len(found)


def _is_swiglu(module: nn.Module) -> bool:
    """down_proj(SiLU(gate_proj(x)) · up_proj(x)) with all three projections ``nn.Linear``."""
    projections = [getattr(module, n, None) for n in ("gate_proj", "up_proj", "down_proj")]
    return plain_linear(*projections) and isinstance(
        getattr(module, "act_fn", None), nn.SiLU | ACT2CLS["silu"]
    )


def plain_linear(*modules: object) -> bool:
    """Every module is exactly ``nn.Linear`` (not an adapter's wrapper, not a subclass)."""
    return all(type(m) is nn.Linear for m in modules)


def _swiglu_forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The MLP's own forward, with the last two steps as :class:`SwiGLUDown` while its
    projections are still plain linear layers (a LoRA adapter wraps them: then as written)."""
    gate, up, down = self.gate_proj, self.up_proj, self.down_proj
    if torch.is_grad_enabled() and plain_linear(gate, up, down):
        return SwiGLUDown.apply(gate(x), up(x), down.weight, down.bias)
    return down(self.act_fn(gate(x)) * up(x))


class SwiGLUDown(torch.autograd.Function):
    """``linear(silu(g) · u, W, b)`` that saves g and u, and recomputes silu(g) · u in the
    backward pass instead of keeping it and silu(g)."""

    @staticmethod
    def forward(ctx, gate, up, weight, bias):
        ctx.save_for_backward(gate, up, weight)
        ctx.has_bias = bias is not None
        return F.linear(F.silu(gate) * up, weight, bias)

    @staticmethod
    def backward(ctx, grad_out):
        gate, up, weight = ctx.saved_tensors
        sig = torch.sigmoid(gate)
        silu = gate * sig
        grad_h = grad_out @ weight
        grad_weight = grad_bias = None
        if ctx.needs_input_grad[2]:
            hidden = (silu * up).flatten(0, -2)
            grad_weight = grad_out.flatten(0, -2).t() @ hidden
        if ctx.has_bias and ctx.needs_input_grad[3]:
            grad_bias = grad_out.flatten(0, -2).sum(0)
        grad_up = grad_h * silu
        grad_gate = grad_h.mul_(up).mul_(sig * (1 + gate * (1 - sig)))
        return grad_gate, grad_up, grad_weight, grad_bias

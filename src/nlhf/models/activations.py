"""Run GPT-2's GELU as one fused torch kernel instead of a chain of elementwise ops.

    from nlhf.models.activations import fuse_gelu
    fuse_gelu(model)          # in place; returns how many activation modules it swapped

GPT-2 and its relatives (``activation_function`` ``gelu_new`` or ``gelu_fast``) compute the
tanh approximation of GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as six to eight
separate tensor ops in Python.  transformers' ``gelu_pytorch_tanh`` module is the same function
as a single call to ``torch.nn.functional.gelu(approximate="tanh")``; outputs differ only by
float rounding (at most 2.4e-7 on unit-normal inputs).  One kernel reads and writes the
activations once instead of once per op, which shortens both training and decoding steps
(the README's Benchmarks section has the effect on a step).
:class:`~nlhf.models.policy.Policy` and the judges call this on every model they wrap; models
with other activations (Llama's SiLU, already one kernel) are left as they are.  The model's
config is not changed, so a saved model loads anywhere exactly as before.
"""

from __future__ import annotations

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

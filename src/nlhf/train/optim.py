"""The optimizers and learning-rate schedules every trainer uses.

    optimizer = build_optimizer("adamw", params, lr=1e-3, weight_decay=0.0)
    factor = lr_factor(steps=100, warmup_steps=10, schedule="cosine")
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

``params`` is a list of parameters or of param groups (dicts with ``params`` and, where a
group differs, its own ``lr``); the schedule multiplies every group's learning rate.

1. AdamW: torch's fused kernel (one kernel over all tensors) unless a parameter is sharded.
2. Lion (Chen et al. 2023): c = β₁·m + (1 − β₁)·g; θ ← θ·(1 − lr·λ) − lr·sign(c);
   m ← β₂·m + (1 − β₂)·g.  One moment (half of AdamW's state); typical learning rates are
   3–10× smaller than AdamW's.
3. The schedule: linear warm-up over ``warmup_steps``, then constant, linear or cosine decay
   over the remaining steps, or over a time budget when ``time_limit`` and ``elapsed`` are given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any, Literal

import torch

from nlhf.train import sharding
from nlhf.train.graft import Graft

OptimizerName = Literal["adamw", "lion", "graft"]
ScheduleName = Literal["constant", "linear", "cosine"]


class Lion(torch.optim.Optimizer):
    """Lion: the sign of an interpolated momentum as the update (see the module docstring)."""

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if not all(0.0 <= b < 1.0 for b in betas):
            raise ValueError(f"betas must lie in [0, 1), got {betas}")
        super().__init__(params, {"lr": lr, "betas": betas, "weight_decay": weight_decay})

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["exp_avg"] = torch.zeros_like(p)
                m = state["exp_avg"]
                p.mul_(1.0 - group["lr"] * group["weight_decay"])
                update = m.mul(beta1).add_(p.grad, alpha=1.0 - beta1).sign_()
                p.add_(update, alpha=-group["lr"])
                m.mul_(beta2).add_(p.grad, alpha=1.0 - beta2)
        return loss


def parameters_of(params: Iterable[Any]) -> list[torch.nn.Parameter]:
    """Every parameter of a list of parameters or param groups, in order."""
    out: list[torch.nn.Parameter] = []
    for item in params:
        out.extend(item["params"] if isinstance(item, dict) else [item])
    return out


def build_optimizer(
    name: OptimizerName, params: Iterable[Any], lr: float, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """The optimizer ``name`` over ``params`` (parameters or param groups)."""
    params = [dict(p, params=list(p["params"])) if isinstance(p, dict) else p for p in params]
    if name == "lion":
        return Lion(params, lr=lr, weight_decay=weight_decay)
    if name == "graft":
        return Graft(params, lr=lr, weight_decay=weight_decay)
    if name != "adamw":
        raise ValueError(f"optimizer must be adamw, lion or graft, got {name!r}")
    flat = parameters_of(params)
    fused = len(sharding.replicated(flat)) == len(flat)  # FSDP's DTensors: the foreach kernel
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def lr_factor(
    steps: int,
    warmup_steps: int,
    schedule: ScheduleName,
    time_limit: float = 0.0,
    elapsed: Callable[[], float] | None = None,
) -> Callable[[int], float]:
    """The learning-rate multiplier of each step (0-based).  With ``time_limit`` (minutes)
    and ``elapsed`` (seconds trained so far) the decay follows the time budget instead of
    the step count."""
    if schedule not in ("constant", "linear", "cosine"):
        raise ValueError(f"schedule must be constant, linear or cosine, got {schedule!r}")
    limit = time_limit * 60.0

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / warmup_steps
        if schedule == "constant":
            return 1.0
        if limit and elapsed is not None:
            progress = elapsed() / limit
        else:
            progress = (step - warmup_steps) / max(1, steps - warmup_steps)
        if schedule == "linear":
            return max(0.0, 1.0 - progress)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor

"""Learning-rate grafting AdamW#Lion: the step size of AdamW, the direction of Lion.

    nlhf train nash-md optimizer=graft
    opt = Graft(params, lr=1e-3, adam_betas=(0.9, 0.999), lion_betas=(0.9, 0.99))

Per parameter tensor θ with gradient g, each step (lr, λ of the tensor's param group):

1. AdamW's moments: m ← β₁ᵃ·m + (1 − β₁ᵃ)·g;  v ← β₂ᵃ·v + (1 − β₂ᵃ)·g²;  t ← t + 1;
   u = m̂ / (√v̂ + ε), m̂ = m / (1 − (β₁ᵃ)ᵗ), v̂ = v / (1 − (β₂ᵃ)ᵗ) (AdamW would step −lr·u).
2. Lion's direction: c = β₁ˡ·μ + (1 − β₁ˡ)·g;  d = sign(c);  μ ← β₂ˡ·μ + (1 − β₂ˡ)·g.
3. Decoupled weight decay, as AdamW: θ ← θ·(1 − lr·λ).
4. The grafted step: θ ← θ − lr·‖u‖·d/‖d‖ (zero when d is all zero); norms are per tensor.

So every tensor moves as far as AdamW would move it, along Lion's sign direction.  Agarwal,
Anil, Hazan, Koren, Zhang, "Disentangling Adaptive Gradient Methods from Learning Rates"
(arXiv:2002.11803), call this grafting M#D (magnitude from M, direction from D).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch


def _check_betas(name: str, betas: tuple[float, float]) -> None:
    if len(betas) != 2 or not all(0.0 <= b < 1.0 for b in betas):
        raise ValueError(f"{name} must be two numbers in [0, 1), got {betas}")


class Graft(torch.optim.Optimizer):
    """AdamW#Lion grafting (see the module docstring).

    State per parameter: ``step`` (a float32 CPU scalar tensor, as torch.optim.AdamW keeps
    it; ``load_state_dict`` leaves a key named ``step`` uncast), ``exp_avg`` and
    ``exp_avg_sq`` (AdamW's first and second moments) and ``lion_momentum`` (Lion's μ).
    """

    def __init__(
        self,
        params: Iterable[Any],
        lr: float = 1e-3,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        lion_betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.0,
    ) -> None:
        if lr <= 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        if eps < 0:
            raise ValueError(f"eps must be >= 0, got {eps}")
        if weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
        _check_betas("adam_betas", adam_betas)
        _check_betas("lion_betas", lion_betas)
        defaults = {
            "lr": lr,
            "adam_betas": tuple(adam_betas),
            "eps": eps,
            "lion_betas": tuple(lion_betas),
            "weight_decay": weight_decay,
        }
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr = group["lr"]
            adam_beta1, adam_beta2 = group["adam_betas"]
            lion_beta1, lion_beta2 = group["lion_betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError("Graft does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.tensor(0.0, dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                    state["lion_momentum"] = torch.zeros_like(p)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                momentum = state["lion_momentum"]

                # AdamW's bias-corrected update u (AdamW itself moves p by -lr * u).
                state["step"] += 1
                t = state["step"].item()
                exp_avg.lerp_(grad, 1.0 - adam_beta1)
                exp_avg_sq.mul_(adam_beta2).addcmul_(grad, grad, value=1.0 - adam_beta2)
                bias_correction1 = 1.0 - adam_beta1**t
                bias_correction2_sqrt = math.sqrt(1.0 - adam_beta2**t)
                denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(group["eps"])
                adam_update = exp_avg.div(bias_correction1).div_(denom)
                adam_norm = torch.linalg.vector_norm(adam_update, dtype=torch.float32)

                # Lion's sign direction, then its momentum update.
                direction = momentum.mul(lion_beta1).add_(grad, alpha=1.0 - lion_beta1).sign_()
                momentum.mul_(lion_beta2).add_(grad, alpha=1.0 - lion_beta2)

                # ‖d‖ is 0 or at least 1, so clamping at 1 changes only the all-zero case,
                # where d is zero and so is the step (no host sync, no division by zero).
                sign_norm = torch.linalg.vector_norm(direction, dtype=torch.float32)
                scale = adam_norm / sign_norm.clamp(min=1.0)

                p.mul_(1.0 - lr * group["weight_decay"])
                p.add_(direction.mul_(scale), alpha=-lr)
        return loss

"""Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms") as a torch optimizer.

    opt = Lion(params, lr=1e-4, betas=(0.9, 0.99), weight_decay=0.0)

Update per parameter: c = β₁·m + (1 − β₁)·g;  θ ← θ·(1 − lr·λ) − lr·sign(c);
m ← β₂·m + (1 − β₂)·g.  Only one moment is stored (half of Adam's memory); typical learning
rates are 3–10× smaller than AdamW's.
"""

from __future__ import annotations

import torch


class Lion(torch.optim.Optimizer):
    def __init__(
        self,
        params,
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

"""The KL-penalty coefficient of RLHF-PPO: fixed, or adapted towards a target KL.

    from nlhf.train.kl_control import KLController
    ctl = KLController(init=0.05, target=6.0, horizon=10_000)   # target=None: fixed
    rewards = kl_penalized_rewards(scores, logprobs, ref_logprobs, mask, ctl.value)
    ctl.update(kl=mean_sequence_kl, samples=batch_size)       # after each rollout

The adaptive rule is Ziegler et al. (2019), "Fine-Tuning Language Models from Human
Preferences", section 2.2 (also TRL's ``AdaptiveKLController`` and trlX's):

    e = clip(KL / target − 1, −0.2, 0.2),    β ← β · (1 + e · n / horizon),

with KL the mean sequence KL(π‖μ) of the last rollout and n its number of samples, so β
moves by at most 20% per ``horizon`` samples.  ``state_dict`` / ``load_state_dict`` carry β
through a checkpoint.
"""

from __future__ import annotations

import math
from typing import Any

ERROR_CLIP = 0.2


def adaptive_kl_factor(kl: float, target: float, samples: int, horizon: int) -> float:
    """The multiplier 1 + clip(KL/target − 1, ±0.2)·samples/horizon of the adaptive rule."""
    error = min(max(kl / target - 1.0, -ERROR_CLIP), ERROR_CLIP)
    return 1.0 + error * samples / horizon


class KLController:
    """β of the per-token penalty −β·(log π − log μ); adaptive when ``target`` is given."""

    def __init__(self, init: float, target: float | None = None, horizon: int = 10_000) -> None:
        if init < 0 or not math.isfinite(init):
            raise ValueError(f"initial KL coefficient must be finite and ≥ 0, got {init}")
        if target is not None and target <= 0:
            raise ValueError(f"target KL must be > 0, got {target}")
        if horizon < 1:
            raise ValueError(f"KL horizon must be ≥ 1, got {horizon}")
        self.value = float(init)
        self.target = target
        self.horizon = int(horizon)

    @property
    def adaptive(self) -> bool:
        return self.target is not None

    def update(self, kl: float, samples: int) -> float:
        """Adapt β after a rollout of ``samples`` completions with mean sequence KL ``kl``."""
        if self.target is not None:
            self.value *= adaptive_kl_factor(kl, self.target, samples, self.horizon)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.value = float(state["value"])

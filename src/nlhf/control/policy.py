"""Acting policies: a categorical actor and a value critic on a game's feature vector.

    policy = ActingPolicy(obs_dim=4, n_actions=2)          # seeded by torch's global RNG
    logits, values = policy.logits(obs), policy.value(obs)
    logprobs, entropy = policy.evaluate(obs, actions)      # of taken actions, of π(· | s)
    policy.save("runs/x/policy"); same = ActingPolicy.load("runs/x/policy")
    trainer = Trainer(config, policy.trainable(), steps, batches)   # nlhf.train.core

1. actor and critic are separate MLPs (``hidden`` tanh layers, 64-64 by default) with
   orthogonal weights, gain √2 in the hidden layers, 0.01 on the actor's output and 1 on the
   critic's, zero biases (CleanRL's PPO initialization);
2. ``evaluate`` (:func:`evaluate_logits` for logits from elsewhere, e.g. a mixture) gives the
   log-probabilities of taken actions and the entropy that the trainers' losses read;
3. ``save`` writes ``model.safetensors`` + ``config.json`` into a folder atomically; ``load``
   reads them back; ``trainable()`` hands the policy to the training core.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from nlhf.errors import UserError
from nlhf.files import write_folder_atomically
from nlhf.train.core import Module

WEIGHTS, CONFIG = "model.safetensors", "config.json"


def _layer(inputs: int, outputs: int, gain: float) -> nn.Linear:
    layer = nn.Linear(inputs, outputs)
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.zeros_(layer.bias)
    return layer


def _mlp(obs_dim: int, hidden: list[int], outputs: int, last_gain: float) -> nn.Sequential:
    layers: list[nn.Module] = []
    width = obs_dim
    for size in hidden:
        layers += [_layer(width, size, math.sqrt(2.0)), nn.Tanh()]
        width = size
    layers.append(_layer(width, outputs, last_gain))
    return nn.Sequential(*layers)


def evaluate_logits(
    logits: torch.Tensor, actions: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(log π(a | s) of ``actions`` [...], entropy of π(· | s) [...]) for π = softmax(logits)."""
    logp_all = torch.log_softmax(logits, -1)
    logprobs = logp_all.gather(-1, actions[..., None]).squeeze(-1)
    return logprobs, -(logp_all.exp() * logp_all).sum(-1)


class ActingPolicy(nn.Module):
    """π(a | s) = softmax(actor(s)) over ``n_actions``; V(s) = critic(s)."""

    def __init__(self, obs_dim: int, n_actions: int, hidden: list[int] | None = None) -> None:
        super().__init__()
        self.obs_dim, self.n_actions = obs_dim, n_actions
        self.hidden = list(hidden) if hidden is not None else [64, 64]
        self.actor = _mlp(obs_dim, self.hidden, n_actions, 0.01)
        self.critic = _mlp(obs_dim, self.hidden, 1, 1.0)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def logits(self, obs: torch.Tensor) -> torch.Tensor:
        """[..., obs_dim] → [..., n_actions] unnormalized log-probabilities."""
        return self.actor(obs)

    def value(self, obs: torch.Tensor) -> torch.Tensor:
        """[..., obs_dim] → [...] state values."""
        return self.critic(obs).squeeze(-1)

    def evaluate(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """[..., obs_dim] and [...] actions → (log π(a | s), entropy of π(· | s)), each [...]."""
        return evaluate_logits(self.logits(obs), actions)

    def config(self) -> dict:
        return {"obs_dim": self.obs_dim, "n_actions": self.n_actions, "hidden": self.hidden}

    def write(self, folder: str | Path) -> None:
        """Write the weights and the config into ``folder`` (not atomic: see :meth:`save`)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_file(state, str(folder / WEIGHTS))
        (folder / CONFIG).write_text(json.dumps(self.config(), indent=2) + "\n")

    def save(self, folder: str | Path) -> Path:
        """Write the policy to ``folder``: a temp folder beside it, renamed when complete."""
        return write_folder_atomically(self.write, folder)

    @classmethod
    def load(cls, folder: str | Path, device: str | torch.device = "cpu") -> ActingPolicy:
        folder = Path(folder)
        if not (folder / CONFIG).exists() or not (folder / WEIGHTS).exists():
            raise UserError(f"{folder}: not an acting policy folder (no {CONFIG}/{WEIGHTS})")
        policy = cls(**json.loads((folder / CONFIG).read_text()))
        policy.load_state_dict(load_file(str(folder / WEIGHTS)))
        return policy.to(device)

    def trainable(self, critic: bool = True) -> Module:
        """This policy for :class:`nlhf.train.core.Trainer`: the actor's weights, and the
        critic's unless ``critic=False`` (they are then frozen); the core saves it with
        :meth:`write` into its own atomic folder."""
        self.critic.requires_grad_(critic)
        return Module(self, save=self.write)

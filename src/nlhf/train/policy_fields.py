"""The options every policy trainer shares (which model, LoRA, weight dtype, sharding) and the
one function that loads the policy they describe.

    @dataclass
    class Config(PolicyFields):
        lr: float = option(1e-3, "learning rate")

    policy = load_policy(Config(policy="smollm2", lora_r=16, dtype="auto"))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from nlhf.assets import resolve_model
from nlhf.config import Checked, option
from nlhf.models import Policy, PolicyConfig
from nlhf.models.policy import LORA_ALPHA, LORA_TARGET_MODULES, resolve_dtype


@dataclass
class PolicyFields(Checked):
    """The policy to train and how: the model, its LoRA adapter, the base weights' dtype and
    whether it is sharded over the processes."""

    policy: str = option(
        "smollm2",
        "policy to train: smollm2 (the embedded SmolLM2-135M-Instruct), a folder or a hub name",
    )
    lora_r: int = option(16, "LoRA rank (0: train every weight, keep a frozen reference copy)")
    dtype: Literal["float32", "bfloat16", "auto"] = option(
        "float32",
        "dtype of the frozen base weights under LoRA (adapters, optimizer and log-probs stay "
        "float32); bfloat16 about halves a step on GPUs and on CPUs with bf16 units; auto: "
        "bfloat16 where the hardware has them",
    )
    reference_dtype: Literal["auto", "float32", "bfloat16"] = option(
        "auto",
        "dtype of the frozen reference copy under full fine-tuning (lora_r=0); auto: bfloat16 "
        "where the GPU or CPU multiplies it natively, else float32",
    )
    lora_alpha: float = option(LORA_ALPHA, "LoRA alpha (the update is scaled by alpha / r)")
    lora_target_modules: list[str] = option(
        list(LORA_TARGET_MODULES),
        "modules that get a LoRA adapter (all-linear, or names like q_proj)",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute each decoder layer in the backward pass instead of keeping its "
        "activations: less memory for one more forward per update",
    )
    fsdp: bool = option(
        False,
        "shard weights, gradients and optimizer state over the processes (PyTorch FSDP2: "
        "each decoder layer, then the whole model); needs several processes (accelerate launch)",
    )

    def check(self) -> None:
        self.at_least(0, "lora_r")
        if self.dtype != "float32" and self.lora_r == 0:
            raise ValueError(
                f"dtype={self.dtype} needs LoRA (lora_r > 0): full fine-tuning keeps "
                "float32 weights"
            )


def load_policy(config: PolicyFields):
    """The :class:`nlhf.models.Policy` that ``config`` describes (embedded names resolved)."""
    return Policy.load(
        PolicyConfig(
            model=resolve_model(config.policy, "policy"),
            dtype=resolve_dtype(config.dtype),
            lora_r=config.lora_r,
            reference_dtype=config.reference_dtype,
            lora_alpha=config.lora_alpha,
            lora_target_modules=list(config.lora_target_modules),
            gradient_checkpointing=config.gradient_checkpointing,
        )
    )

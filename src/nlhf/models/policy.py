"""The policy being aligned: a Hugging Face causal LM, its tokenizer and its reference.

    from nlhf.models import Policy, PolicyConfig
    policy = Policy(model, tokenizer, PolicyConfig(lora_r=16))     # or Policy.load(config)
    lp = policy.logprobs(prompt_ids, prompt_mask, completion_ids, completion_mask)  # (B, T)
    ref_lp = policy.reference_logprobs(prompt_ids, prompt_mask, completion_ids, completion_mask)
    ref_lp, ref_logits = policy.reference_logprobs_and_logits(prompt_ids, ...)   # one forward
    lp, kl = policy.logprobs_and_kl(prompt_ids, ..., ref_logits)   # (B, T), exact KL(π‖μ) (B,)
    policy.reference      # callable like a model, for nlhf.models.sample(..., reference=...)

The reference μ is what the KL terms and the Nash-MD mixture compare the policy with:

- with LoRA (``lora_r > 0``, or a model that already is a ``peft.PeftModel``) the reference
  is the same weights with the adapter switched off (:class:`~nlhf.models.lm.AdapterDisabled`):
  no second copy in memory, and the decode loop can run policy and reference rows in one
  forward pass; a magnet reset (:meth:`Policy.reset_reference`) copies the adapter into a
  frozen second adapter that the reference then runs;
- otherwise the reference is a frozen deep copy taken at construction (``requires_grad``
  False, eval mode), in ``reference_dtype``: ``auto`` keeps it in bfloat16 where the hardware
  multiplies bf16 natively (:func:`has_fast_bfloat16`), half the bytes each decoded token
  reads, at a log-prob error that tests/test_models_policy.py bounds; elsewhere in the
  policy's own dtype.

``gradient_checkpointing`` recomputes each decoder layer in the backward pass instead of
keeping its activations (:func:`checkpoint_activations`).

Log-probs are fp32, of the unmodified (temperature 1) model, with left-padded prompts and
``position_ids = clamp(cumsum(mask) − 1, 0)``; see :mod:`nlhf.models.logprobs`.
"""

from __future__ import annotations

import copy
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from nlhf.config import Checked, ConfigError, option
from nlhf.models.activations import fuse_gelu, lean_swiglu
from nlhf.models.lm import (
    DTYPES,
    AdapterDisabled,
    hf_model,
    is_peft_model,
    load_causal_lm,
    model_device,
)
from nlhf.models.logprobs import (
    completion_logprobs,
    completion_logprobs_and_kl,
    completion_logprobs_and_logits,
)
from nlhf.models.text import eos_token_ids, pad_token_id

LORA_ALPHA = 32.0
"""Default LoRA scaling numerator (the update is scaled by alpha / r)."""
LORA_TARGET_MODULES = ("all-linear",)
MAGNET = "magnet"
"""Name of the frozen adapter that holds a LoRA policy's reset reference."""
"""Default modules that get a LoRA adapter: every linear layer but the output head."""


def has_fast_bfloat16(device: str | None = None) -> bool:
    """Whether bfloat16 matrix products run natively on ``device`` (default: CUDA when
    available, else the CPU): a CUDA GPU that supports bf16, or a CPU with AVX-512 BF16 or
    AMX units.  Elsewhere bf16 is emulated and slower than float32.  ``NLHF_CPU_BF16=0`` in
    the environment says no for every CPU (so that ``auto`` means float32 on any machine, as
    the test suite sets it)."""
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda"):
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    if os.environ.get("NLHF_CPU_BF16") == "0":
        return False
    cpu = torch.backends.cpu
    capability = cpu.get_cpu_capability() if hasattr(cpu, "get_cpu_capability") else ""
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    native = any(getattr(torch.cpu, name, lambda: False)() for name in checks)
    return native and capability.startswith("AVX512")


def resolve_dtype(name: str) -> str:
    """``auto`` → ``bfloat16`` where :func:`has_fast_bfloat16`, else ``float32``; other names
    pass through."""
    if name == "auto":
        return "bfloat16" if has_fast_bfloat16() else "float32"
    return name


@dataclass
class PolicyConfig(Checked):
    """How to load the policy and whether to train it through a LoRA adapter."""

    model: str = option(
        "",
        "folder of a causal LM (a hub name works where the machine has access); "
        "empty when the model object is passed in code",
    )
    tokenizer: str = option("", "tokenizer folder or name; empty: the same as model")
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32", "dtype of the weights; log-probs are computed in float32 regardless"
    )
    lora_r: int = option(
        0, "LoRA rank; 0 trains every weight and keeps a frozen copy as the reference"
    )
    reference_dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto",
        "dtype of the frozen reference copy under full fine-tuning (lora_r=0); auto: bfloat16 "
        "where the GPU or CPU multiplies it natively, else the policy's dtype",
    )
    lora_alpha: float = option(
        LORA_ALPHA, "LoRA scaling numerator (the update is scaled by alpha / r)"
    )
    lora_dropout: float = option(0.0, "dropout on the LoRA path during training")
    lora_target_modules: list[str] = option(
        list(LORA_TARGET_MODULES),
        "module names that get an adapter (all-linear, or names such as q_proj,v_proj); "
        "empty: peft's default for the architecture",
    )
    disable_dropout: bool = option(
        True,
        "set every dropout of the model to 0, so training-time log-probs match the "
        "sampler's (standard for RL fine-tuning)",
    )
    gradient_checkpointing: bool = option(
        False,
        "recompute each decoder layer in the backward pass instead of keeping its "
        "activations: less memory for one more forward per update",
    )

    def check(self) -> None:
        self.at_least(0, "lora_r")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout must be in [0, 1), got {self.lora_dropout}")


def disable_dropout(model: nn.Module) -> None:
    """Set the probability of every ``nn.Dropout`` in ``model`` to 0."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0


def frozen_copy(model: nn.Module, dtype: torch.dtype | None = None) -> nn.Module:
    """A deep copy with ``requires_grad`` False everywhere, in eval mode; with ``dtype`` its
    floating-point parameters in that dtype, converted one by one (no full-precision copy of
    the whole model is made first).  Tied parameters stay tied."""
    memo: dict[int, Any] = {}
    for param in model.parameters():
        if id(param) not in memo and param.is_floating_point():
            value = param.detach().to(dtype or param.dtype, copy=True)
            memo[id(param)] = nn.Parameter(value, requires_grad=False)
    ref = copy.deepcopy(model, memo)
    ref.requires_grad_(False)
    return ref.eval()


def checkpoint_activations(model: Any) -> None:
    """Turn on transformers' activation checkpointing (non-reentrant) in every decoder layer
    of ``model`` (plain or peft) and put it in train mode, the only mode in which transformers
    checkpoints: each layer keeps its input, not its activations, and runs again in the
    backward pass.  A ``ConfigError`` for an architecture without it."""
    base = hf_model(model)
    if not getattr(base, "supports_gradient_checkpointing", False):
        raise ConfigError(
            f"gradient_checkpointing: {type(base).__name__} does not support activation "
            "checkpointing"
        )
    kwargs = {"use_reentrant": False}
    if hasattr(base, "activation_checkpointing_enable"):
        base.activation_checkpointing_enable(kwargs)
    else:  # transformers before the rename
        base.gradient_checkpointing_enable(kwargs)
    model.train()


def reference_dtype(
    name: str, policy: nn.Module, device: torch.device | None = None
) -> torch.dtype:
    """The frozen reference's dtype for ``PolicyConfig.reference_dtype`` ``name``, on
    ``device`` (default: where ``policy`` is)."""
    if name != "auto":
        return DTYPES[name]
    device = torch.device(device) if device is not None else model_device(policy)
    if has_fast_bfloat16(device.type):
        return torch.bfloat16
    return next(policy.parameters()).dtype


def add_lora(model: nn.Module, config: PolicyConfig) -> nn.Module:
    """Wrap ``model`` in a fresh LoRA adapter as ``config`` describes (a ``peft.PeftModel``)."""
    from peft import LoraConfig, get_peft_model  # noqa: PLC0415 - slow to import; LoRA only

    targets: list[str] | str | None = list(config.lora_target_modules) or None
    if targets == ["all-linear"]:
        targets = "all-linear"
    lora = LoraConfig(
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=targets,
        fan_in_fan_out=any(isinstance(m, Conv1D) for m in model.modules()),  # GPT-2 style
        task_type="CAUSAL_LM",
    )
    try:
        with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
            return get_peft_model(model, lora)
    except ValueError as exc:
        raise ConfigError(f"lora_target_modules={config.lora_target_modules}: {exc}") from None


class Policy:
    """A causal LM being trained, its tokenizer, and its reference (see the module docstring)."""

    def __init__(
        self, model: nn.Module, tokenizer: Any = None, config: PolicyConfig | None = None
    ) -> None:
        self.config = config or PolicyConfig()
        self.tokenizer = tokenizer
        if self.config.disable_dropout:
            disable_dropout(model)
        fuse_gelu(model)
        lean_swiglu(model)
        self._frozen_reference: nn.Module | None = None
        if is_peft_model(model):
            if self.config.lora_r:
                raise ConfigError(
                    "the model already carries a peft adapter; leave lora_r at 0 to use it as is"
                )
            self.model = model
        elif self.config.lora_r > 0:
            self.model = add_lora(model, self.config)
        else:
            self.model = model
            dtype = reference_dtype(self.config.reference_dtype, model)
            self._frozen_reference = frozen_copy(model, dtype)
        if self.config.gradient_checkpointing:
            checkpoint_activations(self.model)

    @classmethod
    def load(cls, config: PolicyConfig) -> Policy:
        """Load model and tokenizer from ``config.model`` / ``config.tokenizer``."""
        if not config.model:
            raise ConfigError("PolicyConfig.model is empty: give a model folder to load")
        model, tokenizer = load_causal_lm(
            config.model, config.dtype, tokenizer=[config.tokenizer or config.model]
        )
        return cls(model, tokenizer, config)

    # ----------------------------------------------------------------- the reference
    @property
    def is_lora(self) -> bool:
        return self._frozen_reference is None

    @property
    def reference(self) -> nn.Module | AdapterDisabled:
        """μ: the adapter-disabled view (LoRA; after a reset, the view running the frozen
        ``magnet`` adapter) or the frozen copy; callable like a model."""
        if self._frozen_reference is not None:
            return self._frozen_reference
        if MAGNET in getattr(self.model, "peft_config", {}):
            return AdapterDisabled(self.model, MAGNET)
        return AdapterDisabled(self.model)

    def reset_reference(self) -> None:
        """μ becomes the policy as it is now (MPO's and COMAL's magnet reset): the frozen
        copy takes the current weights, or under LoRA a frozen second adapter (``magnet``)
        takes the trained adapter's values, so μ is the base model plus that snapshot."""
        if self._frozen_reference is None:
            self.load_reference_state(self._adapter_values(self.model.active_adapter))
            return
        now = self.model.state_dict()
        with torch.no_grad():
            for name, value in self._frozen_reference.state_dict().items():
                value.copy_(now[name])

    def reference_state(self) -> dict[str, torch.Tensor]:
        """The reference's own weights, to checkpoint a reset one: the frozen copy's, the
        magnet adapter's under LoRA, {} when the reference is the base model itself."""
        if self._frozen_reference is None:
            if MAGNET not in getattr(self.model, "peft_config", {}):
                return {}
            return {k: v.clone() for k, v in self._adapter_values(MAGNET).items()}
        return {k: v.detach().clone() for k, v in self._frozen_reference.state_dict().items()}

    def load_reference_state(self, state: dict[str, torch.Tensor]) -> None:
        if not state:
            raise ConfigError("an empty reference state")
        if self._frozen_reference is not None:
            self._frozen_reference.load_state_dict(state)
            return
        active = self.model.active_adapter
        if MAGNET not in self.model.peft_config:
            self.model.add_adapter(MAGNET, copy.deepcopy(self.model.peft_config[active]))
            self.model.set_adapter(active)  # keeps the trained adapter active and trainable
        params = dict(self.model.named_parameters())
        with torch.no_grad():
            for key, value in state.items():
                target = params[key.replace(f".{active}.", f".{MAGNET}.")]
                target.copy_(value)
                target.requires_grad_(False)

    def _adapter_values(self, adapter: str) -> dict[str, torch.Tensor]:
        """The LoRA weights of ``adapter``, keyed by the trained adapter's parameter names."""
        active, tag = self.model.active_adapter, f".{adapter}."
        return {
            name.replace(tag, f".{active}."): p.detach()
            for name, p in self.model.named_parameters()
            if tag in name
        }

    # ----------------------------------------------------------------- log-probs
    def logprobs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-token fp32 log π of the completions (B, T), 0 where masked; differentiable."""
        return completion_logprobs(
            self.model, prompt_ids, prompt_mask, completion_ids, completion_mask
        )

    def logprobs_and_logits(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`logprobs` and the logits (B, T, V) they came from, both differentiable."""
        return completion_logprobs_and_logits(
            self.model, prompt_ids, prompt_mask, completion_ids, completion_mask
        )

    def logprobs_and_kl(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None,
        reference_logits: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`logprobs` and, from the same forward without gradient, each completion's
        exact KL(π‖μ) (B,) against ``reference_logits`` from
        :meth:`reference_logprobs_and_logits` of the same completions."""
        return completion_logprobs_and_kl(
            self.model, prompt_ids, prompt_mask, completion_ids, completion_mask, reference_logits
        )

    def sequence_logprobs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """log π of each whole completion (B,): the masked sum of :meth:`logprobs`."""
        return self.logprobs(prompt_ids, prompt_mask, completion_ids, completion_mask).sum(-1)

    @torch.no_grad()
    def reference_logprobs(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Per-token fp32 log μ of the completions (B, T), 0 where masked; no gradient."""
        return completion_logprobs(
            self.reference, prompt_ids, prompt_mask, completion_ids, completion_mask
        )

    @torch.no_grad()
    def reference_logprobs_and_logits(
        self,
        prompt_ids: torch.Tensor,
        prompt_mask: torch.Tensor,
        completion_ids: torch.Tensor,
        completion_mask: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`reference_logprobs` and the reference's logits (B, T, V) they came from, one
        forward: what :meth:`logprobs_and_kl` takes the exact KL against."""
        return completion_logprobs_and_logits(
            self.reference, prompt_ids, prompt_mask, completion_ids, completion_mask
        )

    # ----------------------------------------------------------------- bookkeeping
    @property
    def device(self) -> torch.device:
        return model_device(self.model)

    def to(self, device: torch.device | str) -> Policy:
        self.model.to(device)
        if self._frozen_reference is not None:
            dtype = reference_dtype(self.config.reference_dtype, self.model, device)
            self._frozen_reference.to(device)
            with torch.no_grad():  # parameters only: buffers (rotary frequencies) keep theirs
                for param in self._frozen_reference.parameters():
                    param.data = param.data.to(dtype)
        return self

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters an optimizer should update (only the adapter's under LoRA)."""
        return [p for p in self.model.parameters() if p.requires_grad]

    @property
    def eos_token_ids(self) -> list[int]:
        """Token ids that end a completion (tokenizer first, then the model's configs)."""
        return eos_token_ids(self.model, self.tokenizer)

    @property
    def pad_token_id(self) -> int:
        return pad_token_id(self.model, self.tokenizer)

    def save(self, folder: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> None:
        """Save the model (the adapter only, under LoRA) and the tokenizer into ``folder``;
        ``state_dict`` replaces the model's own (a sharded model's gathered weights)."""
        folder = Path(folder)
        if is_peft_model(self.model) and MAGNET in self.model.peft_config:
            active = [self.model.active_adapter]  # the magnet is a training-time reference
            self.model.save_pretrained(folder, state_dict=state_dict, selected_adapters=active)
        else:
            self.model.save_pretrained(folder, state_dict=state_dict)
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(folder)

"""Sharding a policy over the processes with PyTorch FSDP2 (the offline trainers' ``fsdp=true``).

    accelerate launch --multi_gpu --num_processes 4 -m nlhf.cli train sft ... fsdp=true

Without sharding every process holds the whole model, its gradients and its optimizer state
(:mod:`nlhf.train.distributed`).  With it each process holds 1/N of them: every decoder layer
(the classes a transformers model lists in ``_no_split_modules``) and then the whole model go
through ``torch.distributed.fsdp.fully_shard``, which gathers a layer's weights just before
its forward or backward and frees them after, and reduce-scatters the gradients.  A frozen
reference copy (full fine-tuning) is sharded the same way; under LoRA the reference is the
same sharded model with its adapter off.

The trainers' loss weighting stays as without sharding: each process scales its loss by its
share of the global batch and the gradients are *summed* over the processes, so the
reductions here sum instead of averaging.  Every process must run the same sequence of
forward and backward passes (each one is a collective), so a process whose share of a batch
is empty runs one example with weight 0.

The helpers below that read or write weights are collectives too: every process calls them,
and the main process writes what they return.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from nlhf.models.lm import hf_model


def layer_modules(model: nn.Module) -> list[nn.Module]:
    """The decoder layers of ``model`` (plain or under peft), found by the class names its
    transformers class lists in ``_no_split_modules``."""
    names = set(getattr(hf_model(model), "_no_split_modules", None) or [])
    layers = [m for m in model.modules() if type(m).__name__ in names]
    if not layers:
        raise ValueError(
            f"{type(hf_model(model)).__name__} names no decoder-layer class "
            "(_no_split_modules), so fsdp=true cannot tell what to shard"
        )
    return layers


def shard_model(model: nn.Module) -> None:
    """``fully_shard`` each decoder layer, then the whole model, with summed gradients."""
    from torch.distributed.fsdp import FSDPModule, fully_shard

    for layer in layer_modules(model):
        fully_shard(layer)
    fully_shard(model)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)  # gloo has no pre-scaled sum


def shard_policy(policy: Any) -> None:
    """Shard the policy's model and, under full fine-tuning, its frozen reference copy."""
    shard_model(policy.model)
    if not policy.is_lora:
        shard_model(policy.reference)


def whole(value: torch.Tensor) -> torch.Tensor:
    """The full tensor behind a sharded one (a collective); any other tensor as it is."""
    from torch.distributed.tensor import DTensor

    return value.full_tensor() if isinstance(value, DTensor) else value


def trainable_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every trainable weight, whole and on the CPU, by parameter name."""
    return {n: whole(p.detach()).cpu() for n, p in model.named_parameters() if p.requires_grad}


@torch.no_grad()
def load_trainable_state(model: nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Copy whole weights (as :func:`trainable_state` returns them) into ``model``."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    params = dict(model.named_parameters())
    for name, value in values.items():
        param = params[name]
        if isinstance(param, DTensor):
            value = distribute_tensor(value.to(param.dtype), param.device_mesh, param.placements)
        param.copy_(value)


def optimizer_state(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state, whole, keyed by parameter name (the main process's copy)."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_optimizer_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Give each process its shard of a state written by :func:`optimizer_state`."""
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_optimizer_state_dict,
    )

    options = StateDictOptions(full_state_dict=True)
    set_optimizer_state_dict(model, optimizer, state, options=options)


def model_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The whole model's state dict on the CPU, for ``save_pretrained(state_dict=...)``.

    A tied weight (GPT-2's output layer is its input embedding) is kept under its first name
    only, as ``save_pretrained`` does for a model's own state dict: the gathered copies no
    longer share memory, so it could not tell them apart.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if first.setdefault(id(param), name) != name:
            state.pop(name, None)
    return state

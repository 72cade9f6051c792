"""Sharding a policy over the processes with PyTorch FSDP2 (every policy trainer's ``fsdp=true``).

    accelerate launch --multi_gpu --num_processes 4 -m nlhf.cli train nash-md ... fsdp=true

1. every decoder layer (the classes a transformers model lists in ``_no_split_modules``), then
   the whole model, goes through ``fully_shard``; a frozen reference copy too;
2. gradients are *summed* over the processes, as without sharding (each process weights its
   loss by its share of the global batch);
3. checkpoints keep whole tensors, so a run resumes under any number of processes.

Every helper here that reads or writes weights is a collective: every process calls it, the
main process writes what it returns.  The rules this imposes on trainers: ``docs/distributed.md``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.distributed.tensor import DTensor, distribute_tensor

from nlhf.config import ConfigError
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
    for layer in layer_modules(model):
        fully_shard(layer)
    # The root too gives its weights back after each forward (FSDP keeps them gathered by
    # default): between a sampling forward and the next one the parameters stay sharded,
    # which the weight swaps of Nash-EMA and Nash-MP rely on.
    fully_shard(model, reshard_after_forward=True)
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
    return value.full_tensor() if isinstance(value, DTensor) else value


def whole_tensors(values: dict[str, torch.Tensor], keep: bool = True) -> dict[str, torch.Tensor]:
    """Every tensor of ``values`` whole and on the CPU (a collective when any is sharded).

    ``keep=False`` (the processes that write nothing) takes part in the gathers but keeps
    nothing, so that only one process ever holds a whole copy in host memory.
    """
    out = {}
    for name, value in values.items():
        value = whole(value.detach())
        if keep:
            out[name] = value.cpu()
    return out


def like(value: torch.Tensor, param: torch.Tensor) -> torch.Tensor:
    """A whole tensor on ``param``'s device, sharded as ``param`` is (a collective when it
    is sharded)."""
    value = value.to(param.device)
    if isinstance(param, DTensor):
        value = distribute_tensor(value, param.device_mesh, param.placements)
    return value


def like_parameters(model: nn.Module, values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Whole tensors (by parameter name) on their parameters' devices, and sharded as those
    parameters are (a collective when the model is sharded)."""
    params = dict(model.named_parameters())
    return {
        name: value if isinstance(value, DTensor) else like(value, params[name])
        for name, value in values.items()
    }


def trainable_state(model: nn.Module, keep: bool = True) -> dict[str, torch.Tensor]:
    """Every trainable weight, whole and on the CPU, by parameter name (``keep``: as in
    :func:`whole_tensors`)."""
    trainable = {n: p for n, p in model.named_parameters() if p.requires_grad}
    return whole_tensors(trainable, keep)


@torch.no_grad()
def load_trainable_state(model: nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Copy whole weights (as :func:`trainable_state` returns them) into ``model``."""
    params = dict(model.named_parameters())
    for name, value in like_parameters(model, values).items():
        params[name].copy_(value.to(params[name].dtype))


def optimizer_state(optimizer: torch.optim.Optimizer, keep: bool = True) -> dict[str, Any]:
    """``optimizer.state_dict()`` with every sharded state tensor made whole, on the CPU: the
    same layout with or without sharding, so either kind of run can resume it (``keep``: as
    in :func:`whole_tensors`; False returns {})."""
    state = optimizer.state_dict()
    entries = {
        index: whole_tensors({k: v for k, v in entry.items() if torch.is_tensor(v)}, keep)
        | {k: v for k, v in entry.items() if not torch.is_tensor(v)}
        for index, entry in state["state"].items()
    }
    return {**state, "state": entries} if keep else {}


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
    """Load a state written by :func:`optimizer_state`.  The state tensors of a sharded
    parameter (those shaped like it) are sharded one at a time before loading, so no process
    holds the whole optimizer state on its device."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    entries = {}
    for index, entry in state["state"].items():
        param = params[int(index)]
        if isinstance(param, DTensor):
            entry = {
                key: like(value.to(param.dtype), param)
                if torch.is_tensor(value) and value.shape == param.shape
                else value
                for key, value in entry.items()
            }
        entries[index] = entry
    optimizer.load_state_dict({**state, "state": entries})


def saved_state(policy: Any, main: bool) -> dict[str, torch.Tensor] | None:
    """What ``policy.save`` needs of a sharded policy, gathered (a collective): under LoRA the
    adapter's weights only, else the whole model's state dict; the main process gets it.

    A tied weight (GPT-2's output layer is its input embedding) is kept under its first name
    only, as ``save_pretrained`` does for a model's own state dict: the gathered copies no
    longer share memory, so it could not tell them apart.
    """
    if policy.is_lora:
        return trainable_state(policy.model, keep=main)

    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(policy.model, options=options)
    first: dict[int, str] = {}
    for name, param in policy.model.named_parameters(remove_duplicate=False):
        if first.setdefault(id(param), name) != name:
            state.pop(name, None)
    return state


# --------------------------------------------------------------------------- the trainers' use


def check_processes(fsdp: bool, processes: int) -> None:
    """Refuse ``fsdp=true`` in a run of one process (there is nothing to shard over)."""
    if fsdp and processes < 2:
        raise ConfigError(
            "fsdp=true shards the model over several processes, and this run has one: start "
            "it with accelerate launch --multi_gpu --num_processes N -m nlhf.cli train ..."
        )


def checkpoint_weights(
    model: nn.Module, optimizer: torch.optim.Optimizer, fsdp: bool, main: bool
) -> dict[str, Any]:
    """What a checkpoint keeps of the training weights: the trainable weights and the
    optimizer's state, whole, whether the run is sharded or not.  Sharded: a collective,
    every process calls it; otherwise only the main process needs to.  Only the main
    process gets the tensors (the others take part in the gathers and get empty dicts)."""
    if not (fsdp or main):
        return {}
    return {
        "trainable": trainable_state(model, keep=main),
        "optimizer": optimizer_state(optimizer, keep=main),
    }


def restore_weights(model: nn.Module, optimizer: torch.optim.Optimizer, state: dict) -> None:
    """Load what :func:`checkpoint_weights` kept (every process calls it)."""
    load_trainable_state(model, state["trainable"])
    load_optimizer_state(optimizer, state["optimizer"])


def replicated(params: list[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """The parameters FSDP does not shard (a head kept beside the policy): their gradients
    are summed over the processes by the trainer, the sharded ones' by FSDP."""
    return [p for p in params if not isinstance(p, DTensor)]

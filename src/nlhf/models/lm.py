"""How to load a Hugging Face causal LM and call it, plain or wrapped by peft, in one way.

- :func:`load_causal_lm`: model (eval mode, weights in process memory) and tokenizer (left
  padding, a pad token) from a folder; :func:`load_tokenizer` alone, first folder that has one.
- :class:`AdapterDisabled`: the reference of a LoRA policy, i.e. the same weights with the
  adapter switched off (:func:`adapters_off`).  It is callable like a model and owns no
  parameters.  :func:`eval_mode`: a model tree in eval mode for a block, flags put back.
- :class:`Caller`: one forward pass with left-padding-aware ``position_ids``, an optional KV
  cache, ``logits_to_keep`` when the model supports it, and peft's per-row adapter selection
  (``adapter_names``; :data:`BASE_ADAPTER` means "adapter off" for that row); ``states``
  runs the :func:`body` under the head alone.
- :func:`drops_cache`: whether a forward cannot continue a KV cache (activation checkpointing
  in train mode).
- :func:`as_model`: accept a peft model, a plain ``PreTrainedModel`` or an
  :class:`AdapterDisabled` wherever a model is expected, with a clear error otherwise.

    model, tokenizer = load_causal_lm("runs/sft/model", dtype="bfloat16")
    caller = Caller(model)
    logits = caller(input_ids, attention_mask, position_ids, cache=caller.new_cache(),
                    logits_to_keep=1)
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import cache as memoize
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from nlhf.models.errors import ModelError, loading
from nlhf.models.kv_cache import new_cache
from nlhf.models.memory import into_memory

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

BASE_ADAPTER = "__base__"
"""peft's reserved adapter name for "no adapter" in ``adapter_names``."""


def is_peft_model(model: Any) -> bool:
    """True for a ``peft.PeftModel``.

    Never imports peft: no object can be a PeftModel before peft is imported, and importing
    it pulls in torch's compiler stack (~140 MB of memory and over a second), which a full
    fine-tuning run does not need.
    """
    peft_model = sys.modules.get("peft.peft_model")
    return peft_model is not None and isinstance(model, peft_model.PeftModel)


def is_sharded(model: Any) -> bool:
    """True for a model (or the peft model under an adapter-disabled view) sharded with
    FSDP2 over the processes of an initialized process group."""
    if model is None or "torch.distributed.fsdp" not in sys.modules:
        return False
    from torch.distributed.fsdp import FSDPModule  # noqa: PLC0415 - only once sharding loaded it

    if isinstance(model, AdapterDisabled):
        model = model.peft_model
    return isinstance(model, FSDPModule)


_PLAIN_TRAIN = (nn.Module.train, PreTrainedModel.train)
"""``train()`` methods that only set flags: :func:`eval_mode` sets the flags itself."""


@contextmanager
def eval_mode(*roots: nn.Module) -> Iterator[None]:
    """Every module under ``roots`` in eval mode for the block, then each one's own training
    flag back as found.  The flags are set directly: ``train()`` recurses through every
    submodule's Python attribute machinery, about 25 ms per switch on a LoRA SmolLM2 (2,500
    modules), which decoding a few tokens per step pays twice.  A tree with a ``train()``
    of its own beyond transformers' (which only switches hub kernels) goes through it."""
    found = [(m, m.training) for root in roots for m in root.modules()]
    if any(type(m).train not in _PLAIN_TRAIN for m, _ in found):
        flags = [(root, root.training) for root in roots]
        for root in roots:
            root.eval()
        try:
            yield
        finally:
            for root, was in flags:
                root.train(was)
            for m, was in found:
                m.training = was
        return
    for m, was in found:
        if was:
            m.training = False
    try:
        yield
    finally:
        for m, was in found:
            if was:
                m.training = True


@contextmanager
def adapters_off(peft_model: nn.Module) -> Iterator[None]:
    """peft's ``disable_adapter()`` at the cost of one walk over the modules: every adapter
    layer's switch is turned off for the block and put back as it was found.  peft's own
    context also checks every layer's status and resets which adapter parameters require
    gradients, which costs about as much as a decode forward of a small model each call;
    it still runs wherever a layer is merged or a wrapper of modules to save is present."""
    from peft.tuners.tuners_utils import BaseTunerLayer  # noqa: PLC0415 - only peft models
    from peft.utils.other import AuxiliaryTrainingWrapper  # noqa: PLC0415

    modules = list(peft_model.modules())
    layers = [m for m in modules if isinstance(m, BaseTunerLayer)]
    if any(m.merged for m in layers) or any(
        isinstance(m, AuxiliaryTrainingWrapper) for m in modules
    ):
        with peft_model.disable_adapter():
            yield
        return
    found = [m._disable_adapters for m in layers]
    for m in layers:
        m._disable_adapters = True
    try:
        yield
    finally:
        for m, was in zip(layers, found, strict=True):
            m._disable_adapters = was


class AdapterDisabled:
    """The model under a peft adapter with the adapter switched off: a reference for free.

    Calls run the peft model inside :func:`adapters_off`; nothing is copied, so the view
    always reflects the current base weights and holds no parameters of its own.  With
    ``adapter`` the view runs that (frozen) adapter instead of none, per row through peft's
    ``adapter_names`` in eval mode: a reference that is the base plus a snapshot of the
    trained adapter (the magnet reset of a LoRA policy).
    """

    def __init__(self, peft_model: nn.Module, adapter: str = BASE_ADAPTER) -> None:
        if not is_peft_model(peft_model):
            raise TypeError(f"AdapterDisabled needs a peft model, got {type(peft_model).__name__}")
        self.peft_model, self.adapter = peft_model, adapter

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.adapter == BASE_ADAPTER:
            with adapters_off(self.peft_model):
                return self.peft_model(*args, **kwargs)
        rows = kwargs.get("input_ids", args[0] if args else None)
        if rows is None:
            rows = kwargs["inputs_embeds"]
        with eval_mode(self.peft_model):  # peft takes adapter_names in eval mode only
            return self.peft_model(
                *args, **kwargs, adapter_names=[self.adapter] * int(rows.shape[0])
            )

    @property
    def config(self) -> Any:
        return self.peft_model.config

    @property
    def device(self) -> torch.device:
        return next(self.peft_model.parameters()).device

    def __repr__(self) -> str:
        named = "" if self.adapter == BASE_ADAPTER else f", adapter={self.adapter!r}"
        return f"AdapterDisabled({type(self.peft_model.get_base_model()).__name__}{named})"


def as_model(model: Any, role: str) -> Any:
    """``model`` itself when it is callable as a causal LM (a module or an adapter-disabled
    view); a ``TypeError`` naming ``role`` otherwise."""
    if isinstance(model, AdapterDisabled | nn.Module):
        return model
    raise TypeError(
        f"{role}: expected a Hugging Face causal LM, a peft model or an adapter-disabled view "
        f"(policy.model, policy.reference), got {type(model).__name__}"
    )


def hf_model(model: Any) -> nn.Module:
    """The transformers model that finally runs (under peft wrappers and views)."""
    if isinstance(model, AdapterDisabled):
        model = model.peft_model
    if is_peft_model(model):
        model = model.get_base_model()
    return model


def drops_cache(model: Any) -> bool:
    """True when transformers would run ``model``'s layers without the KV cache a forward is
    given: activation checkpointing in train mode, whose replayed layers cannot write a cache
    twice (GPT-2 drops it then even without autograd), so a forward of such a model cannot
    continue a cache an earlier forward filled."""
    base = hf_model(model)
    return base.training and any(
        getattr(module, "gradient_checkpointing", False) is True for module in base.modules()
    )


def body(model: Any) -> nn.Module:
    """The transformer under the LM head (``.model`` of Llama, ``.transformer`` of GPT-2),
    with its adapters, if any: called alone it gives the last hidden states, no logits."""
    base = hf_model(model)
    return getattr(base, base.base_model_prefix)


@memoize
def _forward_parameters(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.forward).parameters)


def model_device(model: Any) -> torch.device:
    if isinstance(model, AdapterDisabled):
        return model.device
    for param in model.parameters():
        return param.device
    return torch.device("cpu")


class Caller:
    """One forward pass of a causal LM with the keyword names its transformers version expects."""

    def __init__(self, model: Any) -> None:
        self.model = model
        base = hf_model(model)
        params = _forward_parameters(type(base))
        self.cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self.takes_logits_to_keep = "logits_to_keep" in params
        self.config = base.config

    def states(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
        keep: int = 0,
    ) -> torch.Tensor:
        """The last layer's hidden states (rows, positions, d) of the last ``keep`` positions
        (0: all) from the model's :func:`body` alone: the inputs of its head, no logits."""
        kwargs = self._inputs(input_ids, attention_mask, position_ids, cache)
        states = body(self.model)(**kwargs).last_hidden_state
        return states[:, -keep:] if keep else states

    def _inputs(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any,
    ) -> dict[str, Any]:
        """The keyword arguments of one forward, the cache under its version's name."""
        kwargs: dict[str, Any] = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "position_ids": position_ids,
            "use_cache": cache is not None,
        }
        if cache is not None:
            kwargs[self.cache_kwarg] = cache
        return kwargs

    def new_cache(self, capacity: int | None = None) -> Any:
        """An empty KV cache; with ``capacity``, preallocated for that many positions."""
        return new_cache(self.config, capacity)

    def __call__(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
        logits_to_keep: int = 0,
        adapter_names: list[str] | None = None,
    ) -> torch.Tensor:
        """Logits (rows, positions, V) of the last ``logits_to_keep`` positions (0: all)."""
        return self.forward(
            input_ids, attention_mask, position_ids, cache, logits_to_keep, adapter_names
        )[0]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        cache: Any = None,
        logits_to_keep: int = 0,
        adapter_names: list[str] | None = None,
        hidden: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The logits of :meth:`__call__` and, with ``hidden``, the last layer's hidden states
        (rows, positions, d) at the same positions (None without)."""
        kwargs = self._inputs(input_ids, attention_mask, position_ids, cache)
        if hidden:
            kwargs["output_hidden_states"] = True
        if logits_to_keep and self.takes_logits_to_keep:
            # As positions (a tensor), not a count: transformers then gathers a contiguous
            # copy of those hidden states, and the LM head is one matrix product.  A count
            # slices a strided view, which torch turns into a batched product over a copy
            # of the head expanded to every row, a large extra copy at every prefill.
            length = input_ids.shape[1]
            kwargs["logits_to_keep"] = (
                logits_to_keep  # a decode step: the slice is the whole, contiguous tensor
                if length <= logits_to_keep
                else torch.arange(length - logits_to_keep, length, device=input_ids.device)
            )
        if adapter_names is not None:
            kwargs["adapter_names"] = adapter_names
        out = self.model(**kwargs)
        logits = out.logits
        states = out.hidden_states[-1] if hidden else None
        if logits_to_keep:
            logits = logits[:, -logits_to_keep:]
            states = None if states is None else states[:, -logits_to_keep:]
        return logits, states


# --------------------------------------------------------------------------- loading


def load_tokenizer(*folders: str) -> Any:
    """The tokenizer of the first of ``folders`` (folders or hub names) that has one, with
    left padding and a pad token (EOS when it defines none).  A folder without tokenizer files
    is passed over, so an adapter folder can come before its base model's."""
    errors = []
    for folder in folders:
        if os.path.isdir(folder) and not any((Path(folder) / f).exists() for f in TOKENIZER_FILES):
            errors.append(f"{folder}: no tokenizer files")
            continue
        try:
            tokenizer = AutoTokenizer.from_pretrained(folder)
        except (OSError, ValueError) as exc:
            errors.append(f"{folder}: {exc}")
            continue
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenizer.padding_side = "left"
        return tokenizer
    raise ModelError(f"cannot load a tokenizer: {'; '.join(errors) or 'no folder given'}")


def load_causal_lm(
    path: str, dtype: str = "float32", tokenizer: Sequence[str] | None = None
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: the causal LM at ``path`` (a folder or a hub name) in eval
    mode with ``dtype`` weights held in process memory, and :func:`load_tokenizer` of the
    folders ``tokenizer`` (default: ``path`` itself)."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    with loading(path, "a causal LM"):
        model = AutoModelForCausalLM.from_pretrained(path, dtype=DTYPES[dtype])
    model = into_memory(model).eval()
    return model, load_tokenizer(*(tokenizer if tokenizer is not None else [path]))

"""Keep loaded weights in process memory rather than memory-mapped from their files.

``from_pretrained`` may hand back tensors that are views of the memory-mapped safetensors
file.  Those pages belong to the page cache, and the kernel may drop them whenever memory is
reclaimed (under memory pressure, or proactively, as DAMON-based reclaim does on some
virtual machines); every forward pass then reads the weights back from disk, and on such a
machine a forward can become many times slower.  Copying the weights once after loading, a
cost small next to one forward, makes them ordinary process memory.

    from nlhf.models.memory import into_memory
    model = into_memory(AutoModelForCausalLM.from_pretrained(path))
"""

from __future__ import annotations

from itertools import chain
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


def into_memory(model: M) -> M:
    """Give every parameter and buffer of ``model`` its own copy of its data (in place;
    tied weights stay tied, since a shared parameter is one object)."""
    with torch.no_grad():
        for tensor in chain(model.parameters(), model.buffers()):
            tensor.data = tensor.data.clone()
    return model

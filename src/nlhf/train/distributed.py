"""Data parallelism for the trainers: one process per device, each with a share of every batch.

    from nlhf.train.distributed import Processes
    procs = Processes()                      # wraps accelerate.Accelerator (one process: no-op)
    mine = procs.share(global_rows)          # this process's contiguous share
    ...  each process backpropagates  loss × (its share of the global batch)  ...
    procs.sync_gradients(params)             # all-reduce SUM: the global-batch gradient
    metrics = procs.mean_metrics(metrics)    # every process gets the global averages

Nothing wraps the model: every process keeps a whole copy (or a shard, :mod:`nlhf.train.sharding`)
and the summed gradients give every process the same optimizer step.  With a single process
every method returns its input untouched.  Launch commands and semantics: ``docs/distributed.md``.
"""

from __future__ import annotations

import atexit
import gc
import os
import time
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import torch
import torch.distributed as dist
from accelerate import Accelerator, utils
from accelerate.utils import gather_object

from nlhf import losses
from nlhf.train.sharding import replicated

T = TypeVar("T")


def spawned_without_accelerator() -> bool:
    """True in a process started by torchrun (``accelerate launch --multi_gpu``) on a machine
    with no GPU or other accelerator: accelerate then needs ``cpu=True`` to form a gloo group
    (``accelerate launch --cpu`` itself starts a single process)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.cuda.is_available():
        return False

    checks = ("is_npu_available", "is_xpu_available", "is_mlu_available", "is_musa_available")
    return not any(getattr(utils, name, lambda: False)() for name in checks)


def import_group_defaults() -> None:
    """Import the torch module that reads the default group at import time, before it exists.

    ``torch.distributed.nn.functional`` (imported by ``torch._dynamo``, which transformers
    imports when it builds a model) takes ``group.WORLD`` as the default argument of ten
    functions.  Imported after the group is formed, those defaults keep the group alive after
    :func:`leave_group_at_exit` destroys it.  Imported before, the defaults are ``None``."""
    import torch.distributed.nn.functional  # noqa: F401, PLC0415 - its import time is the point


@cache
def leave_group_at_exit() -> Callable[[], None]:
    """Destroy the process group when the interpreter exits (registered once); returns the
    exit hook.

    A finished process can abort at interpreter teardown (SIGABRT, "terminate called without
    an active exception") when a gloo worker thread frees the tensors of the last collective
    then: that needs the GIL, which a finalizing interpreter no longer hands out.  The hook
    runs while the interpreter is alive.  Destroying the group joins its worker threads when
    nothing else owns it (reference cycles are collected first; see
    :func:`import_group_defaults`).  Owners can remain: a sharded model's device mesh sits in
    DTensor's caches of sharding plans.  So the hook then releases the GIL for a moment, in
    which the idle workers finish freeing what they hold."""

    def leave() -> None:
        if dist.is_available() and dist.is_initialized():
            gc.collect()
            dist.destroy_process_group()
            time.sleep(0.2)

    atexit.register(leave)
    return leave


class Processes:
    """This process's place in the group (a thin layer over ``accelerate.Accelerator``)."""

    def __init__(self, accelerator: Any = None) -> None:
        if accelerator is None:
            import_group_defaults()
            accelerator = Accelerator(cpu=spawned_without_accelerator())
        self.accelerator = accelerator
        self.count = accelerator.num_processes
        self.index = accelerator.process_index
        self.is_main = accelerator.is_main_process
        self.device = accelerator.device
        if self.count > 1:
            leave_group_at_exit()

    @property
    def many(self) -> bool:
        return self.count > 1

    # ------------------------------------------------------------------ data
    def share(self, items: list[T]) -> list[T]:
        """This process's contiguous share of ``items`` (whose length the count divides)."""
        if not self.many:
            return items
        if len(items) % self.count:
            raise ValueError(f"{len(items)} rows do not split evenly over {self.count} processes")
        size = len(items) // self.count
        return items[self.index * size : (self.index + 1) * size]

    def split(self, items: list[T]) -> list[T]:
        """This process's contiguous share of ``items`` when the count need not divide their
        length: the first ``len % count`` processes take one more (a share may be empty)."""
        if not self.many:
            return items
        size, extra = divmod(len(items), self.count)
        start = self.index * size + min(self.index, extra)
        return items[start : start + size + (self.index < extra)]

    # ------------------------------------------------------------------ collectives
    def objects(self, values: list[Any]) -> list[Any]:
        """Every process's list of picklable ``values``, concatenated in process order."""
        if not self.many:
            return values

        return gather_object(values)

    def sum(self, values: torch.Tensor) -> torch.Tensor:
        """Element-wise sum over the processes (every process gets the result)."""
        if not self.many:
            return values
        return self.accelerator.reduce(values, reduction="sum")

    def gather(self, rows: torch.Tensor) -> torch.Tensor:
        """The processes' tensors concatenated along dim 0, in process order (equal shapes)."""
        if not self.many:
            return rows
        return self.accelerator.gather(rows.contiguous())

    def _reduce_metrics(self, metrics: dict[str, float], divide: bool) -> dict[str, float]:
        if not self.many or not metrics:
            return metrics
        keys = sorted(metrics)
        values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64)
        total = self.sum(values.to(self.device)).cpu()
        if divide:
            total = total / self.count
        return {k: float(v) for k, v in zip(keys, total, strict=True)}

    def mean_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each value averaged over the processes (every process must pass the same keys)."""
        return self._reduce_metrics(metrics, divide=True)

    def sum_metrics(self, metrics: dict[str, float]) -> dict[str, float]:
        """Each value summed over the processes (for values already weighted by share)."""
        return self._reduce_metrics(metrics, divide=False)

    def agree(self, bad: str | None) -> str | None:
        """The first process's non-finite quantity if any process found one, else None.

        Every process must call this at the same point, so that all of them stop (or skip
        the update) together instead of some waiting forever in the next collective.
        """
        if not self.many:
            return bad
        flag = torch.tensor([0.0 if bad is None else 1.0], device=self.device)
        if float(self.sum(flag)) == 0:
            return None

        names = gather_object([bad])
        return next(name for name in names if name is not None)

    @torch.no_grad()
    def sync_gradients(self, params: list[torch.nn.Parameter]) -> None:
        """Sum every parameter's gradient over the processes (a missing one counts as 0)."""
        if not self.many:
            return
        by_dtype: dict[torch.dtype, list[torch.nn.Parameter]] = {}
        for p in params:
            by_dtype.setdefault(p.dtype, []).append(p)
        for group in by_dtype.values():
            flat = torch.cat(
                [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in group]
            )
            flat = self.accelerator.reduce(flat, reduction="sum")
            offset = 0
            for p in group:
                n = p.numel()
                p.grad = flat[offset : offset + n].view_as(p)
                offset += n

    @torch.no_grad()
    def broadcast_parameters(self, params: list[torch.nn.Parameter]) -> None:
        """Copy the main process's values of ``params`` to every process (sharded ones are
        skipped: they were broadcast before sharding, :mod:`nlhf.train.sharding`)."""
        if not self.many:
            return

        for p in replicated(params):
            dist.broadcast(p.data, src=0)

    def barrier(self) -> None:
        if self.many:
            self.accelerator.wait_for_everyone()


# --------------------------------------------------------------------------- global statistics


def masked_mean(procs: Processes, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """:func:`nlhf.losses.masked_mean` over the masked-in entries of every process."""
    if not procs.many:
        return losses.masked_mean(x, mask)
    m = mask.to(x.dtype)
    total = procs.sum(torch.stack([(x * m).sum(), m.sum()]))
    return total[0] / total[1].clamp(min=1.0)


def masked_whiten(
    procs: Processes, x: torch.Tensor, mask: torch.Tensor, shift_mean: bool = True
) -> torch.Tensor:
    """:func:`nlhf.losses.masked_whiten` with the mean and variance of every process's rows."""
    if not procs.many:
        return losses.masked_whiten(x, mask, shift_mean)
    mean = masked_mean(procs, x, mask)
    var = masked_mean(procs, (x - mean) ** 2, mask)
    whitened = (x - mean) * torch.rsqrt(var + 1e-8)
    if not shift_mean:
        whitened = whitened + mean
    return whitened * mask.to(x.dtype)

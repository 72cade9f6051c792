"""How fast the machine was when a run's stage started, so a wall time can be read later.

A shared machine's speed moves from day to day and within a run (a neighbour's load, a
throttled host): the same command on the same machine can take half again as long on a slow
day, and a run's wall time alone cannot say whether it was the code or the machine.  Before
each stage the run measures the float32 speed of one square matrix product on the threads
torch is using (a few milliseconds) and records it beside the stage's seconds in
``stages.json``; the report prints the range over the stages beside the wall time, so a time
can be read against a budget set on a faster or a slower day.

    from nlhf.machine import machine
    machine()   # {"cpus": …, "threads": …, "gflops": …}

The product is 512 × 512 × 512, the median of five after one unmeasured: small enough to
cost nothing per stage, large enough to run at the machine's arithmetic rate rather than at
its call overhead.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

import torch

SIZE = 512
REPEATS = 5


def matmul_gflops(size: int = SIZE, repeats: int = REPEATS) -> float:
    """GFLOP/s of a float32 ``size``³ matrix product on this process's torch threads."""
    own = torch.Generator().manual_seed(0)  # the run's global generator stays untouched
    a = torch.randn(size, size, generator=own)
    b = torch.randn(size, size, generator=own)
    torch.mm(a, b)  # first call: allocation and dispatch, not measured
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    return 2.0 * size**3 / max(statistics.median(times), 1e-9) / 1e9


def machine() -> dict[str, Any]:
    """The CPUs, torch's threads and the matrix-product speed, as a stage records them."""
    return {
        "cpus": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "gflops": round(matmul_gflops(), 1),
    }


def speed_line(stages: dict[str, dict[str, Any]]) -> str:
    """``on 2 CPUs`` and, when the stages recorded it, the range of the matrix-product speed
    measured before them: the tail of a report's wall-time sentence."""
    cpus = next((s["cpus"] for s in stages.values() if "cpus" in s), "?")
    speeds = [s["gflops"] for s in stages.values() if "gflops" in s]
    if not speeds:
        return f"on {cpus} CPUs"
    low, high, middle = min(speeds), max(speeds), statistics.median(speeds)
    return (
        f"on {cpus} CPUs, where a float32 matrix product ({SIZE}³) ran at "
        f"{low:.0f}–{high:.0f} GFLOP/s before the stages (median {middle:.0f})"
    )

"""Shared benchmark plumbing: machine facts, JSON results, and the docs table between markers.

Each benchmark calls :func:`record` with its name, a JSON-able result and a markdown table;
the JSON goes to ``bench/results/<name>.json`` and the table replaces the block between
``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->`` in docs/benchmarks.md.  With
``NLHF_BENCH_RESULTS`` set (bench/gpu.sh), the JSON and the table go to that folder instead
and the docs are left alone.

:func:`weight_stream_floor` measures the machine's limit for decoding a given model: one
16-row matrix product per weight matrix, i.e. every weight byte read once, as a decode
forward must; at few rows the time is set by memory bandwidth, not arithmetic.
"""

from __future__ import annotations

import os
import platform
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(os.environ.get("NLHF_PEER_BENCH", ROOT.parent / "shared" / "bench" / "trl"))
"""The peer benchmark (TRL on the same workload): ``shared/bench/trl`` beside the repository,
or the folder named by ``NLHF_PEER_BENCH``."""
sys.path.insert(0, str(ROOT / "src"))

from nlhf.files import atomic_write_json, atomic_write_text  # noqa: E402


def machine() -> dict:
    """Facts that explain a number: CPU, threads, library versions, load from other processes."""
    import numpy

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {
        "python": platform.python_version(),
        "numpy": numpy.__version__,
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "load_average_1min": load,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }


def weight_stream_floor(model, rows: int = 16, repeats: int = 5) -> dict:
    """Seconds for one pass of ``rows``-row products over every distinct weight matrix of
    ``model`` (the floor of one decode forward), the bytes read and their rate in GB/s;
    the median of ``repeats`` passes after one warm-up."""
    import statistics

    import torch

    seen, weights = set(), []
    for param in model.parameters():
        if param.ndim == 2 and param.is_floating_point() and param.data_ptr() not in seen:
            seen.add(param.data_ptr())
            weights.append(param.detach())
    inputs = {}
    for w in weights:
        inputs.setdefault((w.shape[1], w.dtype, w.device), torch.randn(rows, w.shape[1]).to(w))

    def one_pass() -> float:
        if weights[0].is_cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for w in weights:
            torch.nn.functional.linear(inputs[(w.shape[1], w.dtype, w.device)], w)
        if weights[0].is_cuda:
            torch.cuda.synchronize()
        return time.perf_counter() - start

    with torch.no_grad():
        one_pass()
        seconds = statistics.median(one_pass() for _ in range(repeats))
    nbytes = sum(w.nbytes for w in weights)
    return {
        "rows": rows,
        "weight_bytes": nbytes,
        "seconds_per_pass": seconds,
        "gb_per_s": nbytes / seconds / 1e9,
    }


def record(name: str, result: dict, table: str, write: bool = True) -> None:
    """Print ``table``; with ``write``, save the result and the table (module doc)."""
    print(table)
    if not write:
        return
    result = {"benchmark": name, "machine": machine(), **result}
    folder = os.environ.get("NLHF_BENCH_RESULTS")
    if folder:
        atomic_write_json(Path(folder) / f"{name}.json", result)
        atomic_write_text(Path(folder) / f"{name}.md", table + "\n")
        return
    atomic_write_json(ROOT / "bench" / "results" / f"{name}.json", result)
    readme = ROOT / "docs" / "benchmarks.md"
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = readme.read_text()
    if begin in text and end in text:
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text)
        atomic_write_text(readme, text)

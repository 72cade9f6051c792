"""Shared benchmark plumbing: machine facts, JSON results, and the docs table between markers.

Each benchmark calls :func:`record` with its name, a JSON-able result and a markdown table;
the JSON goes to ``bench/results/<name>.json`` and the table replaces the block between
``<!-- bench:<name> -->`` and ``<!-- /bench:<name> -->`` in docs/benchmarks.md.
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


def record(name: str, result: dict, table: str) -> None:
    result = {"benchmark": name, "machine": machine(), **result}
    atomic_write_json(ROOT / "bench" / "results" / f"{name}.json", result)
    readme = ROOT / "docs" / "benchmarks.md"
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    text = readme.read_text()
    if begin in text and end in text:
        pattern = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
        text = pattern.sub(lambda _: f"{begin}\n{table}\n{end}", text)
        atomic_write_text(readme, text)
    print(table)

"""``nlhf demo``: the command (see :mod:`nlhf.demo` for what it does).

    nlhf demo [--quick] [--all-methods] [--out DIR] [key=value ...]

Starting writes the resolved options to ``DIR/config.yaml``; running again with the same
``--out`` resumes (finished stages are skipped, trainers continue from their checkpoints), or
only rebuilds ``report.md`` when every stage is done, and refuses options that differ from the
ones the run started with (:class:`nlhf.resumable.Run`).
"""

from __future__ import annotations

from nlhf.demo.config import Config
from nlhf.demo.report import report
from nlhf.demo.stages import stages
from nlhf.resumable import Run, RunFolder

__all__ = ["Config", "run"]

RUN = Run(("nlhf", "demo"), Config, RunFolder, stages, report)


def run(config: Config) -> int:
    return RUN.run(config)

"""Where a training run's metrics go: ``metrics.jsonl`` always, TensorBoard when asked, and
Weights & Biases or Trackio when asked and installed.

    log = MetricsLog(Path("runs/x"), tensorboard=True, start_step=0,
                     report_to=["wandb"], project="nlhf", config={"lr": 1e-3})
    log.write(1, {"loss": 0.7})
    log.close()

Resuming (``start_step`` > 0) drops the lines of ``metrics.jsonl`` past the checkpoint,
TensorBoard purges its later events, and a tracker continues the same run: its id is kept in
``<out>/trackers.json``, so the resumed steps are appended to the run the first start made.
A tracker that is asked for but not installed is an error before training starts, with the
pip command that installs it; trackers log only scalars, at the run's step numbers.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.tensorboard import SummaryWriter

from nlhf.files import atomic_write_json

TRACKERS = ("wandb", "trackio")


class TrackerMissingError(ImportError):
    """A tracker was asked for (``report_to``) but its package is not installed."""


def check_tracker_names(names: Sequence[str]) -> None:
    """Raise ValueError naming the trackers that are not known (a config's ``report_to``)."""
    unknown = sorted(set(names) - set(TRACKERS))
    if unknown:
        raise ValueError(f"report_to: unknown {unknown} (known: {', '.join(TRACKERS)})")


def check_trackers(names: Sequence[str]) -> None:
    """Raise ValueError for an unknown tracker, TrackerMissingError for one not installed."""
    check_tracker_names(names)
    for name in names:
        if importlib.util.find_spec(name) is None:
            raise TrackerMissingError(
                f"report_to={name}: the {name} package is not installed; pip install {name}"
            )


def _run_ids(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """Each tracker's run id for this output folder: kept from the first start, so a resumed
    run logs into the same tracker run."""
    path = folder / "trackers.json"
    ids = json.loads(path.read_text()) if path.exists() else {}
    new = {name: f"{folder.name}-{uuid.uuid4().hex[:8]}" for name in names if name not in ids}
    if new:
        ids.update(new)
        atomic_write_json(path, ids)
    return ids


def open_tracker(name: str, run_id: str, project: str, config: dict[str, Any]) -> Any:
    """A started run of tracker ``name`` (``wandb`` or ``trackio``) that resumes ``run_id``."""
    module = importlib.import_module(name)
    if name == "wandb":
        return module.init(project=project, id=run_id, name=run_id, config=config, resume="allow")
    return module.init(project=project, name=run_id, config=config, resume="allow")


class MetricsLog:
    """``metrics.jsonl`` (appended, one line per step), TensorBoard events, trackers."""

    def __init__(
        self,
        folder: Path,
        tensorboard: bool,
        start_step: int,
        report_to: Sequence[str] = (),
        project: str = "nlhf",
        config: dict[str, Any] | None = None,
    ) -> None:
        check_trackers(report_to)
        self.path = folder / "metrics.jsonl"
        folder.mkdir(parents=True, exist_ok=True)
        if self.path.exists():  # drop lines past the checkpoint we resume from
            kept = [
                line
                for line in self.path.read_text().splitlines()
                if line and json.loads(line)["step"] <= start_step
            ]
            self.path.write_text("".join(line + "\n" for line in kept))
        self.writer = None
        if tensorboard:
            self.writer = SummaryWriter(str(folder / "tensorboard"), purge_step=start_step + 1)
        ids = _run_ids(folder, report_to)
        self.trackers = [open_tracker(n, ids[n], project, config or {}) for n in report_to]

    def write(self, step: int, metrics: dict[str, float]) -> None:
        with self.path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}) + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                self.writer.add_scalar(key, value, step)
        for run in self.trackers:
            run.log(dict(metrics), step=step)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        for run in self.trackers:
            run.finish()


class NoLog:
    """What processes other than the main one log: nothing."""

    def write(self, step: int, metrics: dict[str, float]) -> None:
        pass

    def close(self) -> None:
        pass


def check_finite(loss: torch.Tensor, metrics: dict[str, float]) -> str | None:
    """The name of the first non-finite quantity (the loss, then the metrics), or None."""
    if not torch.isfinite(loss).all():
        return "loss"
    for key, value in metrics.items():
        if not math.isfinite(value):
            return key
    return None

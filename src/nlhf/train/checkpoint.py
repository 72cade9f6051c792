"""Checkpoints that survive being killed at any moment: write a temp folder, then rename.

    ckpt = Checkpointer("runs/x/checkpoints", keep=2)
    ckpt.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict(), ...})
    state = ckpt.load_latest()        # None when there is none; includes RNG states

A checkpoint is the folder ``step-<N>`` holding ``state.pt``; a folder appears under its final
name only once complete, so ``load_latest`` never sees a partial one.  RNG states (Python,
numpy, torch) are saved and restored with it, so a resumed run draws the same numbers.  A
checkpoint that cannot be read, or whose weights do not fit the model being trained (another
``--policy``, ``lora_r`` or trainer with the same ``--out``), is a :class:`CheckpointError`.
"""

from __future__ import annotations

import os
import pickle
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlhf.errors import UserError
from nlhf.files import temp_dir_beside

PREFIX = "step-"
FIX = "choose another --out, or pass --no-resume to start over"


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that the run cannot resume from; the message names it and the way out."""


def rng_state() -> dict[str, Any]:
    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),  # noqa: NPY002 (the global state other libraries use)
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])  # noqa: NPY002
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class Checkpointer:
    """Numbered checkpoints in one folder, the newest ``keep`` kept."""

    def __init__(self, folder: str | Path, keep: int = 2) -> None:
        self.folder = Path(folder)
        self.keep = keep

    def steps(self) -> list[int]:
        if not self.folder.exists():
            return []
        found = []
        for path in self.folder.iterdir():
            if path.name.startswith(PREFIX) and (path / "state.pt").exists():
                try:
                    found.append(int(path.name[len(PREFIX) :]))
                except ValueError:
                    continue
        return sorted(found)

    def save(self, step: int, state: dict[str, Any]) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        final = self.folder / f"{PREFIX}{step}"
        tmp = temp_dir_beside(final)
        try:
            torch.save({**state, "step": step, "rng": rng_state()}, tmp / "state.pt")
            if final.exists():
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in self.steps()[: -self.keep]:
            shutil.rmtree(self.folder / f"{PREFIX}{old}", ignore_errors=True)
        return final

    def load_latest(self) -> dict[str, Any] | None:
        steps = self.steps()
        if not steps:
            return None
        path = self.folder / f"{PREFIX}{steps[-1]}" / "state.pt"
        try:  # memory-mapped: processes that load it share the pages
            state = torch.load(path, weights_only=False, map_location="cpu", mmap=True)
        except (RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            raise CheckpointError(f"{path}: not a readable checkpoint ({exc}); {FIX}") from None
        set_rng_state(state["rng"])
        return state


def weights_mismatch(saved: dict[str, torch.Tensor], params: dict[str, Any]) -> str | None:
    """The first difference between saved weights and the parameters they should load into,
    by name and shape; None when they fit."""
    missing, extra = sorted(params.keys() - saved.keys()), sorted(saved.keys() - params.keys())
    if missing:
        return f"it has no weights for {missing[0]} ({len(missing)} missing)"
    if extra:
        return f"it has weights for {extra[0]}, which this model lacks ({len(extra)} extra)"
    for name, value in saved.items():
        if tuple(value.shape) != tuple(params[name].shape):
            return f"{name} has shape {tuple(value.shape)} there, {tuple(params[name].shape)} here"
    return None


def check_fits(folder: Path, saved: dict[str, torch.Tensor], model: torch.nn.Module) -> None:
    """Refuse a checkpoint whose trainable weights do not fit ``model``'s trainable
    parameters (a :class:`CheckpointError` naming the first difference)."""
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    problem = weights_mismatch(saved, params)
    if problem:
        raise CheckpointError(
            f"{folder}: the checkpoint was written for another model, lora_r or trainer: "
            f"{problem}; {FIX}"
        )

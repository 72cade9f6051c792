"""Checkpoints that survive being killed at any moment: write a temp folder, then rename.

    ckpt = Checkpointer("runs/x/checkpoints", keep=2)
    ckpt.save(step, {"model": model.state_dict(), "optimizer": opt.state_dict(), ...})
    state = ckpt.load_latest()        # None when there is none; includes RNG states

A checkpoint is the folder ``step-<N>`` holding ``state.pt``; a folder appears under its final
name only once complete, so ``load_latest`` never sees a partial one.  RNG states (Python,
numpy, torch) are saved and restored with it, so a resumed run draws the same numbers.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nlhf.files import temp_dir_beside

PREFIX = "step-"


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
        state = torch.load(  # memory-mapped: processes that load it share the pages
            self.folder / f"{PREFIX}{steps[-1]}" / "state.pt",
            weights_only=False,
            map_location="cpu",
            mmap=True,
        )
        set_rng_state(state["rng"])
        return state

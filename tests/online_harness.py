"""Shared checks for the online trainers, on the tiny setups of tests/tiny_train.py.

:func:`assert_one_documented_step` checks an in-process one-step run; in subprocesses,
:func:`kill_and_resume` trains one run to the end and, in the same process, another that is
SIGKILLed right after its step-4 checkpoint, then restarts that one, and
:func:`trained_win_rate` (in this process) measures a trained policy against its reference;
the rest reads what a run wrote.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import torch

import children
import tiny_train as tiny_train_script
from trainer_docs import logged_metrics

SCRIPT = Path(__file__).with_name("tiny_train.py")


def tiny_train(algorithm: str, out: Path, *args: str, tmp: Path) -> subprocess.CompletedProcess:
    """``python tests/tiny_train.py ALGORITHM OUT ARGS`` with its temp folder in ``tmp``."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), algorithm, str(out), *args],
        capture_output=True,
        encoding="utf-8",
        env=children.env(tmp),
        timeout=300,
    )


def kill_and_resume(
    algorithm: str, tmp_path: Path, *overrides: str, unfinished: str = "policy"
) -> tuple[Path, Path]:
    """Train to the end in ``tmp_path/full``, then, in the same process, in ``tmp_path/resumed``
    until a SIGKILL after the step-4 checkpoint; restart in a new process.  Returns the two
    folders; asserts the kill happened before the run wrote ``unfinished`` (a final output)
    and that the restart resumed from step 4."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    killed = tiny_train(
        algorithm, resumed, *overrides, "--full", str(full), "--die-after-checkpoint", "4",
        tmp=tmp_path,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (full / unfinished).exists() and not (resumed / unfinished).exists()
    again = tiny_train(algorithm, resumed, *overrides, tmp=tmp_path)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from step 4" in again.stdout
    return full, resumed


def trained_win_rate(algorithm: str, tmp_path: Path, *overrides: str) -> float:
    """Mean judge P(policy sample ≻ initial model sample) after training into ``tmp_path/run``
    (in this process: no interpreter start)."""
    trainer, config = tiny_train_script.make(algorithm, str(tmp_path / "run"), overrides)
    tiny_train_script.train(algorithm, trainer, config)
    return tiny_train_script.win_rate(trainer)


def saved_tensors(*files) -> dict:
    from safetensors.torch import load_file

    out = {}
    for path in files:
        out.update(load_file(str(path)))
    return out


def policy_weights(folder) -> dict:
    """The saved policy (the adapter under LoRA) of a finished run."""
    (path,) = (folder / "policy").glob("*.safetensors")
    return saved_tensors(path)


def assert_identical(a: dict, b: dict) -> None:
    assert a.keys() == b.keys() and a
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)


def metrics(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]


def assert_one_documented_step(before: list, trainer, name: str, module: str) -> None:
    """After ``trainer`` ran one step (``before``: its trainable tensors at the start): every
    trainable tensor moved, and ``metrics.jsonl`` holds step 1 with exactly the metrics that
    ``nlhf train <name>`` documents (:func:`trainer_docs.logged_metrics`), all finite."""
    after = [p.detach() for p in trainer.params]
    assert len(after) == len(before)
    still = sum(torch.equal(a, b) for a, b in zip(before, after, strict=True))
    assert still == 0, f"{still} of {len(after)} trainable tensors did not move"
    (row,) = metrics(trainer.out)
    assert row.pop("step") == 1
    documented = logged_metrics(name, module)
    assert not documented - row.keys(), f"documented, not logged: {sorted(documented - row.keys())}"
    assert not row.keys() - documented, f"logged, not documented: {sorted(row.keys() - documented)}"
    assert all(math.isfinite(v) for v in row.values()), row

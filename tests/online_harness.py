"""Shared checks for the online trainers, on the tiny setups of tests/tiny_train.py.

:func:`assert_one_documented_step` checks an in-process one-step run;
:func:`kill_and_resume` trains one run to the end in this process, another in a subprocess that
is SIGKILLed right after its step-4 checkpoint, and resumes that one here from its files;
:func:`trained_win_rate` (in this process) measures a trained policy against its reference;
the rest reads what a run wrote.
"""

import contextlib
import io
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
        env=children.env(tmp, OMP_NUM_THREADS="1"),
        timeout=300,
    )


def kill_and_resume(
    algorithm: str, tmp_path: Path, *overrides: str, unfinished: str = "policy"
) -> tuple[Path, Path]:
    """Train to the end in ``tmp_path/full`` (in this process), and in ``tmp_path/resumed`` in
    a subprocess SIGKILLed after its step-4 checkpoint; resume that run here from what it left
    on disk.  One torch thread on both sides, so that their steps round alike.  Returns the
    two folders; asserts the kill came before the run wrote ``unfinished`` (a final output)
    and that the resumed run started from step 4."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    killed = tiny_train(algorithm, resumed, *overrides, "--die-after-checkpoint", "4", tmp=tmp_path)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (resumed / unfinished).exists()
    said = io.StringIO()
    with one_thread():
        tiny_train_script.train(algorithm, *tiny_train_script.make(algorithm, str(full), overrides))
        assert (full / unfinished).exists()
        with contextlib.redirect_stdout(said):
            trainer, config = tiny_train_script.make(algorithm, str(resumed), overrides)
            tiny_train_script.train(algorithm, trainer, config)
    assert "resuming from step 4" in said.getvalue()
    return full, resumed


@contextlib.contextmanager
def one_thread():
    """torch on one thread inside the block, as in the subprocesses of :func:`tiny_train`."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


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

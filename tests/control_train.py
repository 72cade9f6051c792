"""One acting-policy trainer on a tiny CartPole setting, for the resume tests of nlhf.control.

    python tests/control_train.py ALGORITHM OUT [key=value ...] [--die-after-checkpoint N]
    python tests/control_train.py ppo runs/x --die-after-checkpoint 4

ALGORITHM is ppo (true reward), nash (Nash-MD-PG against the true-return preference), or a
preference route of nlhf.control.routes, rlhf or nlhf (labels from the oracle); it
trains into OUT for 6 steps with a checkpoint every 2 (seed 3).  ``key=value`` sets any field of
the trainer's ``Config``.  ``--die-after-checkpoint N``: SIGKILL this process right after the
step-N checkpoint is written.  :func:`kill_and_resume` kills one run so, resumes it in the
test's process from its files and trains an uninterrupted one there to compare.
"""

import argparse
import contextlib
import io
import os
import signal
import subprocess
import sys
from pathlib import Path

import torch

import children
from nlhf.config import build_config
from nlhf.control import nash, ppo, routes
from nlhf.control.trainer import build_trainer

SHARED = dict(steps=6, checkpoint_every=2, progress=False, tensorboard=False, seed=3)
SETTINGS = {
    "ppo": dict(n_envs=2, n_steps=32, mini_batches=2, epochs=2),
    "nash": dict(states=2, samples=2, opponents=1, length=10, epochs=2),
}
SETTINGS["rlhf"] = {**SETTINGS["ppo"], "budget": 40, "initial": 10, "chunk": 5, "segment": 10,
                    "fit_epochs": 2, "label_c": 100.0}  # fmt: skip
SETTINGS["nlhf"] = {**SETTINGS["nash"], "budget": 30, "initial": 10, "chunk": 5, "fit_epochs": 2,
                    "label_c": 100.0}  # fmt: skip
CONFIGS = {"ppo": ppo.Config, "nash": nash.Config, "rlhf": routes.RLHFConfig,
           "nlhf": routes.NLHFConfig}  # fmt: skip


def make(name: str, out: str, overrides=()):
    """The trainer, the algorithm and the config of ``name`` in ``out``."""
    values = {**SHARED, **SETTINGS[name], "out": out}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"control_train.py: {item!r} is not key=value")
        values[key] = raw
    config = build_config(CONFIGS[name], values)
    if name in ("rlhf", "nlhf"):
        trainer, algorithm = routes.build(config)
        return trainer, algorithm, config
    if name == "ppo":
        trainer = build_trainer(config)
        return trainer, ppo.ControlPPO(trainer, config), config
    trainer = build_trainer(config, critic=False)
    return trainer, nash.ControlNashMDPG(trainer, config, nash.return_preference), config


def die_after_checkpoint(trainer, step: int) -> None:
    """SIGKILL this process as soon as the step-``step`` checkpoint is on disk."""
    save = trainer.checkpoints.save

    def save_then_die(at: int, state: dict) -> None:
        save(at, state)
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    trainer.checkpoints.save = save_then_die


def launch(name: str, out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, __file__, name, str(out), *args],
        capture_output=True,
        encoding="utf-8",
        env=children.env(out.parent, OMP_NUM_THREADS="1"),
        timeout=300,
    )


def kill_and_resume(name: str, tmp_path: Path, *overrides: str) -> tuple[Path, Path]:
    """Train ``tmp_path/resumed`` in a subprocess until a SIGKILL after its step-4 checkpoint,
    resume it in this process from its files, and train ``tmp_path/full`` uninterrupted here
    (one torch thread, as the subprocess).  Asserts the kill came before the policy was saved
    and that the resumed run started from step 4."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    killed = launch(name, resumed, *overrides, "--die-after-checkpoint", "4")
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (resumed / "policy").exists()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    said = io.StringIO()
    try:
        for out in (full, resumed):
            trainer, algorithm, _ = make(name, str(out), overrides)
            with contextlib.redirect_stdout(said):
                trainer.run(algorithm, f"control-{name}")
    finally:
        torch.set_num_threads(threads)
    assert (full / "policy").exists()
    assert "resuming from step 4" in said.getvalue()
    return full, resumed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algorithm", choices=sorted(SETTINGS))
    parser.add_argument("out")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--die-after-checkpoint", type=int, metavar="N")
    args = parser.parse_args()
    torch.set_num_threads(1)
    trainer, algorithm, _ = make(args.algorithm, args.out, args.overrides)
    if args.die_after_checkpoint:
        die_after_checkpoint(trainer, args.die_after_checkpoint)
    trainer.run(algorithm, f"control-{args.algorithm}")


if __name__ == "__main__":
    main()

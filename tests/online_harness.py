"""Shared end-to-end checks for the online trainers, run in subprocesses on a tiny model.

Each test module defines ``SETUP``: Python source that defines ``train(out, **overrides)``
returning ``(trainer, last_metrics)``.  The helpers here run it, kill it with SIGKILL right
after the step-4 checkpoint, resume it, and measure a trained policy against its reference.
"""

import json
import subprocess
import sys
import textwrap

import torch

KILL_AFTER_STEP_4 = """
import os, signal
from nlhf.train.checkpoint import Checkpointer
original = Checkpointer.save
def save_and_die(self, step, state):
    original(self, step, state)
    if step == 4:
        os.kill(os.getpid(), signal.SIGKILL)
Checkpointer.save = save_and_die
"""

WIN_RATE = """
from nlhf.models import sample
from nlhf.train.online import decode, tokenize
policy, judge = trainer.policy, trainer.judge
prompts = trainer.prompts * 20
ids, mask = tokenize(policy.tokenizer, prompts, policy.device)
g = torch.Generator().manual_seed(123)
mine = sample(policy, ids, mask, 6, generator=g)
ref = sample(policy, ids, mask, 6, reference=policy.reference, beta=1.0, generator=g)
tok = policy.tokenizer
p = judge(prompts, decode(tok, mine.tokens, mine.mask), decode(tok, ref.tokens, ref.mask))
print("WIN", float(p.mean()))
"""


def run_script(setup: str, body: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(setup) + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def kill_and_resume(setup: str, tmp_path, args: str = "", unfinished: str = "policy") -> tuple:
    """Train to the end in ``full``; in ``resumed``, SIGKILL after the step-4 checkpoint and
    restart. Returns the two folders; asserts the kill happened before the run wrote
    ``unfinished`` (a final output) and that the restart resumed from step 4."""
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    extra = f", {args}" if args else ""
    done = run_script(setup, f"train({str(full)!r}{extra})")
    assert done.returncode == 0, done.stderr[-2000:]
    killed = run_script(setup, KILL_AFTER_STEP_4 + f"train({str(resumed)!r}{extra})\n")
    assert killed.returncode == -9
    assert not (resumed / unfinished).exists()
    again = run_script(setup, f"train({str(resumed)!r}{extra})")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from step 4" in again.stdout
    return full, resumed


def trained_win_rate(setup: str, train_call: str) -> float:
    """Mean judge P(policy sample ≻ reference sample) after ``trainer, last = <train_call>``."""
    result = run_script(setup, f"trainer, last = {train_call}\n" + WIN_RATE)
    assert result.returncode == 0, result.stderr[-3000:]
    return float(result.stdout.split("WIN")[-1])


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

"""Shared end-to-end checks for the online trainers, run in subprocesses on a tiny model.

Each test module builds its ``SETUP`` with :func:`tiny_setup`: Python source that defines
``make`` and ``train(out, **overrides)`` for one trainer on a tiny model.  The helpers here
run it, kill it with SIGKILL right
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


def tiny_setup(module: str, settings: str, run: str, lora_r: int = 0, scale: float = 2.0) -> str:
    """Source that defines, for the trainer ``nlhf.train.<module>`` on a tiny random GPT-2
    with a judge that likes lower-case letters:

    - ``make(out, judge=None, **overrides) -> (trainer, config)``;
    - ``train(out, judge=None, **overrides)``: ``make``, then the lines ``run`` (which see
      ``trainer``, ``config`` and ``out`` and return the result).

    ``settings``: the config's keyword arguments beyond the shared tiny ones (6 steps of 4
    prompts × 6 tokens, a checkpoint every 2 steps, seed 3); overrides win over both.
    """
    body = textwrap.indent(textwrap.dedent(run).strip(), "    ")
    return f"""
import torch
from nlhf.models import Policy, PolicyConfig
from nlhf.models.judges import FunctionJudge
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train import {module}
from nlhf.train.online import Trainer

def make(out, judge=None, **overrides):
    model, tok = tiny_byte_lm("gpt2")
    policy = Policy(model, tok, PolicyConfig(lora_r=overrides.pop("lora_r", {lora_r})))
    if judge is None:
        judge = FunctionJudge(lambda prompt, text: sum(ch.islower() for ch in text),
                              scale={scale})
    settings = dict(out=str(out), steps=6, batch_size=4, max_new_tokens=6, checkpoint_every=2,
                    progress=False, tensorboard=False, seed=3, {settings})
    settings.update(overrides)
    config = {module}.Config(**settings)
    trainer = Trainer(config, policy=policy, judge=judge,
                      prompts=["say a", "hello", "abc", "x", "the cat", "a b"])
    return trainer, config

def train(out, judge=None, **overrides):
    trainer, config = make(out, judge, **overrides)
{body}
"""

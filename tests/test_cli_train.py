"""``nlhf train <name>`` as a user runs it, for every trainer, in a few seconds each.

``nlhf.cli.main(["train", name, ...])`` in this process: the command line parsed into the
trainer's ``Config``, then its ``run(config)``, which loads the policy from a folder (a tiny
random GPT-2 saved with ``save_pretrained``), the judge (VADER) or the encoder (a tiny BERT),
the prompts or the data, trains one step (the judges: one epoch of 8 pairs) and writes its
outputs, every logged metric documented (docs/trainers.md).  The other tests build their
trainers in code; these catch a ``Config`` and a ``run`` that do not fit together.
"""

import argparse
import dataclasses
import importlib
import json
import math
from pathlib import Path

import pytest

from nlhf.cli import COMMANDS, main
from nlhf.config import RUN_RECORD_KEYS, config_from_args, to_dict
from tiny_encoder import make_tiny_encoder
from trainer_docs import logged_metrics

ONLINE = [
    "nash-md", "nash-ema", "nash-mp", "ppo", "online-dpo", "online-ipo", "egpo", "sppo", "inpo",
    "onpo", "mpo", "dno",
]  # fmt: skip
OFFLINE = ["dpo", "ipo", "sft"]
JUDGES = ["reward-model", "preference-model"]
WORDS = "item good bad film a great awful".split()


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> dict[str, Path]:
    """A tiny policy folder, a tiny encoder folder and 10 preference pairs as JSONL."""
    from nlhf.models.tiny import tiny_byte_lm

    root = tmp_path_factory.mktemp("cli-assets")
    model, tok = tiny_byte_lm("gpt2")
    model.save_pretrained(root / "policy")
    tok.save_pretrained(root / "policy")
    make_tiny_encoder(root / "encoder", WORDS)
    pairs = [
        {"prompt": f"item {i}", "chosen": "a great film", "rejected": "an awful film"}
        for i in range(10)
    ]
    (root / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    return {"policy": root / "policy", "encoder": root / "encoder", "pairs": root / "pairs.jsonl"}


def command_line(name: str, assets: dict[str, Path], out: Path) -> list[str]:
    if name in ONLINE:
        return [
            "train", name, "--policy", str(assets["policy"]), "judge=vader", "steps=1",
            "batch_size=2", "max_new_tokens=3", "progress=false", "tensorboard=false",
            f"out={out}",
        ]  # fmt: skip
    if name in OFFLINE:
        return [
            "train", name, "--policy", str(assets["policy"]), "--data", str(assets["pairs"]),
            "max_steps=1", "batch_size=2", "progress=false", "tensorboard=false", f"out={out}",
        ]  # fmt: skip
    return [
        "train", name, "--data", str(assets["pairs"]), "--backbone", str(assets["encoder"]),
        "--out", str(out), "max_pairs=10", "batch_size=2", "epochs=1", "max_length=16",
        "progress=false",
    ]  # fmt: skip


def promised_outputs(name: str) -> set[str]:
    """What the help of ``--out`` lists ("output folder: metrics.jsonl, checkpoints/, …"),
    less ``checkpoints/`` (written every ``checkpoint_every`` steps, not after one step)."""
    command = COMMANDS["train"].commands[name]
    config_class = command.config_class(importlib.import_module(command.module))
    (out,) = [f for f in dataclasses.fields(config_class) if f.name == "out"]
    listed = out.metadata["help"].partition(":")[2]
    return {item.strip() for item in listed.split(",")} - {"checkpoints/"}


def test_every_trainer_is_covered_here():
    assert set(COMMANDS["train"].commands) == set(ONLINE + OFFLINE + JUDGES)


@pytest.mark.parametrize("name", ONLINE + OFFLINE + JUDGES)
def test_train_command_runs_one_step_and_writes_what_it_promises(name, assets, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(command_line(name, assets, out)) == 0
    printed = capsys.readouterr().out

    judge = name in JUDGES
    saved = out / ("model" if judge else "policy")
    expected = {"metrics.jsonl", "config.json", f"{saved.name}/"}
    expected |= {"metrics.json"} if name not in ONLINE else set()
    expected |= {"value_head.safetensors"} if name == "ppo" else set()
    present = {p.name + ("/" if p.is_dir() else "") for p in out.iterdir()}
    assert expected <= present, sorted(expected - present)
    assert promised_outputs(name) <= present, sorted(promised_outputs(name) - present)
    assert f"saved to {saved}" in printed, printed

    weights = list(saved.glob("*.safetensors"))
    assert weights and all(w.stat().st_size > 0 for w in weights)
    assert (saved / "tokenizer_config.json").exists()
    if not judge:  # the CLI's default LoRA adapter, loadable as a policy
        assert (saved / "adapter_model.safetensors").exists()

    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
    assert len(rows) == (4 if judge else 1)  # the judges: 8 training pairs, 2 per step
    assert all(math.isfinite(r["loss"]) for r in rows)
    module = COMMANDS["train"].commands[name].module.rpartition(".")[2]
    undocumented = {k for r in rows for k in r} - {"step"} - logged_metrics(name, module)
    assert not undocumented, f"logged, not in docs/trainers.md: {sorted(undocumented)}"
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["out"] == str(out)
    # the run's config.json serves as --config for the next run: the same config
    command = COMMANDS["train"].commands[name]
    config_class = command.config_class(importlib.import_module(command.module))
    again = config_from_args(config_class, argparse.Namespace(config=out / "config.json"))
    fields = {k: v for k, v in recorded.items() if k not in RUN_RECORD_KEYS}
    assert json.loads(json.dumps(to_dict(again))) == fields
    if name not in ONLINE:
        summary = json.loads((out / "metrics.json").read_text())
        assert summary["steps"] == len(rows)
        held_out = summary["held_out"]
        assert held_out and all(math.isfinite(v) for v in held_out.values() if type(v) is float)

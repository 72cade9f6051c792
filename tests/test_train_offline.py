"""Offline DPO / IPO / SFT on a tiny model: tokenization, learning, resume, NaN handling, data."""

import json
import math
import random

import pytest
import torch

from nlhf.data import DataError
from nlhf.models import Policy, PolicyConfig
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm
from nlhf.train import offline
from nlhf.train.checkpoint import Checkpointer
from nlhf.train.distributed import Processes
from nlhf.train.dpo import Config as DPOConfig
from nlhf.train.ipo import Config as IPOConfig
from nlhf.train.pairs import EpochBatches, train_and_evaluate
from nlhf.train.sft import Config as SFTConfig


def write_pairs(path, n=40, seed=0):
    """Pairs where the chosen reply is lowercase letters and the rejected one the same in caps."""
    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in range(n):
            word = "".join(rng.choice("abcdefghij") for _ in range(6))
            row = {"prompt": f"item {i}", "chosen": word, "rejected": word.upper()}
            f.write(json.dumps(row) + "\n")
    return str(path)


def tiny_policy(lora_r=0):
    tok = byte_tokenizer()
    model = tiny_causal_lm(
        "gpt2",
        vocab_size=len(tok),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        seed=0,
    )
    return Policy(model, tok, PolicyConfig(lora_r=lora_r))


def settings(tmp_path, data, **overrides):
    base = dict(
        data=data,
        held_out=0.25,
        max_prompt_length=32,
        max_completion_length=10,
        batch_size=8,
        epochs=2,
        lr=3e-3,
        progress=False,
        tensorboard=False,
        out=str(tmp_path / "run"),
    )
    return {**base, **overrides}


def train_pairs(tmp_path, kind="dpo", policy=None, **overrides):
    data = write_pairs(tmp_path / "pairs.jsonl")
    cfg = (DPOConfig if kind == "dpo" else IPOConfig)(**settings(tmp_path, data, **overrides))
    policy = policy or tiny_policy()
    train, held = offline.load_pair_split(cfg, policy.tokenizer)
    return policy, offline.train_offline(cfg, policy, train, held, kind)


def test_encode_pads_prompts_left_and_responses_right_with_eos():
    tok = byte_tokenizer()

    def ids(text):
        return tok(text, add_special_tokens=False)["input_ids"]

    enc = offline.encode(tok, ["abcdef", "xy"], ["hi", "longer reply"], 4, 5, 256, 257)
    assert enc.prompt_ids[0].tolist() == ids("cdef")  # cut from the left
    assert enc.prompt_mask.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1]]
    assert enc.prompt_ids[1, :2].tolist() == [257, 257]
    assert enc.completion_ids[0].tolist() == [*ids("hi"), 256, 257, 257]  # EOS, then padding
    assert enc.completion_mask[0].tolist() == [1, 1, 1, 0, 0]
    assert enc.completion_ids[1].tolist() == ids("longe")  # cut: no EOS
    assert enc.completion_mask[1].tolist() == [1] * 5


@pytest.mark.parametrize("kind", ["dpo", "ipo"])
def test_offline_pair_training_raises_held_out_implicit_reward_accuracy(tmp_path, kind):
    _, result = train_pairs(tmp_path, kind)
    before, after = result["held_out_start"], result["held_out"]
    assert before["accuracy"] == 0.5  # policy = reference: every margin is exactly 0
    assert after["accuracy"] >= 0.8 and after["reward_margin"] > 0
    assert after["loss"] < before["loss"]
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["held_out"]["accuracy"] == after["accuracy"]
    assert any((tmp_path / "run" / "policy").glob("*.safetensors"))
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == list(range(1, result["steps"] + 1))


def test_sft_lowers_nll_on_demonstrations(tmp_path):
    path = tmp_path / "demos.jsonl"
    rng = random.Random(1)
    rows = [
        {"prompt": f"say {i}", "response": "".join(rng.choice("ab") for _ in range(8))}
        for i in range(40)
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = SFTConfig(**settings(tmp_path, str(path), lr=5e-3))
    policy = tiny_policy()
    train, held = offline.load_sft_split(cfg, policy.tokenizer)
    assert len(train) == 30 and len(held) == 10
    assert all(e.rejected is None and set(e.chosen) <= {"a", "b"} for e in train)
    trainer, objective = offline.build(cfg, policy, train, held, "sft")
    on_train = offline.build(cfg, policy, train, train, "sft")[1]  # its held-out: the train set
    train_before = on_train.evaluate()["nll"]
    result = train_and_evaluate(trainer, objective, "sft")
    assert result["held_out"]["nll"] < result["held_out_start"]["nll"] - 1.0
    assert on_train.evaluate()["nll"] < train_before - 1.0


def test_sft_from_pairs_uses_the_chosen_responses(tmp_path):
    data = write_pairs(tmp_path / "pairs.jsonl")
    cfg = SFTConfig(**settings(tmp_path, data))
    train, held = offline.load_sft_split(cfg, None)
    assert len(train) + len(held) == 40
    assert all(e.chosen.islower() and e.rejected is None for e in train + held)
    assert train[0].prompt.startswith("Human: item ") and train[0].prompt.endswith("Assistant:")


def test_bad_demonstration_rows_name_file_row_and_field(tmp_path):
    path = tmp_path / "demos.jsonl"
    path.write_text('{"prompt": "a", "response": "b"}\n{"prompt": "c", "reply": "d"}\n')
    with pytest.raises(DataError, match=r"demos.jsonl.*line 2.*'response'"):
        offline.load_demonstrations(str(path))
    assert len(offline.load_demonstrations(str(path), skip_bad_rows=True)) == 1


def test_interrupted_run_resumes_to_identical_weights_and_metrics(tmp_path):
    """In-process interruption: an exception right after the step-4 checkpoint is written."""
    full_policy, _ = train_pairs(tmp_path / "full", checkpoint_every=2)

    original = Checkpointer.save

    def save_and_stop(self, step, state):
        original(self, step, state)
        if step == 4:
            raise KeyboardInterrupt

    Checkpointer.save = save_and_stop
    try:
        with pytest.raises(KeyboardInterrupt):
            train_pairs(tmp_path / "resumed", checkpoint_every=2)
    finally:
        Checkpointer.save = original
    assert not (tmp_path / "resumed" / "run" / "policy").exists()
    resumed_policy, _ = train_pairs(tmp_path / "resumed", checkpoint_every=2)
    for (name, a), (_, b) in zip(
        full_policy.model.named_parameters(), resumed_policy.model.named_parameters(), strict=True
    ):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)

    def curve(root):
        text = (root / "run" / "metrics.jsonl").read_text()
        return [
            (r["step"], r["loss"], r["reward_margin"]) for r in map(json.loads, text.splitlines())
        ]

    assert curve(tmp_path / "full") == curve(tmp_path / "resumed")
    full = json.loads((tmp_path / "full" / "run" / "metrics.json").read_text())
    resumed = json.loads((tmp_path / "resumed" / "run" / "metrics.json").read_text())
    assert full["held_out_start"] == resumed["held_out_start"]
    assert full["held_out"] == resumed["held_out"]


def test_fsdp_in_one_process_is_refused_before_training(tmp_path):
    with pytest.raises(ValueError, match="fsdp=true shards the model over several processes"):
        train_pairs(tmp_path, fsdp=True)
    assert not (tmp_path / "run" / "metrics.jsonl").exists()


def nan_on_second_step(objective):
    """Make the objective's loss NaN on its second call."""
    calls, loss = [0], objective.loss

    def nan_loss(share, step):
        calls[0] += 1
        value, metrics = loss(share, step)
        return (value * float("nan") if calls[0] == 2 else value), metrics

    objective.loss = nan_loss
    return objective


@pytest.mark.parametrize("mode", ["stop", "skip"])
def test_nonfinite_loss_stops_naming_the_step_or_is_skipped(tmp_path, mode):
    data = write_pairs(tmp_path / "pairs.jsonl", n=24)
    cfg = DPOConfig(**settings(tmp_path, data, epochs=1, on_nonfinite=mode))
    policy = tiny_policy()
    train, held = offline.load_pair_split(cfg, policy.tokenizer)
    trainer, objective = offline.build(cfg, policy, train, held, "dpo")
    nan_on_second_step(objective)
    if mode == "stop":
        with pytest.raises(FloatingPointError, match="step 2: loss is not finite"):
            train_and_evaluate(trainer, objective, "dpo")
        return
    train_and_evaluate(trainer, objective, "dpo")
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("skipped", 0.0) for r in rows] == [0.0, 1.0, 0.0]


def test_config_checks():
    with pytest.raises(ValueError, match="beta must be > 0"):
        DPOConfig(beta=0.0)
    with pytest.raises(ValueError, match="held_out must lie in"):
        SFTConfig(held_out=1.0)
    with pytest.raises(ValueError, match="max_steps"):
        IPOConfig(max_steps=0)
    procs = Processes()
    assert EpochBatches([0] * 20, DPOConfig(batch_size=8, epochs=3), 0, procs).steps == 9
    config = DPOConfig(batch_size=8, epochs=3, max_steps=4)
    assert EpochBatches([0] * 20, config, 0, procs).steps == 4


@pytest.mark.parametrize("command", ["dpo", "ipo", "sft"])
def test_commands_run_end_to_end_with_lora(tmp_path, command, capsys):
    """``nlhf train dpo|ipo|sft`` as the CLI runs them: policy from a folder, LoRA adapter."""
    import importlib

    folder = tmp_path / "tiny"
    policy = tiny_policy()
    policy.model.save_pretrained(folder)
    policy.tokenizer.save_pretrained(folder)
    data = write_pairs(tmp_path / "pairs.jsonl", n=16)
    module = importlib.import_module(f"nlhf.train.{command}")
    config = module.Config(**settings(tmp_path, data, policy=str(folder), lora_r=4, epochs=1))
    assert module.run(config) == 0
    out = capsys.readouterr().out
    assert f"{command}: 2 steps" in out and "policy saved to" in out
    assert (tmp_path / "run" / "policy" / "adapter_model.safetensors").exists()
    result = json.loads((tmp_path / "run" / "metrics.json").read_text())
    key = "nll" if command == "sft" else "accuracy"
    assert math.isfinite(result["held_out"][key])

"""Reward model, preference model and judges on a tiny encoder: algebra, learning, round trips."""

import json
import random

import pytest
import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges import FunctionJudge, LexiconJudge, PreferenceModelJudge, RewardModelJudge
from nlhf.models.preference_model import PreferenceModel
from nlhf.models.reward_model import RewardModel
from tiny_encoder import make_tiny_encoder

ITEMS = ["rock", "paper", "scissors"]
BEATS = {"rock": "scissors", "scissors": "paper", "paper": "rock"}
VERBS = ["i choose", "i say", "my pick is", "go with"]
WORDS = [w for v in VERBS for w in v.split()] + ITEMS + ["pick", "one", "good", "bad", "film"]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    return str(make_tiny_encoder(tmp_path_factory.mktemp("enc"), WORDS))


def test_preference_model_is_antisymmetric_for_any_weights(encoder):
    torch.manual_seed(0)
    pm = PreferenceModel.from_backbone(encoder, rank=4).eval()
    with torch.no_grad():
        pm.W.normal_(std=3.0)
        prompts, a, b = (
            ["pick one"] * 3,
            ["i say rock", "go with paper", "i choose scissors"],
            ["go with paper", "i say rock", "i choose scissors"],
        )
        p_ab, p_ba = pm.prob(prompts, a, b), pm.prob(prompts, b, a)
    torch.testing.assert_close(p_ab + p_ba, torch.ones(3))
    assert p_ab[2].item() == 0.5  # a response against itself, exactly
    assert p_ab[0].item() != pytest.approx(0.5, abs=1e-4)


def cycle_pairs(n, seed):
    rng = random.Random(seed)
    rows = []
    for _ in range(n):
        winner = rng.choice(ITEMS)
        rows.append(
            {
                "prompt": "pick one",
                "chosen": f"{rng.choice(VERBS)} {winner}",
                "rejected": f"{rng.choice(VERBS)} {BEATS[winner]}",
            }
        )
    return rows


@pytest.mark.slow
def test_preference_model_learns_a_cycle_that_no_reward_model_can(encoder, tmp_path):
    """rock ≻ scissors ≻ paper ≻ rock: any reward gets at most 2 of the 3 relations right."""
    from nlhf.train import preference_model, reward_model

    path = tmp_path / "cycle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in cycle_pairs(200, 0)) + "\n")
    common = dict(
        data=str(path),
        backbone=encoder,
        epochs=6,
        batch_size=16,
        lr=1e-3,
        head_lr=1e-2,
        max_length=16,
        progress=False,
        held_out=0.2,
    )
    pm = preference_model.Config(out=str(tmp_path / "pm"), rank=4, **common)
    rm = reward_model.Config(out=str(tmp_path / "rm"), **common)
    assert preference_model.run(pm) == 0 and reward_model.run(rm) == 0
    pm_acc = json.loads((tmp_path / "pm" / "metrics.json").read_text())["held_out"]["accuracy"]
    rm_acc = json.loads((tmp_path / "rm" / "metrics.json").read_text())["held_out"]["accuracy"]
    assert pm_acc > 0.95
    assert rm_acc < 0.8  # 2/3 is the ceiling for a reward on a 3-cycle, up to sampling noise

    # the saved folder loads back as a judge that reproduces the held-out accuracy
    from nlhf.train.judge_training import prompt_text
    from nlhf.train.pairs import load_training_pairs

    _, held_out = load_training_pairs(pm, pm.seed)
    judge = PreferenceModelJudge(PreferenceModel.load(tmp_path / "pm" / "model"))
    p = judge(
        [prompt_text(x) for x in held_out],
        [x.chosen for x in held_out],
        [x.rejected for x in held_out],
    )
    assert float((p > 0.5).float().mean()) == pytest.approx(pm_acc)


def test_reward_and_preference_models_round_trip(encoder, tmp_path):
    torch.manual_seed(1)
    rm = RewardModel.from_backbone(encoder, max_length=16).eval()
    pm = PreferenceModel.from_backbone(encoder, rank=3, max_length=16).eval()
    prompts, a, b = ["pick one"] * 2, ["i say rock", "good film"], ["bad film", "go with paper"]
    with torch.no_grad():
        before_rm, before_pm = rm.score(prompts, a), pm.prob(prompts, a, b)
    rm.save(tmp_path / "rm")
    pm.save(tmp_path / "pm")
    with torch.no_grad():
        torch.testing.assert_close(
            RewardModel.load(tmp_path / "rm").eval().score(prompts, a), before_rm
        )
        torch.testing.assert_close(
            PreferenceModel.load(tmp_path / "pm").eval().prob(prompts, a, b), before_pm
        )
    with pytest.raises(ValueError, match="not a reward model"):
        RewardModel.load(tmp_path / "pm")
    with pytest.raises(ModelError, match="not an nlhf judge folder"):
        PreferenceModel.load(tmp_path)


def test_score_judges_are_antisymmetric(encoder):
    judge = FunctionJudge(lambda prompt, text: text.count("!"), scale=2.0)
    p = judge(["x", "x"], ["wow!!", "ok"], ["ok", "ok"])
    torch.testing.assert_close(p, torch.sigmoid(torch.tensor([4.0, 0.0])))
    lex = LexiconJudge(polarity=lambda text: {"compound": 0.5 if "good" in text else -0.5})
    assert lex(["p"], ["good film"], ["bad film"]).item() == pytest.approx(
        torch.sigmoid(torch.tensor(5.0)).item()
    )
    rm = RewardModelJudge(RewardModel.from_backbone(encoder, max_length=16), batch_size=1)
    ab, ba = (
        rm(["q", "q"], ["good film", "i say rock"], ["bad film", "i say rock"]),
        rm(["q", "q"], ["bad film", "i say rock"], ["good film", "i say rock"]),
    )
    torch.testing.assert_close(ab + ba, torch.ones(2))
    assert ab[1].item() == 0.5
    with pytest.raises(ValueError, match="judge got 2 prompts, 1 and 2"):
        judge(["a", "b"], ["x"], ["y", "z"])


def test_training_resumes_to_the_same_weights(encoder, tmp_path, monkeypatch):
    """A run interrupted after a checkpoint and resumed ends exactly where an uninterrupted
    run ends (same seed, CPU)."""
    from nlhf.train import reward_model
    from nlhf.train.checkpoint import Checkpointer

    path = tmp_path / "cycle.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in cycle_pairs(80, 1)) + "\n")
    common = dict(
        data=str(path),
        backbone=encoder,
        epochs=2,
        batch_size=8,
        max_length=16,
        progress=False,
        checkpoint_every=3,
    )
    assert reward_model.run(reward_model.Config(out=str(tmp_path / "a"), **common)) == 0

    calls = {"n": 0}
    original = Checkpointer.save

    def save_then_die(self, step, state):
        original(self, step, state)
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt  # killed right after the second checkpoint

    monkeypatch.setattr(Checkpointer, "save", save_then_die)
    with pytest.raises(KeyboardInterrupt):
        reward_model.run(reward_model.Config(out=str(tmp_path / "b"), **common))
    assert (tmp_path / "b" / "checkpoints" / "step-6").exists()
    monkeypatch.setattr(Checkpointer, "save", original)
    assert reward_model.run(reward_model.Config(out=str(tmp_path / "b"), **common)) == 0

    a = RewardModel.load(tmp_path / "a" / "model").model.state_dict()
    b = RewardModel.load(tmp_path / "b" / "model").model.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
    ma = json.loads((tmp_path / "a" / "metrics.json").read_text())
    mb = json.loads((tmp_path / "b" / "metrics.json").read_text())
    assert ma["held_out"] == mb["held_out"]

    def curve(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return [(r["step"], r["loss"], r["accuracy"], r["lr"]) for r in map(json.loads, lines)]

    assert curve("a") == curve("b") and len(curve("a")) == 16  # 64 training pairs, 2 epochs

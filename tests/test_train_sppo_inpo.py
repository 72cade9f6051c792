"""SPPO and INPO (``nlhf train sppo|inpo``) on a tiny model: all-pairs judgements and the
knockout tournament on judges with a known order; one step moves the weights and logs every
documented metric; (slow) a SIGKILLed run resumes to exactly the weights and metrics of an
uninterrupted one, and each learns what the judge prefers (lowercase letters)."""

import pytest
import torch

import tiny_train
from nlhf.models.judges import FunctionJudge
from nlhf.train import inpo, sppo
from nlhf.train.groups import pairwise_matrix
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)


class Ranked:
    """A judge that prefers the higher number written in a completion, and counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self, prompts, a, b):
        self.calls += len(prompts)
        return torch.tensor([float(int(x) > int(y)) for x, y in zip(a, b, strict=True)])


def sample_major(values_by_prompt):
    """texts laid out as the trainers' rows: completion i of prompt b at i·B + b."""
    n, k = len(values_by_prompt), len(values_by_prompt[0])
    return [str(values_by_prompt[b][i]) for i in range(k) for b in range(n)]


@pytest.mark.parametrize("k, comparisons", [(2, 1), (4, 5), (8, 11)])
def test_the_knockout_finds_the_best_and_the_worst(k, comparisons):
    values = [
        torch.randperm(k, generator=torch.Generator().manual_seed(s)).tolist() for s in range(3)
    ]
    judge = Ranked()
    w, lose, p, calls = inpo.knockout(judge, ["x"] * 3, sample_major(values), k)
    assert int(calls) == comparisons and judge.calls == 3 * comparisons
    for b in range(3):
        assert values[b][int(w[b]) // 3] == k - 1 and values[b][int(lose[b]) // 3] == 0
        assert int(w[b]) % 3 == b and int(lose[b]) % 3 == b
    assert (p == 1.0).all()


def test_all_pairs_make_an_antisymmetric_matrix():
    judge = Ranked()
    values = [[3, 1, 2], [0, 2, 1]]
    matrix = pairwise_matrix(judge, ["x", "y"], sample_major(values), 3)
    assert judge.calls == 2 * 3
    torch.testing.assert_close(matrix + matrix.transpose(1, 2), torch.ones(2, 3, 3))
    assert matrix[0, 0, 1] == 1.0 and matrix[0, 1, 2] == 0.0 and matrix[1, 1, 2] == 1.0


@pytest.mark.parametrize(
    "module, field, value",
    [(sppo, "samples", 1), (sppo, "eta", 0.0), (inpo, "samples", 3), (inpo, "tau", 0.9)],
)
def test_configs_refuse_bad_values(module, field, value):
    with pytest.raises(ValueError, match=field):
        module.Config(**{field: value})


@pytest.mark.parametrize(
    "name, module, algorithm", [("sppo", sppo, sppo.SPPO), ("inpo", inpo, inpo.INPO)]
)
def test_one_step_moves_every_weight_and_logs_every_documented_metric(
    tmp_path, name, module, algorithm
):
    trainer, config = tiny_train.make(name, str(tmp_path), ["steps=1"])
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm(trainer, config), name)
    assert_one_documented_step(before, trainer, name, name)


def test_a_tie_everywhere_still_trains_sppo_towards_nothing(tmp_path):
    judge = FunctionJudge(lambda prompt, text: 0.0)
    trainer, config = tiny_train.make("sppo", str(tmp_path), ["steps=1"], judge=judge)
    trainer.run(sppo.SPPO(trainer, config), "sppo")
    (row,) = metrics(trainer.out)
    assert row["target"] == 0.0 and row["win_rate_spread"] == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sppo", "inpo"])
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path, name):
    full, resumed = kill_and_resume(name, tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        return [(r["step"], r["loss"], r["kl"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize("name, lr", [("sppo", "1e-2"), ("inpo", "1e-2")])
def test_each_learns_what_the_judge_prefers(tmp_path, name, lr):
    win = trained_win_rate(
        name, tmp_path, "steps=60", "batch_size=8", f"lr={lr}", "checkpoint_every=1000"
    )
    assert win > 0.8

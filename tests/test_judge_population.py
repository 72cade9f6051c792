"""The population judge: antisymmetric, ½ against itself, a majority that can cycle (and that
no Bradley–Terry reward represents), labels sampled as P says, groups from YAML and Python."""

import random

import numpy as np
import pytest
import torch

from nlhf.models.errors import ModelError
from nlhf.models.judges import load_judge
from nlhf.models.judges.load import population_from_definition
from nlhf.models.judges.population import CRITERIA, AnnotatorGroup, PopulationJudge
from nlhf.tabular import fit_bradley_terry

CYCLE_YAML = """
groups:
  - {name: first, criterion: "python:population_criteria:first", weight: 1, temperature: 0.02}
  - {name: second, criterion: "python:population_criteria:second", weight: 1, temperature: 0.02}
  - {name: third, criterion: "python:population_criteria:third", weight: 1, temperature: 0.02}
"""
REVIEWS = [
    "A wonderful, moving film with a brilliant cast.",
    "Awful.",
    "The plot meanders and the director never finds the story's heart, though the score is fine.",
]


def matrix(judge, items):
    n = len(items)
    P = np.full((n, n), 0.5)
    for i in range(n):
        for j in range(n):
            P[i, j] = judge(["p"], [items[i]], [items[j]]).item()
    return P


def test_the_default_population_is_a_judge_of_text():
    judge = load_judge("population:default")
    prompts = ["Write a review."] * 3
    a, b = REVIEWS, REVIEWS[1:] + REVIEWS[:1]
    ab, ba = judge(prompts, a, b), judge(prompts, b, a)
    torch.testing.assert_close(ab + ba, torch.ones(3), atol=1e-6, rtol=0)
    torch.testing.assert_close(judge(prompts, a, a), torch.full((3,), 0.5), atol=1e-6, rtol=0)
    groups = judge.group_probs(prompts, a, b)
    assert groups.shape == (3, 3)
    # the groups disagree: the short review wins for skimmers, loses for critics
    assert groups[1, 0] < 0.5 < groups[2, 0]


def test_a_majority_cycle_that_bradley_terry_cannot_represent(tmp_path):
    path = tmp_path / "cycle.yaml"
    path.write_text(CYCLE_YAML)
    judge = load_judge(f"population:{path}", None)
    P = matrix(judge, ["x", "y", "z"])
    np.testing.assert_allclose(P + P.T, 1.0, atol=1e-6)
    assert P[0, 1] == pytest.approx(2 / 3, abs=1e-3)  # x ≻ y
    assert P[1, 2] == pytest.approx(2 / 3, abs=1e-3)  # y ≻ z
    assert P[2, 0] == pytest.approx(2 / 3, abs=1e-3)  # z ≻ x: the majority cycles
    r = fit_bradley_terry((P + 1 - P.T) / 2)  # exact antisymmetry, past float32 rounding
    fitted = 1 / (1 + np.exp(-(r[:, None] - r[None, :])))
    # the best reward model sees three equals: it misreads every pair by 1/6
    np.testing.assert_allclose(r, 0.0, atol=1e-6)
    assert np.abs(fitted - P)[~np.eye(3, dtype=bool)].min() == pytest.approx(1 / 6, abs=1e-3)
    assert judge.definition["groups"][0]["criterion"] == "python:population_criteria:first"


def test_sampled_labels_match_p_in_expectation():
    judge = PopulationJudge(
        [
            AnnotatorGroup(
                "long", lambda p, t: torch.tensor([len(x) for x in t], dtype=torch.float32), 3, 2.0
            ),
            AnnotatorGroup(
                "short",
                lambda p, t: torch.tensor([-len(x) for x in t], dtype=torch.float32),
                1,
                2.0,
            ),
        ]
    )
    a, b = "a longer answer", "short"
    p = judge(["q"], [a], [b]).item()
    rows = judge.sample_labels(["q"] * 4000, [a] * 4000, [b] * 4000, random.Random(0))
    share = sum(r["chosen"] == a for r in rows) / len(rows)
    assert abs(share - p) < 4 * (p * (1 - p) / len(rows)) ** 0.5
    groups = {r["labeler"] for r in rows}
    assert groups == {"long", "short"}
    assert set(rows[0]) == {"prompt", "chosen", "rejected", "weight", "source", "labeler"}
    three = judge.sample_labels(["q"], [a], [b], random.Random(1), annotators=3)
    assert len(three) == 3


def test_a_python_population_with_a_judge_folder_as_criterion(tmp_path):
    from nlhf.models.reward_model import RewardModel
    from tiny_encoder import make_tiny_encoder

    make_tiny_encoder(tmp_path / "enc", "a good bad film".split())
    RewardModel.from_backbone(str(tmp_path / "enc")).save(tmp_path / "rm")
    judge = population_from_definition(
        {"groups": [{"criterion": str(tmp_path / "rm")}, {"criterion": "brevity", "weight": 2}]}
    )
    assert [g.name for g in judge.groups] == [str(tmp_path / "rm"), "brevity"]
    assert judge.weights.tolist() == pytest.approx([1 / 3, 2 / 3])
    assert judge(["x"], ["a good film"], ["bad"]).shape == (1,)


@pytest.mark.parametrize(
    "definition, said",
    [
        ({}, "needs a list 'groups'"),
        ({"groups": [{"weight": 1}]}, "needs a 'criterion'"),
        ({"groups": [{"criterion": "brevity", "weight": 0}]}, "weight must be > 0"),
        ({"groups": [{"criterion": "brevity", "colour": "red"}]}, "unknown field"),
        ({"groups": [{"criterion": "brevity"}, {"criterion": "brevity"}]}, "repeat"),
        ({"groups": [{"criterion": "vader"}]}, None),  # a score judge's spec works
    ],
)
def test_bad_definitions_name_what_is_wrong(definition, said):
    if said is None:
        population_from_definition(definition)
        return
    with pytest.raises(ModelError, match=said):
        population_from_definition(definition)


def test_every_built_in_criterion_scores_text():
    for name, (make, _) in CRITERIA.items():
        scores = make()(["p", "p"], ["A wonderful film!", "dull"])
        assert scores.shape == (2,) and torch.isfinite(scores).all(), name


def test_a_population_s_definition_is_recorded_in_the_run_config(tmp_path):
    import json

    import tiny_train
    from nlhf.train import nash_md

    population = population_from_definition(
        {"groups": [{"criterion": "vocabulary"}, {"criterion": "brevity", "temperature": 0.5}]}
    )
    trainer, config = tiny_train.make(
        "nash-md", str(tmp_path / "run"), ["steps=1"], judge=population
    )
    trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    record = json.loads((tmp_path / "run" / "config.json").read_text())
    assert record["judge_definition"] == population.definition
    assert record["judge_definition"]["groups"][1]["temperature"] == 0.5

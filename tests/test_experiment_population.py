"""``nlhf experiment population``: the analysis on constructed inputs (a 3-cycle, a 2-item game
worked by hand), the exact-population judges, the budget arithmetic, the command registered in
the CLI, and the whole command on tiny models (every stage, the report, a resumed run)."""

import json
import math

import numpy as np
import pytest
import torch

from nlhf.experiment.analysis import (
    accuracy,
    antisymmetric,
    bradley_terry_majority,
    criterion_shift,
    cyclic_triples,
    pairs_in_cycles,
    population_matrix,
    restricted_game,
)
from nlhf.experiment.config import POLICIES, ROUTES, TIMED, Config, Layout
from nlhf.experiment.exact_population import AnchoredBradleyTerry, CriterionJudge, exact_matrix
from nlhf.experiment.plan import pair_judge_configs, route_configs
from nlhf.experiment.stages import timed_steps
from nlhf.experiment.tuning import NASH_GRID, PPO_GRID, candidates
from nlhf.models.judges.population import AnnotatorGroup, PopulationJudge
from nlhf.resumable import resolved

# x ≻ y ≻ z ≻ x, each by 2/3: the three rotations of one ranking, one group each
CYCLE = np.array([[0.5, 2 / 3, 1 / 3], [1 / 3, 0.5, 2 / 3], [2 / 3, 1 / 3, 0.5]])


def sigmoid(x):
    return 1 / (1 + math.exp(-x))


def test_a_three_item_cycle_is_all_cyclic_and_an_order_is_not():
    assert cyclic_triples(CYCLE) == (1, 1)
    assert pairs_in_cycles(CYCLE) == {(0, 1), (0, 2), (1, 2)}
    order = antisymmetric(np.array([[0.5, 0.7, 0.8], [0.3, 0.5, 0.6], [0.2, 0.4, 0.5]]))
    assert cyclic_triples(order) == (0, 1) and pairs_in_cycles(order) == set()
    tie = CYCLE.copy()
    tie[0, 1] = tie[1, 0] = 0.5  # a tie breaks the cycle
    assert cyclic_triples(tie) == (0, 1)
    # four items: the cycle on 0, 1, 2 and a 3 that loses to all: 1 of the 4 triples
    four = np.full((4, 4), 0.5)
    four[:3, :3] = CYCLE
    four[:3, 3], four[3, :3] = 0.9, 0.1
    assert cyclic_triples(four) == (1, 4)
    assert pairs_in_cycles(four) == {(0, 1), (0, 2), (1, 2)}


def test_on_the_cycle_both_routes_stay_uniform_and_tie():
    game = restricted_game(CYCLE, tau=0.1)
    np.testing.assert_allclose(game.nash, 1 / 3, atol=1e-10)  # symmetric game
    np.testing.assert_allclose(game.reward, 0.0, atol=1e-10)  # BT sees three equals
    np.testing.assert_allclose(game.rlhf, 1 / 3, atol=1e-10)
    assert game.nash_vs_rlhf == pytest.approx(0.5)
    # the best reward misreads every pair of the cycle: its majority says nothing
    assert not bradley_terry_majority(CYCLE).any()


def test_two_item_prediction_matches_the_hand_values():
    # P(1 ≻ 2) = 0.7, uniform μ, τ = 0.1.  Nash: P(1 ≻ π) − P(2 ≻ π) = 0.2 for every π, so
    # π*(1) = σ(0.2/τ) = σ(2).  RLHF: r1 − r2 = logit(0.7), π_RLHF(1) = σ(logit(0.7)/τ).
    tau, P = 0.1, np.array([[0.5, 0.7], [0.3, 0.5]])
    game = restricted_game(P, tau)
    a, b = sigmoid(2.0), sigmoid(math.log(0.7 / 0.3) / tau)
    assert game.nash[0] == pytest.approx(a, abs=1e-10)
    assert game.rlhf[0] == pytest.approx(b, abs=1e-10)
    assert game.reward[0] - game.reward[1] == pytest.approx(math.log(0.7 / 0.3), abs=1e-9)
    # π*ᵀ P π_RLHF written out: ½ab + 0.7a(1−b) + 0.3(1−a)b + ½(1−a)(1−b)
    hand = 0.5 * a * b + 0.7 * a * (1 - b) + 0.3 * (1 - a) * b + 0.5 * (1 - a) * (1 - b)
    assert game.nash_vs_rlhf == pytest.approx(hand, abs=1e-10)
    assert game.nash_vs_reference == pytest.approx(0.5 + 0.1 * (2 * a - 1), abs=1e-10)
    # at equal KL the RLHF policy is π* itself (two items: one number fixes the policy)
    assert game.rlhf_kl > game.nash_kl
    assert game.nash_vs_rlhf_equal_kl == pytest.approx(0.5, abs=1e-9)


def test_criterion_shift_is_the_policy_mean_minus_the_plain_mean():
    scores = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]])
    shift = criterion_shift(np.array([0.5, 0.5, 0.0]), scores)
    np.testing.assert_allclose(shift, [0.5 - 1.0, 1.5 - 1.0])


def test_accuracy_counts_ties_half_and_gives_a_wilson_interval():
    acc = accuracy(np.array([0.9, 0.2, 0.5, 0.6]), np.array([True, True, False, False]))
    assert acc.correct == 1.5 and acc.n == 4 and acc.low < 0.375 < acc.high
    assert accuracy(np.array([]), np.array([], dtype=bool)).as_dict()["accuracy"] is None


def score_of(table):
    return lambda prompts, texts: torch.tensor([table[t] for t in texts], dtype=torch.float32)


def test_the_population_matrix_is_what_the_judge_says():
    judge = PopulationJudge(
        [
            AnnotatorGroup("a", score_of({"x": 0.0, "y": 1.0, "z": 3.0}), 2.0, 0.5),
            AnnotatorGroup("b", score_of({"x": 2.0, "y": 0.0, "z": 1.0}), 1.0, 1.5),
        ]
    )
    texts = ["x", "y", "z"]
    P = exact_matrix(judge, "p", texts)
    said = [[judge(["p"], [a], [b]).item() for b in texts] for a in texts]
    np.testing.assert_allclose(P, said, atol=1e-6)
    np.testing.assert_allclose(P + P.T, np.ones((3, 3)), rtol=0, atol=1e-15)
    by_hand = (2 / 3) * sigmoid((0.0 - 1.0) / 0.5) + (1 / 3) * sigmoid((2.0 - 0.0) / 1.5)
    scores = np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 1.0]])
    assert population_matrix(scores, [2.0, 1.0], [0.5, 1.5])[0, 1] == pytest.approx(by_hand)
    only_a = CriterionJudge(judge.groups[0])
    assert only_a(["p"], ["z"], ["x"]).item() == pytest.approx(sigmoid(3.0 / 0.5), abs=1e-6)


def test_the_bradley_terry_control_recovers_a_reward_exactly_and_needs_anchors():
    from nlhf.errors import UserError

    s = {"a": 0.0, "b": 0.4, "c": 1.0, "new": 0.7}
    one = PopulationJudge([AnnotatorGroup("only", score_of(s), 1.0, 0.5)])  # P is BT with r = s/T
    judge = AnchoredBradleyTerry(one, {"p": ["a", "b", "c"]})
    got = judge.scores(["p", "p"], ["new", "b"])
    anchors = (0.0 + 0.4 + 1.0) / 3 / 0.5
    torch.testing.assert_close(got, torch.tensor([0.7 / 0.5 - anchors, 0.4 / 0.5 - anchors]))
    with pytest.raises(UserError, match="no reference completions"):
        judge.scores(["elsewhere"], ["a"])


def test_every_route_gets_the_same_judged_comparisons(tmp_path):
    config = resolved(Config(out=str(tmp_path), comparisons=100, batch_size=16))
    assert config.steps == 7  # ⌈100 / 16⌉: one comparison per prompt and step
    layout = Layout(tmp_path)
    routes = route_configs(config, layout)
    assert list(routes) == list(ROUTES)
    assert {(c.steps, c.batch_size, c.time_limit) for c in routes.values()} == {(7, 16, 0)}
    assert {c.prompts for c in routes.values()} == {str(layout.train_prompts)}
    assert routes["ppo"].judge.endswith("reward-model/model")
    assert routes["nash-md"].judge.endswith("preference-model/model")
    assert routes["nash-md-exact"].judge == "population:default"
    judges = pair_judge_configs(config, layout)
    assert {c.data for c in judges.values()} == {str(layout.pairs)}  # the same labels
    quick = resolved(Config(quick=True))
    assert quick.steps * quick.batch_size >= quick.comparisons


def test_the_equal_time_route_takes_the_steps_that_fit_in_ppos_training_time():
    def stages(ppo_seconds: float, nash_seconds: float, nash_steps: int = 12) -> dict:
        return {
            "train ppo": {"steps": 12, "training_seconds": ppo_seconds},
            "train nash-md": {"steps": nash_steps, "training_seconds": nash_seconds},
        }

    assert timed_steps(stages(480.0, 120.0)) == 48  # 10 s per Nash-MD-PG step
    assert timed_steps(stages(100.0, 120.0)) == 10
    assert timed_steps(stages(0.1, 120.0)) == 1  # at least one step
    assert timed_steps(stages(1e6, 120.0)) == 8 * 12  # at most 8 × the Nash-MD-PG route's
    assert timed_steps(stages(5.0, 0.0)) == 12  # no measured time: the route's own steps


def test_the_tuning_grid_changes_one_setting_at_a_time_and_the_routes_take_the_choice(tmp_path):
    config = resolved(Config(out=str(tmp_path), ppo_lr=1e-4, nash_lr=2e-3))
    layout = Layout(tmp_path)
    found = candidates(config, layout)
    assert [c.route for c in found] == ["ppo"] * len(PPO_GRID) + ["nash-md"] * len(NASH_GRID)
    assert len({c.config.out for c in found}) == len(found)  # a folder each
    assert {c.config.steps for c in found} == {config.tune_steps}
    by_label = {(c.route, c.label): c for c in found}
    assert by_label["ppo", "given"].settings == {}
    assert by_label["ppo", "lr ×3"].config.lr == pytest.approx(3e-4)
    assert by_label["ppo", "8 epochs"].config.epochs == 8
    assert by_label["nash-md", "lr ×½"].config.lr == pytest.approx(1e-3)
    tuned = {"ppo": {"lr": 3e-4, "mini_batches": 4}, "nash-md": {"lr": 4e-3}}
    routes = route_configs(config, layout, tuned)
    assert (routes["ppo"].lr, routes["ppo-exact"].mini_batches) == (3e-4, 4)
    assert routes["nash-md"].lr == routes["nash-md-exact"].lr == 4e-3
    assert route_configs(config, layout)["ppo"].lr == 1e-4


def test_each_pair_gets_one_row_per_annotator(tmp_path):
    from nlhf.experiment.stages import label_pairs

    layout = Layout(tmp_path)
    layout.completions.parent.mkdir(parents=True)
    texts = ["good", "a fine long film", "bad bad"]
    saved = {"prompts": ["p1", "p2"], "completions": [texts, texts]}
    layout.completions.write_text(json.dumps({"train": saved, "eval": saved}))
    pairs = {}
    for k in (1, 5):
        config = resolved(Config(out=str(tmp_path), annotators=k))
        assert label_pairs(config, layout)["pairs"] == 6 * k  # 2 prompts × 3 pairs × k
        rows = [json.loads(line) for line in layout.pairs.read_text().splitlines()]
        pairs[k] = {(r["prompt"], *sorted((r["chosen"], r["rejected"]))) for r in rows}
        assert {r["labeler"] for r in rows} <= {"enthusiasts", "skimmers", "critics"}
    assert pairs[1] == pairs[5]  # the same pairs, k votes each


def test_bad_options_are_refused():
    with pytest.raises(ValueError, match="so that triples exist"):
        Config(samples=2)
    with pytest.raises(ValueError, match="comparisons must be > 0"):
        Config(comparisons=0)
    with pytest.raises(ValueError, match="annotators must be ≥ 1"):
        Config(annotators=0)


def test_the_command_is_registered():
    from nlhf.cli import COMMANDS, Command, CommandGroup, build_parser

    group = COMMANDS["experiment"]
    assert isinstance(group, CommandGroup)
    command = group.commands["population"]
    assert isinstance(command, Command) and command.module == "nlhf.experiment.run"
    parser = build_parser(["experiment", "population"])
    args = parser.parse_args(["experiment", "population", "--quick", "comparisons=8"])
    assert args._command is command


# --------------------------------------------------------------------------- end to end

TINY_SIZES = [
    "train_prompts=8",
    "samples=3",
    "eval_prompts=3",
    "eval_samples=3",
    "comparisons=4",
    "batch_size=2",
    "max_new_tokens=4",
    "judge_max_length=32",
    "tournament_samples=2",
    "lora_r=4",
    "tune=true",
    "tune_prompts=2",
    "tune_steps=1",
]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from eval_tiny import build_folders
    from tiny_encoder import make_tiny_encoder

    root = tmp_path_factory.mktemp("experiment-models")
    words = "the a movie film good bad great awful review write".split()
    return build_folders(root)["base"], make_tiny_encoder(root / "encoder", words)


def test_the_whole_experiment_runs_on_tiny_models_and_resumes(tmp_path, tiny_models, capsys):
    from nlhf.cli import main

    torch.set_num_threads(1)
    policy, encoder = tiny_models
    out = tmp_path / "run"
    argv = [
        "experiment", "population", "--out", str(out), "--no-progress",
        f"policy={policy}", f"encoder={encoder}", *TINY_SIZES,
    ]  # fmt: skip
    assert main(argv) == 0
    stages = json.loads((out / "stages.json").read_text())
    expected = ["prompts", "reference completions", "labels", "judges", "judge evaluation",
                "prediction", "tuning", *[f"train {r}" for r in POLICIES],
                "tournament"]  # fmt: skip
    assert list(stages) == expected
    assert all(stages[f"train {r}"]["comparisons"] == 4 for r in ROUTES)
    timed = stages[f"train {TIMED}"]  # the equal-time route: its steps follow PPO's seconds
    assert timed["steps"] == timed_steps(stages) >= 1
    assert "At equal wall-clock time" in (out / "report.md").read_text()
    tuning = json.loads((out / "tuning" / "tuning.json").read_text())
    for route, grid in (("ppo", PPO_GRID), ("nash-md", NASH_GRID)):
        entry = tuning["routes"][route]
        kept = [k for k in grid if k != "4 mini-batches"]  # 2 prompts per step: not in 4
        assert list(entry["candidates"]) == kept and entry["chosen"] in grid
        best = max(c["vs_reference"]["mean"] for c in entry["candidates"].values())
        assert entry["candidates"][entry["chosen"]]["vs_reference"]["mean"] == best
    chosen = json.loads((out / "policies" / "ppo" / "config.json").read_text())
    for key, value in tuning["routes"]["ppo"]["settings"].items():
        assert chosen[key] == pytest.approx(value)  # the route trained with what was chosen
    rows = [json.loads(line) for line in (out / "data" / "pairs.jsonl").read_text().splitlines()]
    assert rows and {"prompt", "chosen", "rejected", "labeler"} <= set(rows[0])
    evaluation = json.loads((out / "judges" / "evaluation.json").read_text())
    assert {"reward-model", "preference-model"} <= set(evaluation["judges"])
    prediction = json.loads((out / "prediction.json").read_text())
    assert 0 <= prediction["nash_vs_rlhf"]["mean"] <= 1
    assert prediction["cycles"]["eval"]["triples"] == 3  # 3 prompts × one triple of K = 3
    report = (out / "report.md").read_text()
    for section in ("## Verdict", "## 1. The population", "## 2. Judges", "## 3. The restricted",
                    "## 4. What theory predicts", "## 5. Tuning", "## 6. Training",
                    "## 7. Tournament", "Equilibrium check", "## 8. Completions",
                    "## 9. Configuration", "population_definition",
                    "- Theory: on", "worst-case win rate of π*_τ"):  # fmt: skip
        assert section in report
    assert (out / "results.png").stat().st_size > 0
    capsys.readouterr()
    assert main(argv) == 0  # everything is done: the same command only rebuilds the report
    said = capsys.readouterr().out
    assert all(f"[experiment] {s}: done in an earlier run, skipped" in said for s in expected)
    assert main([*argv, "seed=1"]) == 2  # other options: refused in one line
    assert "this run was started with other options" in capsys.readouterr().err

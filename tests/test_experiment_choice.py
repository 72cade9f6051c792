"""``nlhf experiment decoy`` and ``cycle``: the forced choice's types and exact judges, the
cells' games and trainer configs, the measurement arithmetic, bad options refused in one line,
and the whole decoy command on tiny models (every stage, the predictions before training, the
report, a resumed run)."""

import json
from dataclasses import replace

import numpy as np
import pytest
import torch

from nlhf.experiment.choice import (
    TypePreference,
    TypeReward,
    completion_type,
    render_question,
    type_counts,
)
from nlhf.experiment.choice_config import ROUTES, ChoiceLayout, CycleConfig, DecoyConfig
from nlhf.experiment.choice_measure import estimate, label_preferences, matched, shares, worst
from nlhf.experiment.choice_plan import cell_game, cell_judge_configs, route_configs
from nlhf.resumable import RunFolder, resolved

OPTIONS = ("blue", "green", "red")


def test_a_completions_type_is_the_only_option_it_names():
    assert completion_type(" blue.", OPTIONS) == 0
    assert completion_type(" Green, because", OPTIONS) == 1
    assert completion_type(" RED!", OPTIONS) == 2
    assert completion_type(" blue and green", OPTIONS) == 3  # two named: other
    assert completion_type(" purple", OPTIONS) == 3
    assert completion_type(" blueberry", OPTIONS) == 3  # whole words only
    assert type_counts([" blue", " red", " red", " none"], OPTIONS).tolist() == [1, 0, 2, 1]


def test_the_question_ends_with_the_answer_begun():
    assert render_question(None).endswith("Assistant: My favourite colour is")


def test_the_exact_judges_read_the_type():
    P = np.array([[0.5, 0.3, 0.9, 0.95], [0.7, 0.5, 0.6, 0.95], [0.1, 0.4, 0.5, 0.95]])
    P = np.vstack([P, [0.05, 0.05, 0.05, 0.5]])
    judge = TypePreference(P, OPTIONS)
    got = judge(["q"] * 3, [" blue", " green", " ?"], [" green", " blue", " red"])
    np.testing.assert_allclose(got.numpy(), [0.3, 0.7, 0.05], atol=1e-6)
    reward = TypeReward([1.0, 2.0, -1.0, -2.0], OPTIONS)
    assert reward.scores(["q"] * 2, [" red", " x"]).tolist() == [-1.0, -2.0]
    assert float(reward(["q"], [" green"], [" blue"])) == pytest.approx(
        torch.sigmoid(torch.tensor(1.0))
    )


def test_the_presets_choose_the_cells():
    assert DecoyConfig().cells == [0.05, 0.15, 0.3, 0.45]
    assert DecoyConfig(quick=True).cells == [0.05, 0.45]  # below and above 1 − 2w
    assert DecoyConfig(quick=True, rho=[0.3]).cells == [0.3]
    assert CycleConfig().cells == [0.1, 0.4]  # below and above the overturn at ¼


def test_each_cell_has_its_population_and_pair_distribution():
    P, pairs = cell_game(DecoyConfig(w=0.4, noise=0.05, other_share=0.1), 0.3)
    assert P[1, 0] == pytest.approx(0.59)  # B beats A 0.6 : 0.4, less the noise
    np.testing.assert_allclose(pairs, [0.315, 0.315, 0.27, 0.1])
    P, pairs = cell_game(CycleConfig(noise=0.05, other_share=0.1), 0.1)
    np.testing.assert_allclose(pairs[:3], 0.3)
    assert P[2, 0] > 0.5  # λ = 0.1 < ¼: the majority still cycles


def test_every_route_of_a_cell_has_one_budget_and_ppo_takes_the_paired_beta(tmp_path):
    config = resolved(DecoyConfig(out=str(tmp_path), quick=True))
    configs = route_configs(config, RunFolder(tmp_path), beta=0.123)
    assert list(configs) == list(ROUTES)
    assert {(c.steps, c.batch_size) for c in configs.values()} == {
        (config.steps, config.batch_size)
    }
    assert configs["ppo"].init_kl_coef == 0.123 and not configs["ppo"].adaptive_kl
    assert configs["nash-md"].tau == config.tau and configs["online-ipo"].beta == config.tau
    assert configs["ppo"].judge.endswith("reward-model/model")
    assert configs["online-ipo"].judge.endswith("preference-model/model")
    assert configs["nash-md"].exact_kl and configs["nash-md-exact"].exact_kl  # the decoy's
    sampled = route_configs(replace(config, exact_kl=False), RunFolder(tmp_path), beta=0.123)
    assert not sampled["nash-md"].exact_kl and not sampled["nash-md-exact"].exact_kl
    assert not resolved(CycleConfig(out=str(tmp_path), quick=True)).exact_kl


def test_both_judges_fit_the_cells_pairs_with_the_experiments_head_rate(tmp_path):
    config = resolved(DecoyConfig(out=str(tmp_path), quick=True, judge_head_lr=0.02))
    judges = cell_judge_configs(config, RunFolder(tmp_path / "cell"))
    assert set(judges) == {"reward-model", "preference-model"}
    for judge in judges.values():
        assert judge.data == str(tmp_path / "cell" / "pairs.jsonl")
        assert (judge.head_lr, judge.epochs) == (0.02, config.judge_epochs)


def test_the_measurement_is_the_type_arithmetic_with_an_interval():
    P = np.array([[0.5, 0.4], [0.6, 0.5]])
    est = estimate(lambda a, b: float(a @ P @ b), [[[0, 100], [100, 0]]], seed=0)
    assert est["mean"] == pytest.approx(0.6) and est["low"] == est["high"] == pytest.approx(0.6)
    mixed = estimate(lambda a, b: float(a @ P @ b), [[[50, 50], [100, 0]]], seed=0)
    assert mixed["low"] < 0.55 < mixed["high"]
    assert worst(P)(shares([1, 3])) == pytest.approx(
        min(0.25 * 0.5 + 0.75 * 0.6, 0.25 * 0.4 + 0.75 * 0.5)
    )
    assert matched({"mean": 0.54}, 0.5) and not matched({"mean": 0.56}, 0.5)


def test_the_interval_over_seeds_holds_the_variance_between_runs():
    P = np.array([[0.5, 0.4], [0.6, 0.5]])
    fn = lambda a, b: float(a @ P @ b)  # noqa: E731
    runs = [[[0, 100], [100, 0]], [[100, 0], [100, 0]]]  # no sampling error in either run
    assert [estimate(fn, [run], seed=0)["high"] for run in runs] == pytest.approx([0.6, 0.5])
    both = estimate(fn, runs, seed=0)
    assert both["mean"] == pytest.approx(0.55)  # the mean over the runs
    assert both["low"] == pytest.approx(0.5) and both["high"] == pytest.approx(0.6)


def test_the_labels_own_frequencies_and_their_fit(tmp_path):
    from nlhf.experiment.choice_report import label_fit, verdict
    from nlhf.experiment.choice_stages import label_wins

    config = resolved(DecoyConfig(out=str(tmp_path)))
    layout = ChoiceLayout(tmp_path)
    layout.cell(0.3).mkdir(parents=True)
    said = [(" green.", " blue"), (" green!", " blue."), (" blue", " green"), (" blue", " red"),
            (" red", " nothing"), (" blue", " blue, yes"), (" blue", " something")]  # fmt: skip
    rows = [{"prompt": "Q", "chosen": a, "rejected": b} for a, b in said]
    (layout.cell(0.3) / "pairs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    wins = label_wins(config, layout, 0.3, 0)  # a pair of one type (blue, blue) counts nowhere
    assert wins.tolist() == [[0, 1, 1, 1], [2, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]]
    P, n = label_preferences(wins)
    assert n[1, 0] == 3 and P[1, 0] == pytest.approx(2.5 / 4) and np.allclose(P + P.T, 1)
    assert P[1, 2] == 0.5 and n[1, 2] == 0  # never compared
    fit = label_fit(np.array([[0, 20, 9, 9], [10, 0, 9, 9], [1, 1, 0, 9], [1, 1, 1, 0]]))
    assert list(np.argsort(-fit["reward"])) == [0, 1, 2, 3]
    assert label_fit(np.array([[0, 5, 0, 0], [5, 0, 0, 0], [0, 0, 0, 5], [0, 0, 5, 0]])) is None
    cell = {"prediction": {"nash_vs_rlhf": 0.587}}
    far = {"nash-md": 0.0, "ppo": 0.0}
    for labelled, where in ((0.52, "already in the labels"), (0.58, "the judges' learning")):
        text = verdict({"mean": 0.5}, cell, 0.51, labelled, far, ("nash-md", "ppo"), 16)
        assert f"labels' own frequencies give {labelled:.3f}: {where}" in text


@pytest.mark.parametrize(
    "argv,said",
    [
        (["decoy", "w=0.6"], "w must lie in (0, 0.5)"),
        (["decoy", "rho=0.2,1.5"], "rho must be shares"),
        (["cycle", "options=red,red,blue"], "three different answers"),
        (["cycle", "routes=ppo,dpo"], "routes must be some of"),
        (["decoy", "noise=0.5"], "noise must lie"),
        (["decoy", "judge_head_lr=0"], "judge_head_lr must be > 0"),
    ],
)
def test_bad_options_stop_in_one_line_with_exit_2(argv, said, capsys):
    from nlhf.cli import main

    assert main(["experiment", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert said in err and len(err.splitlines()) == 1


def test_the_commands_are_registered():
    from nlhf.cli import COMMANDS

    for name in ("decoy", "cycle"):
        assert COMMANDS["experiment"].commands[name].module == f"nlhf.experiment.{name}"


# --------------------------------------------------------------------------- end to end

TINY = [
    "reference_samples=40",
    "pairs=32",
    "steps=1",
    "batch_size=4",
    "measure_samples=20",
    "max_new_tokens=3",
    "judge_max_length=48",
]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from eval_tiny import build_folders
    from tiny_encoder import make_tiny_encoder

    root = tmp_path_factory.mktemp("choice-models")
    words = "blue green red my favourite colour is".split()
    return build_folders(root)["base"], make_tiny_encoder(root / "encoder", words)


@pytest.mark.slow  # about 1.5 minutes on 2 shared cores
def test_the_decoy_experiment_runs_on_tiny_models_and_resumes(tmp_path, tiny_models, capsys):
    from nlhf.cli import main

    torch.set_num_threads(1)
    policy, encoder = tiny_models
    out = tmp_path / "run"
    argv = ["experiment", "decoy", "--quick", "--out", str(out), "--no-progress",
            f"policy={policy}", f"encoder={encoder}", *TINY]  # fmt: skip
    assert main(argv) == 0
    stages = list(json.loads((out / "stages.json").read_text()))
    cells = [f"{s} rho={v}" for v in ("0.05", "0.45")
             for s in ["labels", "judges", *[f"train {r}" for r in ROUTES], "measure"]]  # fmt: skip
    cells.remove("train nash-md-exact rho=0.45")  # its judge, P, is ρ=0.05's: that run serves
    assert stages == ["question", "reference types", "predictions", *cells]
    layout = ChoiceLayout(out)
    predictions = json.loads(layout.predictions.read_text())
    step = [predictions["cells"][c]["limit"]["nash_vs_rlhf"] for c in ("0.05", "0.45")]
    assert step[0] == pytest.approx(0.5, abs=0.01) and step[1] > 0.55  # the step, predicted
    written = [json.loads(line) for line in (layout.cell(0.45) / "pairs.jsonl").open()]
    assert len(written) == 32 and all(r["chosen"] != r["rejected"] for r in written)
    m = json.loads((layout.cell(0.45) / "measurement.json").read_text())
    assert set(m["policies"]) == set(ROUTES)
    shared = json.loads((layout.cell(0.05) / "measurement.json").read_text())["policies"]
    assert m["policies"]["nash-md-exact"]["examples"] == shared["nash-md-exact"]["examples"]
    assert not (layout.cell(0.45) / "policies" / "nash-md-exact").exists()
    assert all(sum(p["counts"]) == 20 for p in m["policies"].values())
    report = (out / "report.md").read_text()
    for part in ("## Verdict", "## 1. The prediction, written before training",
                 "## 3. Cells: prediction beside measurement", "nash-md-exact vs ppo-exact",
                 "## 5. Judges", "## 7. Configuration"):  # fmt: skip
        assert part in report
    assert "matched" in report and "never produced" in report  # a random model names no colour
    assert report.index("## 1. The prediction") < report.index("## 3. Cells")
    capsys.readouterr()
    assert main(argv) == 0  # everything done: only the report is rebuilt
    said = capsys.readouterr().out
    assert all(f"[experiment] {s}: done in an earlier run, skipped" in said for s in stages)
    assert main([*argv, "w=0.3"]) == 2  # other options: refused in one line


@pytest.mark.slow  # about 40 seconds on 2 shared cores
def test_every_seed_runs_each_cell_again_and_the_report_pools_them(tmp_path, tiny_models):
    from nlhf.cli import main
    from nlhf.experiment.choice_report import compare

    torch.set_num_threads(1)
    policy, encoder = tiny_models
    out = tmp_path / "run"
    argv = ["experiment", "decoy", "--quick", "--out", str(out), "--no-progress", "--seeds", "2",
            "--seed", "5", "rho=0.45", "routes=ppo,nash-md", f"policy={policy}",
            f"encoder={encoder}", *TINY]  # fmt: skip
    assert main(argv) == 0
    stages = list(json.loads((out / "stages.json").read_text()))
    each = ["labels", "judges", "train ppo", "train nash-md", "measure"]
    assert stages[3:] == [f"{s} rho=0.45{k}" for k in ("", " seed1") for s in each]
    layout = ChoiceLayout(out)
    first, second = layout.cell(0.45), layout.cell(0.45, 1)
    assert second.name == "0.45-seed1"
    assert (first / "pairs.jsonl").read_text() != (second / "pairs.jsonl").read_text()
    for folder, seed in ((first, 5), (second, 6)):  # every trainer of a run has its seed
        assert json.loads((folder / "policies" / "ppo" / "config.json").read_text())["seed"] == seed
        assert (folder / "measurement.json").exists()
    config = resolved(DecoyConfig(out=str(out), quick=True, seeds=2, seed=5, rho=[0.45]))
    mu = np.array(json.loads(layout.predictions.read_text())["mu"])
    pair = compare(config, layout, 0.45, mu)["pairs"][("nash-md", "ppo")]
    assert len(pair["seeds"]) == 2
    assert pair["estimate"]["mean"] == pytest.approx(np.mean(pair["seeds"]))
    assert pair["estimate"]["low"] <= pair["estimate"]["mean"] <= pair["estimate"]["high"]
    report = (out / "report.md").read_text()
    assert "the 2 seeds' runs and their samples" in report
    assert "ppo (seed 6)" in report and "0.45 (seed 5)" in report

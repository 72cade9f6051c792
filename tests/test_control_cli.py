"""The control commands (nlhf control train rlhf|nlhf, eval, demo): each route's --help lists
every field of its config; a short run of each route writes its policy, metrics and summary;
eval writes returns with intervals and head-to-head win rates; the demo's report, plot and
clips; without gymnasium every command fails with one line naming the extra."""

import dataclasses
import json
import shutil
import sys

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

from nlhf import cli
from nlhf.control import demo, routes
from nlhf.control.policy import ActingPolicy

TINY = ["--budget", "20", "--initial", "10", "progress=false", "--no-tensorboard"]


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    args = ["control", "train", "nlhf", "--out", str(out), "--steps", "2", *TINY]
    args += ["update=nash-md-pg", "states=2", "length=10", "chunk=5", "fit_epochs=2"]
    assert cli.main(args) == 0
    return out


@pytest.mark.parametrize(
    ("route", "config"), [("rlhf", routes.RLHFConfig), ("nlhf", routes.NLHFConfig)]
)
def test_each_route_s_help_lists_every_field_of_its_config(route, config, capsys):
    with pytest.raises(SystemExit):
        cli.main(["control", "train", route, "--help"])
    shown = capsys.readouterr().out
    missing = [
        f.name for f in dataclasses.fields(config) if f"--{f.name.replace('_', '-')} " not in shown
    ]
    assert not missing and len(dataclasses.fields(config)) > 50, missing


def test_train_writes_the_policy_metrics_and_summary(trained, capsys):
    assert ActingPolicy.load(trained / "policy").n_actions == 2
    rows = [json.loads(line) for line in (trained / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[-1]["labels"] == 20
    summary = json.loads((trained / "summary.json").read_text())
    assert summary["route"] == "nlhf" and summary["labels"] == 20 and summary["steps"] == 2
    assert summary["wall_seconds"] > 0 and summary["agent_steps"] == 2 * 2 * 4 * 10


def test_rlhf_route_runs_one_step_from_the_command_line(tmp_path):
    args = ["control", "train", "rlhf", "--labeler", "mistake", "--out", str(tmp_path), *TINY]
    args += ["--steps", "1", "--n-envs", "2", "n_steps=32", "mini_batches=2", "segment=10"]
    args += ["chunk=5"]
    assert cli.main(args) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["route"] == "rlhf" and summary["labeler"] == "mistake"
    assert summary["steps"] == 1 and summary["agent_steps"] == 2 * 32
    assert ActingPolicy.load(tmp_path / "policy").n_actions == 2


def test_eval_writes_returns_with_intervals_and_win_rates(trained, tmp_path):
    policy, twin = str(trained / "policy"), str(tmp_path / "twin")
    shutil.copytree(policy, twin)  # the same weights under a second name
    args = ["control", "eval", "--policies", f"{policy},{twin}", "--episodes", "4"]
    args += ["--pairs", "4", "--warmup", "3", "--length", "10", "--out", str(tmp_path)]
    assert cli.main(args) == 0
    result = json.loads((tmp_path / "eval.json").read_text())
    ret = result["returns"][policy]
    assert ret["n"] == 4 and ret["low"] <= ret["mean"] <= ret["high"]
    (game,) = result["head_to_head"]
    assert game["n"] == 4 and 0.0 <= game["mean"] <= 1.0
    assert "| P(A ≻ B) |" in (tmp_path / "eval.md").read_text()
    assert (tmp_path / "heatmap.png").stat().st_size > 1000


def test_the_head_to_head_matrix_mirrors_each_game():
    from nlhf.control.eval_cli import markdown, short_names, win_matrix

    paths = ["runs/a/rlhf/policy", "runs/a/nlhf/policy", "runs/ppo"]
    assert short_names(paths) == ["rlhf", "nlhf", "ppo"]
    assert short_names(["x/policy", "y/x/policy"]) == ["x/policy", "y/x/policy"]  # clash
    games = [
        {"a": paths[0], "b": paths[1], "mean": 0.7, "low": 0.6, "high": 0.8, "n": 9},
        {"a": paths[0], "b": paths[2], "mean": 0.4, "low": 0.3, "high": 0.5, "n": 9},
        {"a": paths[1], "b": paths[2], "mean": 0.5, "low": 0.45, "high": 0.55, "n": 9},
    ]
    ret = {"mean": 1.0, "low": 1.0, "high": 1.0, "n": 1}
    result = {"env": "e", "labeler": "oracle", "names": short_names(paths),
              "returns": dict.fromkeys(paths, ret), "head_to_head": games}  # fmt: skip
    mean, low, high = win_matrix(result)
    np.testing.assert_allclose(mean + mean.T, 1.0)
    assert (mean[1, 0], low[1, 0], high[1, 0]) == pytest.approx((0.3, 0.2, 0.4))
    assert np.isnan(low[0, 0]) and mean[2, 2] == 0.5
    assert "| **rlhf** | — | 0.700 [0.600, 0.800] | 0.400 [0.300, 0.500] |" in markdown(result)


def test_demo_report_plot_and_clip(trained, tmp_path):
    (tmp_path / "nlhf").mkdir()
    (tmp_path / "nlhf" / "metrics.jsonl").write_text((trained / "metrics.jsonl").read_text())
    demo.plot(tmp_path, ["nlhf"])
    assert (tmp_path / "curves.png").stat().st_size > 1000
    gif = demo.clip(ActingPolicy.load(trained / "policy"), "CartPole-v1", 10, seed=1)
    assert gif.startswith(b"GIF8")
    row = {"return": {"mean": 20.0, "low": 18.0, "high": 22.0}, "labels": 20, "steps": 2}
    game = {"mean": 0.62, "low": 0.55, "high": 0.69, "n": 200}
    config = demo.Config(budget=20, labeler="population")
    text = demo.report(config, {"nlhf": {**row, "seconds": 3.0}}, {"nlhf vs rlhf": game})
    assert "| nlhf | 20.0 [18.0, 22.0] | 20 | 2 | 3 |" in text
    assert "under the population labeler" in text
    assert "P(NLHF ≻ RLHF) = 0.620 [0.550, 0.690]: **NLHF beats RLHF**." in text
    tied = demo.report(config, {}, {"nlhf vs rlhf": {**game, "low": 0.45}})
    assert "0.620 [0.450, 0.690]: no significant difference (the interval contains ½)" in tied


@pytest.mark.parametrize("command", ["train rlhf", "train nlhf", "eval", "demo"])
def test_without_gymnasium_each_command_names_the_extra(monkeypatch, capsys, command):
    monkeypatch.setitem(sys.modules, "gymnasium", None)  # import gymnasium now fails
    args = ["control", *command.split()] + (["--policies", "x"] if command == "eval" else [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'nlhf[control]'" in err, err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["nope=1"], "unknown field 'nope' for RLHFConfig"),
        (["--labeler", "human"], "labeler=human needs db"),
        (["--labeler-options", "mistake"], "'mistake' is not key=value"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path, capsys, args, needle):
    assert cli.main(["control", "train", "rlhf", "--out", str(tmp_path), *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err, err


def test_eval_plays_at_the_sticky_setting_it_is_given(trained, capsys):
    policy = str(trained / "policy")
    args = ["control", "eval", "--policies", policy, "--episodes", "2", "--sticky", "0.25"]
    assert cli.main(args) == 2  # CartPole has no sticky actions: refused, not ignored
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "sticky: CartPole-v1 has no sticky actions" in err, err


def test_eval_refuses_a_policy_given_twice(capsys):
    assert cli.main(["control", "eval", "--policies", "a/policy,b,a/policy"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "policies: a/policy is given twice" in err, err


def test_the_demo_runs_end_to_end_with_its_head_to_head(tmp_path):
    torch.set_num_threads(1)
    args = ["control", "demo", "--out", str(tmp_path), "--minutes", "0.02", "--budget", "20"]
    args += ["--labeler", "population", "--episodes", "2", "--clip-steps", "5"]
    args += ["--pairs", "6", "--pair-steps", "10", "--no-progress"]
    assert cli.main(args) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    assert set(results) == {"ppo", "rlhf", "nlhf", "head_to_head"}
    game = results["head_to_head"]["nlhf vs rlhf"]
    assert game["n"] == 6 and game["low"] <= game["mean"] <= game["high"] and 0 <= game["mean"] <= 1
    assert "Head to head under the population labeler" in (tmp_path / "report.md").read_text()
    assert all(
        (tmp_path / f"clip-{n}.gif").read_bytes().startswith(b"GIF8")
        for n in results
        if n != "head_to_head"
    )

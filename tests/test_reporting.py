"""The shared report layer (nlhf.reporting): verdicts follow the interval, the training table
and curves read a trainer's logged steps, and a report numbers its sections and ends with the
run's options."""

import json
import os

import numpy as np
import pytest
import torch

from nlhf.reporting import (
    Report,
    compare,
    curve,
    smooth,
    training_table,
    verdict,
    verdict_lines,
)
from nlhf.resumable import RunFolder, StageLog


@pytest.mark.parametrize(
    ("low", "high", "said"),
    [
        (0.55, 0.69, "**a beats b**"),
        (0.31, 0.45, "**b beats a**"),
        (0.45, 0.69, "no significant difference (the interval contains ½)"),
        (None, None, "no significant difference (the interval contains ½)"),
    ],
)
def test_a_verdict_is_decided_by_the_interval_alone(low, high, said):
    text = verdict({"mean": 0.62, "low": low, "high": high}, "a", "b", digits=3)
    interval = "0.620" if low is None else f"0.620 [{low:.3f}, {high:.3f}]"
    assert text == f"P(a ≻ b) = {interval}: {said}"


def test_verdict_lines_cover_every_judge_and_pair():
    tournament = {
        "policies": [{"name": "reference"}, {"name": "x"}],
        "judges": {
            j: {"win_rate": [[0.5, 0.2], [0.8, 0.5]], "low": [[None, 0.1], [0.7, None]],
                "high": [[None, 0.3], [0.9, None]]}
            for j in ("vader", "pm")
        },
    }  # fmt: skip
    assert compare(tournament, "pm", "reference", "x") == {"mean": 0.2, "low": 0.1, "high": 0.3}
    lines = verdict_lines(tournament, [("x", "reference")])
    assert lines == [
        f"- `{j}`: P(x ≻ reference) = 0.80 [0.70, 0.90]: **x beats reference**"
        for j in ("vader", "pm")
    ]


def test_smooth_is_a_trailing_mean():
    x = np.array([1.0, 3.0, 5.0, 7.0])
    np.testing.assert_allclose(smooth(x, 2), [1.0, 2.0, 4.0, 6.0])
    np.testing.assert_allclose(smooth(x, 1), x)


ROWS = [  # a PPO run of 20 logged steps, 6 s each; the return only on every other step
    {"step": s, "step_seconds": 6.0, "kl": s / 10, "reward": float(s)}
    | ({"episode_return": 10.0 * s} if s % 2 == 0 else {})
    for s in range(1, 21)
]


def test_a_curve_counts_every_step_s_time_and_keeps_the_steps_that_logged_the_value():
    minutes, returns = curve(ROWS, "episode_return")
    np.testing.assert_allclose(minutes, [0.1 * s for s in range(2, 21, 2)])  # 6 s a step
    np.testing.assert_allclose(returns, [10.0 * s for s in range(2, 21, 2)])
    steps, kl = curve(ROWS, "kl", x="step")
    np.testing.assert_allclose(steps, range(1, 21))
    np.testing.assert_allclose(kl, [s / 10 for s in range(1, 21)])
    assert curve([], "kl")[0].shape == (0,)


def test_the_training_table_reads_the_end_of_each_run():
    stages = {"train ppo": {"seconds": 150.0}}
    lines = training_table({"ppo": ROWS, "idle": []}, {"ppo": "PPO", "idle": "idle"},
                           {"ppo": 16, "idle": 16}, stages)  # fmt: skip
    # the last 10% of 20 steps: steps 19 and 20; 20 steps × 6 s = 2 minutes
    assert "| PPO | 20 | 320 | 2.0 | 2.5 | 1.95 | reward 19.500 |" in lines
    assert "| idle | 0 | 0 | – | – | – | – |" in lines


def test_a_report_numbers_its_sections_and_ends_with_the_saved_options(tmp_path):
    layout = RunFolder(tmp_path)
    layout.config.write_text("seed: 0\n")
    layout.stages.write_text(json.dumps({"prompts": {"seconds": 6.0, "cpus": 2},
                                         "train": {"seconds": 54.0}}))  # fmt: skip
    text = Report("Title", ["- a verdict"], [("First", ["one"]), ("Second", ["two"])]).markdown(
        "nlhf x --out y", layout
    )
    assert text.startswith("# Title\n\nCommand: `nlhf x --out y`\n\nWall time 1.0 minutes ")
    assert "(prompts 0.1, train 0.9 minutes) on 2 CPUs." in text
    assert "## Verdict" in text and "- a verdict\n\n## 1. First\n\none\n\n## 2. Second" in text
    assert text.endswith("## 3. Configuration\n\n```yaml\nseed: 0\n```\n")


def test_a_stage_records_the_machines_speed_measured_before_it(tmp_path):
    log = StageLog(tmp_path / "stages.json", "test")
    torch.manual_seed(7)
    drawn = log.run("first", lambda: {"pairs": 3, "draw": float(torch.rand(()))})["draw"]
    torch.manual_seed(7)
    assert drawn == float(torch.rand(()))  # the probe leaves the global generator alone
    saved = json.loads((tmp_path / "stages.json").read_text())["first"]
    assert saved["pairs"] == 3 and saved["seconds"] >= 0
    assert saved["cpus"] == os.cpu_count() and saved["threads"] == torch.get_num_threads()
    assert saved["gflops"] > 0


def test_the_wall_time_names_the_range_of_the_machines_speed(tmp_path):
    layout = RunFolder(tmp_path)
    layout.config.write_text("seed: 0\n")
    record = {"cpus": 2, "threads": 2}
    stages = {name: {"seconds": 60.0, **record, "gflops": g}
              for name, g in (("a", 150.0), ("b", 210.4), ("c", 170.0))}  # fmt: skip
    layout.stages.write_text(json.dumps(stages))
    text = Report("Title", [], []).markdown("nlhf x", layout)
    assert (
        "minutes) on 2 CPUs, where a float32 matrix product (512³) ran at 150–210 GFLOP/s "
        "before the stages (median 170)." in text
    )

"""``nlhf control demo`` on a game beyond CartPole (nlhf.control.demo): both routes train on
Acrobot, its clips are drawn without pygame, a clip that fails is reported missing while the
run's numbers are kept, and curves.png plots each run's return, entropy and KL to μ."""

import json

import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

from nlhf import cli
from nlhf.control import demo


def test_acrobot_demo_reports_a_failing_clip_as_missing_and_keeps_the_run(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    calls, draw = [], demo.clip

    def flaky(*args, **kwargs):  # the second clip (RLHF's) fails
        calls.append(args[1])
        if len(calls) == 2:
            raise RuntimeError("no display")
        return draw(*args, **kwargs)

    monkeypatch.setattr(demo, "clip", flaky)
    args = ["control", "demo", "--env", "Acrobot-v1", "--out", str(tmp_path), "--minutes", "0.01"]
    args += ["--budget", "20", "--episodes", "2", "--clip-steps", "5", "--pairs", "4"]
    args += ["--pair-steps", "10", "--no-progress"]
    assert cli.main(args) == 0
    assert calls == ["Acrobot-v1"] * 3
    results = json.loads((tmp_path / "results.json").read_text())
    assert all(results[n]["labels"] and results[n]["steps"] >= 1 for n in ("rlhf", "nlhf"))
    assert results["head_to_head"]["nlhf vs rlhf"]["n"] == 4  # Acrobot's states continued
    report = (tmp_path / "report.md").read_text()
    assert "rlhf: clip missing (RuntimeError: no display)" in report
    assert "nlhf: ![nlhf](clip-nlhf.gif)" in report and not (tmp_path / "clip-rlhf.gif").exists()
    assert (tmp_path / "clip-nlhf.gif").read_bytes().startswith(b"GIF8")
    for name in ("rlhf", "nlhf"):  # what the plot's entropy and KL panels read
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").open()]
        assert {"entropy", "kl_per_step"} <= set(rows[-1])


def test_curves_plot_entropy_and_kl_of_the_runs_that_log_them(tmp_path, monkeypatch):
    rows = {
        "ppo": {"episode_return": 10.0, "entropy": 0.69, "step_seconds": 6.0},
        "nlhf": {"episode_return": 20.0, "entropy": 0.5, "kl_per_step": 0.1, "step_seconds": 6.0},
    }
    for name, row in rows.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "\n".join(json.dumps({**row, "step": s}) for s in range(3)) + "\n"
        )
    figures = []
    monkeypatch.setattr(demo, "save_png", lambda fig, path, dpi: figures.append(fig) or path)
    demo.plot(tmp_path, ["ppo", "nlhf"], target=475.0)
    (fig,) = figures
    lines = [[line.get_label() for line in ax.get_lines()] for ax in fig.axes]
    both = [demo.LABELS["ppo"], demo.LABELS["nlhf"]]
    assert lines == [both, both, [demo.LABELS["nlhf"]]]  # PPO logs no KL to μ; 475 unreached
    x, y = fig.axes[2].get_lines()[0].get_data()
    assert list(y) == [0.1] * 3 and list(x) == pytest.approx([0.1, 0.2, 0.3])

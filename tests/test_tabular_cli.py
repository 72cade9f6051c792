"""`nlhf tabular` end to end on small settings: files written, numbers consistent."""

import json
import subprocess
import sys

import numpy as np

from nlhf.cli import main


def test_tabular_writes_report_plot_and_summary(tmp_path):
    out = tmp_path / "lab"
    code = main(
        [
            "tabular",
            "--out",
            str(out),
            "--steps",
            "300",
            "--no-progress",
            "--games",
            "cycle,condorcet,bradley-terry",
            "algorithms=nash-md,nash-mp,self-play",
            "schedule=constant",
        ]
    )
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["steps"] == 300
    assert set(summary["games"]) == {"cycle", "condorcet", "bradley-terry"}
    cond = summary["games"]["condorcet"]
    assert set(cond["policies"]) == {"nash-md", "nash-mp", "self-play", "rlhf", "reference"}
    pi_star = np.array(cond["pi_star"])
    assert abs(pi_star.sum() - 1) < 1e-12
    # Nash-MP converges to the equilibrium; RLHF does not on the Condorcet game.
    assert cond["policies"]["nash-mp"]["kl_to_nash"] < 1e-10
    assert cond["rlhf_vs_nash"]["tv_rlhf_to_nash"] > 0.1
    assert summary["games"]["bradley-terry"]["rlhf_vs_nash"]["reward_fit_error"] < 1e-8
    report = (out / "report.md").read_text()
    assert "## condorcet" in report and "| Nash-MP (mirror prox) |" in report
    png = (out / "kl.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    assert not list(out.glob(".*.tmp"))


def test_console_script_help_lists_subcommands():
    result = subprocess.run(
        [sys.executable, "-m", "nlhf.cli", "--help"], capture_output=True, text=True, check=True
    )
    assert "tabular" in result.stdout


def test_the_convergence_study_from_the_command_line(tmp_path, capsys):
    out = tmp_path / "conv"
    assert main(["tabular", "--study", "convergence", "steps=300", "--out", str(out)]) == 0
    assert "cases in" in capsys.readouterr().out
    report = (out / "report.md").read_text()
    assert "EGPO" in report and "INPO" in report and "magnet" in report.lower()
    assert {p.name for p in out.glob("*.png")} >= {"rates_random.png", "rates_cycle.png"}

"""Nash-MD-PG on a tiny model: it learns what the judge prefers (lowercase letters), and a
SIGKILLed run resumes to exactly the weights and metrics of an uninterrupted one."""

import pytest

from online_harness import (
    assert_identical,
    kill_and_resume,
    metrics,
    policy_weights,
    tiny_setup,
    trained_win_rate,
)

SETUP = tiny_setup(
    "nash_md",
    "lr=3e-3, tau=0.05, beta=0.125",
    "return trainer, trainer.run(nash_md.NashMDPG(trainer, config), 'nash-md')",
)


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume(SETUP, tmp_path, "lora_r=4")
    a, b = policy_weights(full), policy_weights(resumed)
    assert_identical(a, b)

    def curve(folder):
        rows = metrics(folder)
        return [(r["step"], r["loss"], r["win_rate"], r["kl"]) for r in rows]

    assert curve(tmp_path / "full") == curve(tmp_path / "resumed")
    assert [s for s, *_ in curve(tmp_path / "full")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_nash_md_learns_what_the_judge_prefers(tmp_path):
    win = trained_win_rate(
        SETUP, f"train({str(tmp_path)!r}, steps=60, batch_size=8, lr=1e-2, checkpoint_every=1000)"
    )
    assert win > 0.8

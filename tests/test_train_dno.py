"""DNO (``nlhf train dno``) on a tiny model: large-margin pair selection; one step moves the
weights and logs every documented metric; pairs are replayed from a buffer that survives a
checkpoint; (slow) a SIGKILLed run resumes bit for bit, and it learns what the judge prefers."""

import pytest
import torch

import tiny_train
from nlhf.train import dno
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)


def test_large_margin_pairs_are_the_best_and_worst_when_far_enough_apart():
    win = torch.tensor([[0.9, 0.1, 0.5], [0.5, 0.55, 0.45], [0.5, 0.5, 0.5]])
    best, worst, kept = dno.large_margin_pairs(win, 0.25)
    assert best.tolist()[:2] == [0, 1] and worst.tolist()[:2] == [1, 2]
    assert kept.tolist() == [True, False, False]  # the tie row is never kept
    assert dno.large_margin_pairs(win, 0.0)[2].tolist() == [True, True, False]


def test_config_refuses_bad_values():
    for field, value in (("samples", 1), ("eta", 0.0), ("min_margin", 1.0), ("replay", -1.0)):
        with pytest.raises(ValueError, match=field):
            dno.Config(**{field: value})


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("dno", str(tmp_path), ["steps=1", "min_margin=0"])
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(dno.DNO(trainer, config), "dno")
    assert_one_documented_step(before, trainer, "dno", "dno")


def test_pairs_are_replayed_and_the_buffer_is_checkpointed(tmp_path):
    trainer, config = tiny_train.make(
        "dno", str(tmp_path), ["steps=3", "min_margin=0", "checkpoint_every=2", "replay=1.0"]
    )
    algorithm = dno.DNO(trainer, config)
    trainer.run(algorithm, "dno")
    rows = metrics(trainer.out)
    assert rows[0]["replayed"] == 0 and rows[1]["replayed"] > 0
    assert 0 < len(algorithm.buffer) <= config.buffer
    state = trainer.checkpoints.load_latest()
    saved = state["algorithm"]["buffer"]
    assert saved and set(saved[0]) == {"prompt", "chosen", "rejected"}
    fresh = dno.DNO(trainer, config)
    fresh.load_state_dict(state["algorithm"])
    assert list(fresh.buffer) == saved


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("dno", tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        return [(r["step"], r["loss"], r["kl"], r["replayed"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)


@pytest.mark.slow
def test_dno_learns_what_the_judge_prefers(tmp_path):
    win = trained_win_rate(
        "dno", tmp_path, "steps=60", "batch_size=8", "lr=1e-2", "checkpoint_every=1000"
    )
    assert win > 0.8

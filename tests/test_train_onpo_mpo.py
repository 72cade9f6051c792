"""ONPO, MPO, online IPO and EGPO (``nlhf train onpo|mpo|online-ipo|egpo``), presets of INPO,
Nash-MD-PG and online DPO: the first step of ONPO is INPO's and the second differs by the
predictor; MPO is self-play with the magnet reset; online IPO is online DPO's soft IPO loss
and EGPO adds the extragradient step; each logs every documented metric; (slow) a SIGKILLed
run resumes to exactly the weights and metrics of an uninterrupted one, and each learns what
the judge prefers."""

import pytest
import torch

import tiny_train
from nlhf.train import inpo, nash_md, online_dpo
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)


def test_the_presets_set_what_their_methods_are():
    onpo, mpo = inpo.OnpoConfig(), nash_md.MpoConfig()
    assert (onpo.step_rule, inpo.Config().step_rule) == ("optimistic", "plain")
    assert mpo.beta == 0.0 and mpo.magnet_every > 0 and nash_md.Config().magnet_every == 0
    assert (onpo.name, mpo.name, onpo.out, mpo.out) == ("onpo", "mpo", "runs/onpo", "runs/mpo")
    ipo, egpo = online_dpo.OnlineIpoConfig(), online_dpo.EgpoConfig()
    assert (ipo.loss_type, ipo.label, ipo.step_rule) == ("ipo", "soft", "plain")
    assert (egpo.loss_type, egpo.label, egpo.step_rule) == ("ipo", "soft", "extragradient")
    assert (ipo.name, egpo.name, online_dpo.Config().name) == ("online-ipo", "egpo", "")


@pytest.mark.parametrize(
    "name, algorithm, module",
    [
        ("onpo", inpo.INPO, "inpo"),
        ("mpo", nash_md.NashMDPG, "nash_md"),
        ("online-ipo", online_dpo.OnlineDPO, "online_dpo"),
        ("egpo", online_dpo.OnlineDPO, "online_dpo"),
    ],
    ids=["onpo", "mpo", "online-ipo", "egpo"],
)
def test_one_step_moves_every_weight_and_logs_every_documented_metric(
    tmp_path, name, algorithm, module
):
    trainer, config = tiny_train.make(name, str(tmp_path), ["steps=1"])
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm(trainer, config), name)
    assert_one_documented_step(before, trainer, name, module)


def test_onpo_is_inpo_until_there_is_a_last_gradient_to_predict_with(tmp_path):
    def weights_after(name, steps):
        trainer, config = tiny_train.make(
            name, str(tmp_path / f"{name}{steps}"), [f"steps={steps}"]
        )
        trainer.run(inpo.INPO(trainer, config), name)
        return [p.detach().clone() for p in trainer.params], trainer

    one_inpo, _ = weights_after("inpo", 1)
    one_onpo, trainer = weights_after("onpo", 1)
    assert all(torch.equal(a, b) for a, b in zip(one_inpo, one_onpo, strict=True))
    assert trainer.last_gradient is not None
    two_inpo, _ = weights_after("inpo", 2)
    two_onpo, _ = weights_after("onpo", 2)
    assert any(not torch.equal(a, b) for a, b in zip(two_inpo, two_onpo, strict=True))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["onpo", "mpo", "online-ipo", "egpo"])
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path, name):
    full, resumed = kill_and_resume(name, tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        return [(r["step"], r["loss"], r["kl"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["onpo", "mpo", "online-ipo", "egpo"])
def test_each_learns_what_the_judge_prefers(tmp_path, name):
    win = trained_win_rate(
        name, tmp_path, "steps=60", "batch_size=8", "lr=1e-2", "checkpoint_every=1000"
    )
    assert win > 0.8

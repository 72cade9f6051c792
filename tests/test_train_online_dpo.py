"""Online DPO / IPO (``nlhf train online-dpo``) on a tiny model: the pair loss in closed form
and the config checks; one step moves the weights and logs every documented metric, one decode
loop and one gradient forward per chunk, NaN judges; (slow) a SIGKILLed run that resumes
bit-identically, and learning what the judge prefers (lowercase letters)."""

import json
import math

import pytest
import torch

import tiny_train
from nlhf.losses import dpo_loss, ipo_loss
from nlhf.losses import online_pair_loss as pair_loss
from nlhf.train import online_dpo
from nlhf.train.online_dpo import Config
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)

# --------------------------------------------------------------------------- pure pieces


def test_hard_labels_order_pairs_by_the_judge_and_drop_ties():
    logps = torch.tensor([-1.0, -2.0, -3.0, -4.0, -2.5, -1.5], requires_grad=True)
    ref = torch.tensor([-1.5, -1.0, -3.0, -3.0, -2.0, -1.5])
    pref = torch.tensor([0.9, 0.5, 0.2])  # a wins, tie, b wins
    for kind, fn in (("dpo", dpo_loss), ("ipo", ipo_loss)):
        got = pair_loss(logps, ref, pref, 0.1, kind)
        chosen, rejected = logps[[0, 5]], logps[[3, 2]]
        expected = fn(chosen, rejected, ref[[0, 5]], ref[[3, 2]], 0.1)
        torch.testing.assert_close(got, expected)
    # every pair tied: loss 0, gradient 0, no NaN
    tied = pair_loss(logps, ref, torch.full((3,), 0.5), 0.1, "dpo")
    tied.backward()
    assert tied.item() == 0.0 and torch.equal(logps.grad, torch.zeros(6))


def test_soft_labels_match_their_closed_forms():
    logps = torch.tensor([-1.0, -2.0, -3.0, -4.0])
    ref = torch.tensor([-1.5, -1.0, -3.5, -3.0])
    beta = 0.5
    pref = torch.tensor([0.8, 0.3])
    # chosen: a (p=0.8) in row 0, b (p=0.7) in row 1
    h = torch.tensor([(-1.0 + 1.5) - (-3.0 + 3.5), (-4.0 + 3.0) - (-2.0 + 1.0)])
    p = torch.tensor([0.8, 0.7])

    def log_sigmoid(x):
        return -math.log1p(math.exp(-x))

    expected_dpo = (
        -sum(
            pi * log_sigmoid(beta * hi) + (1 - pi) * log_sigmoid(-beta * hi)
            for pi, hi in zip(p.tolist(), h.tolist(), strict=True)
        )
        / 2
    )
    got = pair_loss(logps, ref, pref, beta, "dpo", "soft")
    assert got.item() == pytest.approx(expected_dpo, rel=1e-5)
    expected_ipo = float(((h - (p - 0.5) / beta) ** 2).mean())
    assert pair_loss(logps, ref, pref, beta, "ipo", "soft").item() == pytest.approx(expected_ipo)
    # certain judgements: soft IPO is the hard IPO loss; soft DPO the hard DPO loss
    sure = torch.tensor([1.0, 0.0])
    for kind in ("dpo", "ipo"):
        torch.testing.assert_close(
            pair_loss(logps, ref, sure, beta, kind, "soft"),
            pair_loss(logps, ref, sure, beta, kind, "hard"),
        )


def test_pair_loss_and_config_reject_bad_settings():
    x = torch.zeros(2)
    with pytest.raises(ValueError, match="loss_type"):
        pair_loss(x, x, torch.ones(1), 0.1, "kto")
    with pytest.raises(ValueError, match="label"):
        pair_loss(x, x, torch.ones(1), 0.1, "dpo", "fuzzy")
    with pytest.raises(ValueError, match="beta must be > 0"):
        Config(beta=0.0)


# --------------------------------------------------------------------------- one step


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("online-dpo", str(tmp_path), ["steps=1"])
    algorithm = online_dpo.OnlineDPO(trainer, config)
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "online-dpo")
    assert_one_documented_step(before, trainer, "online-dpo", "online_dpo")


def test_one_decode_loop_one_reference_and_one_gradient_forward_per_chunk(tmp_path, monkeypatch):
    from nlhf.models import sample as real_sample
    from nlhf.models.policy import Policy

    overrides = ["steps=2", "batch_size=4", "grad_accum=2"]
    trainer, config = tiny_train.make("online-dpo", str(tmp_path), overrides)
    calls = {"sample": [], "logprobs": [], "reference": []}
    real_logprobs = Policy.logprobs_and_kl
    real_reference = Policy.reference_logprobs_and_logits

    def counting_sample(policy, ids, mask, *args, **kwargs):
        seeds = [g.initial_seed() for g in kwargs["generator"]]
        calls["sample"].append(((ids.shape[0], kwargs["num_samples"]), seeds))
        assert kwargs.get("reference") is None  # no reference forward per decoded token
        return real_sample(policy, ids, mask, *args, **kwargs)

    def counting_logprobs(self, prompt_ids, prompt_mask, completion_ids, *args):
        calls["logprobs"].append((prompt_ids.shape[0], completion_ids.shape[0]))
        return real_logprobs(self, prompt_ids, prompt_mask, completion_ids, *args)

    monkeypatch.setattr(online_dpo, "sample", counting_sample)

    def counting_reference(self, prompt_ids, prompt_mask, completion_ids, *args):
        calls["reference"].append((prompt_ids.shape[0], completion_ids.shape[0]))
        return real_reference(self, prompt_ids, prompt_mask, completion_ids, *args)

    monkeypatch.setattr(Policy, "logprobs_and_kl", counting_logprobs)
    monkeypatch.setattr(Policy, "reference_logprobs_and_logits", counting_reference)
    last = trainer.run(online_dpo.OnlineDPO(trainer, config), "online-dpo")
    # 2 steps × 2 chunks of 2 prompts: each one decode loop over the 2 prompts × 2 samples,
    # one gradient and one reference forward over the 4 completions (each prompt run once)
    assert [rows for rows, _ in calls["sample"]] == [(2, 2)] * 4
    assert calls["logprobs"] == [(2, 4)] * 4
    assert calls["reference"] == [(2, 4)] * 4  # one reference forward over the finished rows
    for _, seeds in calls["sample"]:
        assert len(set(seeds)) == 4  # the two samples of a prompt use distinct generators
    # (which metrics it logs: the one-step test above, against docs/trainers.md)
    assert all(math.isfinite(v) for v in last.values())
    assert 0.5 <= last["judge_chosen_prob"] <= 1.0
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]


def test_a_nan_judgement_stops_the_run_naming_step_and_quantity(tmp_path):
    def nan_judge(prompts, a, b):
        return torch.full((len(prompts),), float("nan"))

    trainer, config = tiny_train.make("online-dpo", str(tmp_path), ["steps=2"], judge=nan_judge)
    with pytest.raises(FloatingPointError, match="step 1: judge preference is not finite"):
        trainer.run(online_dpo.OnlineDPO(trainer, config), "online-dpo")


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("online-dpo", tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        return [(r["step"], r["loss"], r["reward_margin"], r["kl"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
@pytest.mark.parametrize(("loss_type", "beta"), [("dpo", 0.1), ("ipo", 0.05)])
def test_online_pair_training_learns_what_the_judge_prefers(tmp_path, loss_type, beta):
    win = trained_win_rate(
        "online-dpo",
        tmp_path,
        *("steps=40", "batch_size=8", "lr=1e-2", "checkpoint_every=1000"),
        *(f"loss_type={loss_type}", f"beta={beta}"),
    )
    assert win > 0.8

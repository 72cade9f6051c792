"""Nash-MD-PG (``nlhf train nash-md``) on a tiny model: its config checks; one step moves the
weights and logs every documented metric, a bf16 base trains fp32 adapters, a NaN judgement
stops the run naming the step or skips the update; (slow) a SIGKILLed run resumes to exactly
the weights and metrics of an uninterrupted one, and it learns what the judge prefers
(lowercase letters)."""

import pytest
import torch

import tiny_train
from nlhf.train import nash_md
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)

# --------------------------------------------------------------------------- pure pieces


@pytest.mark.parametrize(
    "field, value, message",
    [("tau", -0.1, "tau must be ≥ 0"), ("beta", 1.5, "beta must be in"), ("beta", -0.1, "beta")],
)
def test_config_rejects_bad_values(field, value, message):
    with pytest.raises(ValueError, match=message):
        nash_md.Config(**{field: value})


# --------------------------------------------------------------------------- one step


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("nash-md", str(tmp_path), ["steps=1"])
    algorithm = nash_md.NashMDPG(trainer, config)
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "nash-md")
    assert_one_documented_step(before, trainer, "nash-md", "nash_md")


def test_bfloat16_base_trains_float32_adapters(tmp_path):
    """dtype=bfloat16: the frozen base is bf16, the adapter and its optimizer fp32, and a
    step moves the adapter with finite losses."""
    from nlhf.models.tiny import tiny_byte_lm
    from nlhf.train.online import Trainer
    from nlhf.train.policy_fields import load_policy

    model, tok = tiny_byte_lm("llama")
    model.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    config = nash_md.Config(
        policy=str(tmp_path / "base"),
        dtype="bfloat16",
        lora_r=4,
        out=str(tmp_path / "run"),
        steps=2,
        batch_size=2,
        max_new_tokens=3,
        lr=1e-2,
        progress=False,
        tensorboard=False,
    )
    policy = load_policy(config)
    dtypes = {("lora_" in n, p.dtype) for n, p in policy.model.named_parameters()}
    assert dtypes == {(False, torch.bfloat16), (True, torch.float32)}

    def first_is_better(prompts, a, b):
        return torch.tensor([0.9] * len(prompts))

    trainer = Trainer(config, policy=policy, judge=first_is_better, prompts=["a", "b"])
    before = {n: p.detach().clone() for n, p in policy.model.named_parameters() if "lora_B" in n}
    trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    after = dict(policy.model.named_parameters())
    assert all(not torch.equal(before[n], after[n].detach()) for n in before)
    assert all(after[n].dtype == torch.float32 for n in before)


def three_steps(tmp_path, judge, *overrides):
    """Nash-MD-PG for 3 steps of 2 prompts, judged by ``judge``."""
    overrides = ["steps=3", "batch_size=2", "max_new_tokens=3", *overrides]
    trainer, config = tiny_train.make("nash-md", str(tmp_path), overrides, judge=judge)
    return trainer, nash_md.NashMDPG(trainer, config)


def test_nan_from_the_judge_stops_the_run_naming_step_and_quantity(tmp_path):
    def nan_judge(prompts, a, b):
        return torch.full((len(prompts),), float("nan"))

    trainer, algo = three_steps(tmp_path, nan_judge)
    # the step as metrics.jsonl numbers it: the first step is step 1
    with pytest.raises(FloatingPointError, match=r"step 1: loss is not finite"):
        trainer.run(algo, "nash-md")


def test_nan_can_skip_the_update(tmp_path):
    calls = {"n": 0}

    def sometimes_nan(prompts, a, b):
        calls["n"] += 1
        value = float("nan") if calls["n"] == 2 else 0.7
        return torch.full((len(prompts),), value)

    trainer, algo = three_steps(tmp_path, sometimes_nan, "on_nonfinite=skip")
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algo, "nash-md")
    rows = metrics(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r.get("skipped", 0.0) for r in rows] == [0.0, 1.0, 0.0]
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("nash-md", tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        return [(r["step"], r["loss"], r["win_rate"], r["kl"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_nash_md_learns_what_the_judge_prefers(tmp_path):
    win = trained_win_rate(
        "nash-md", tmp_path, "steps=60", "batch_size=8", "lr=1e-2", "checkpoint_every=1000"
    )
    assert win > 0.8


def test_magnet_reset_makes_the_reference_the_policy_every_n_steps(tmp_path):
    trainer, config = tiny_train.make("nash-md", str(tmp_path), ["steps=3", "magnet_every=2"])
    reference = trainer.policy.reference
    start = {k: v.clone() for k, v in reference.state_dict().items()}
    seen = {}
    after = trainer.after_step

    def watch(step):
        after(step)
        seen[step] = {k: v.clone() for k, v in reference.state_dict().items()}

    trainer.after_step = watch
    trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    model = trainer.policy.model.state_dict()
    assert all(torch.equal(seen[1][k], start[k]) for k in start)  # step 1: unchanged
    assert not all(torch.equal(seen[2][k], start[k]) for k in start)  # step 2: reset
    # the reference is the policy of step 2, not of step 3 (the last step resets nothing)
    assert all(torch.equal(seen[3][k], seen[2][k]) for k in start)
    assert not all(torch.equal(seen[3][k], model[k]) for k in start)
    with pytest.raises(ValueError, match="fsdp"):
        nash_md.Config(magnet_every=2, fsdp=True)


def test_under_lora_the_magnet_reset_freezes_a_copy_of_the_adapter(tmp_path):
    """Under LoRA, μ starts as the base model; after a reset it is base + the adapter of that
    step (a frozen second adapter), exactly: μ's log-probs equal the policy's at the reset and
    stay put while the adapter trains on; only the trained adapter is saved."""
    trainer, config = tiny_train.make(
        "nash-md", str(tmp_path), ["steps=4", "magnet_every=2", "lora_r=4", "lr=5e-2"]
    )
    policy = trainer.policy
    ids = torch.tensor([[5, 6, 7, 8]])
    mask = torch.ones_like(ids)
    out = torch.tensor([[9, 10, 11]])
    seen = {}
    after = trainer.after_step

    def watch(step):
        after(step)
        with torch.no_grad():
            seen[step] = (
                policy.sequence_logprobs(ids, mask, out).item(),
                policy.reference_logprobs(ids, mask, out).sum().item(),
            )

    trainer.after_step = watch
    base = policy.reference_logprobs(ids, mask, out).sum().item()
    trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    assert seen[1][1] == pytest.approx(base, abs=1e-6)  # before any reset: the base model
    assert seen[2][1] == pytest.approx(seen[2][0], abs=1e-5)  # the reset: μ = π of step 2
    assert seen[3][1] == pytest.approx(seen[2][1], abs=1e-6)  # frozen while π moves on
    assert abs(seen[3][0] - seen[3][1]) > 1e-4
    assert {p.requires_grad for n, p in policy.model.named_parameters() if ".magnet." in n} == {
        False
    }
    saved = tmp_path / "policy"
    assert (saved / "adapter_model.safetensors").exists() and not (saved / "magnet").exists()


@pytest.mark.slow
@pytest.mark.parametrize("lora", ["lora_r=0", "lora_r=4"])
def test_a_run_with_magnet_resets_resumes_bit_for_bit(tmp_path, lora):
    full, resumed = kill_and_resume("nash-md", tmp_path, "magnet_every=3", lora)
    assert_identical(policy_weights(full), policy_weights(resumed))
    assert [r["loss"] for r in metrics(full)] == [r["loss"] for r in metrics(resumed)]

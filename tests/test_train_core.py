"""The online training core's parts: Lion, schedules, prompt order, seeding, NaN handling."""

import pytest
import torch

from nlhf.train.lion import Lion
from nlhf.train.online import OnlineConfig, lr_factor, row_generators, step_rows


def test_lion_matches_its_update_rule():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5]))
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.1)
    m = torch.zeros(3)
    expected = p.detach().clone()
    for g in (torch.tensor([0.3, -0.1, 0.0]), torch.tensor([-1.0, 0.2, 0.5])):
        p.grad = g.clone()
        opt.step()
        c = 0.9 * m + 0.1 * g
        expected = expected * (1 - 0.1 * 0.1) - 0.1 * torch.sign(c)
        m = 0.99 * m + 0.01 * g
        torch.testing.assert_close(p.detach(), expected)
    with pytest.raises(ValueError, match="lr must be > 0"):
        Lion([p], lr=0.0)


def test_schedules():
    cfg = OnlineConfig(steps=10, warmup_steps=2, schedule="linear")
    f = lr_factor(cfg)
    assert [round(f(s), 3) for s in (0, 1, 2, 6, 10)] == [0.5, 1.0, 1.0, 0.5, 0.0]
    f = lr_factor(OnlineConfig(steps=10, schedule="cosine"))
    assert f(0) == 1.0 and f(5) == pytest.approx(0.5) and f(10) == pytest.approx(0.0)
    assert lr_factor(OnlineConfig(steps=10))(7) == 1.0


def test_schedules_follow_the_time_budget_when_there_is_one():
    seconds = [0.0]
    cfg = OnlineConfig(steps=10_000, time_limit=2.0, schedule="linear")
    f = lr_factor(cfg, lambda: seconds[0])
    assert f(5) == 1.0
    seconds[0] = 90.0  # three quarters of the two minutes, whatever the step
    assert f(5) == pytest.approx(0.25)
    seconds[0] = 150.0
    assert f(6) == 0.0
    assert lr_factor(cfg)(5_000) == pytest.approx(0.5)  # no clock given: by steps


def test_prompt_order_is_a_permutation_per_pass_and_seeded():
    rows = [r for step in range(5) for r in step_rows(step, 4, 20, seed=1)]
    assert sorted(rows) == list(range(20))  # one pass: every prompt once
    assert step_rows(3, 4, 20, seed=1) == step_rows(3, 4, 20, seed=1)
    assert step_rows(3, 4, 20, seed=1) != step_rows(3, 4, 20, seed=2)


def test_row_generators_do_not_depend_on_batching():
    a = [g.initial_seed() for g in row_generators(0, 5, [0, 1, 2, 3])]
    b = [g.initial_seed() for g in row_generators(0, 5, [2, 3])]
    assert a[2:] == b and len(set(a)) == 4


def test_config_checks():
    with pytest.raises(ValueError, match="multiple of grad_accum"):
        OnlineConfig(batch_size=6, grad_accum=4)
    with pytest.raises(ValueError, match="steps must be ≥ 1"):
        OnlineConfig(steps=0)
    with pytest.raises(ValueError, match="dtype=bfloat16 needs LoRA"):
        OnlineConfig(dtype="bfloat16", lora_r=0)


def test_bfloat16_base_trains_float32_adapters(tmp_path):
    """dtype=bfloat16: the frozen base is bf16, the adapter and its optimizer fp32, and a
    step moves the adapter with finite losses."""
    from nlhf.models.tiny import tiny_byte_lm
    from nlhf.train import nash_md
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


def _tiny_trainer(tmp_path, judge, **overrides):
    from nlhf.models import Policy
    from nlhf.models.tiny import tiny_byte_lm
    from nlhf.train import nash_md
    from nlhf.train.online import Trainer

    model, tok = tiny_byte_lm("gpt2")
    config = nash_md.Config(
        out=str(tmp_path),
        steps=3,
        batch_size=2,
        max_new_tokens=3,
        progress=False,
        tensorboard=False,
        **overrides,
    )
    trainer = Trainer(config, policy=Policy(model, tok), judge=judge, prompts=["a", "b", "c"])
    return trainer, nash_md.NashMDPG(trainer, config)


def test_nan_from_the_judge_stops_the_run_naming_step_and_quantity(tmp_path):
    def nan_judge(prompts, a, b):
        return torch.full((len(prompts),), float("nan"))

    trainer, algo = _tiny_trainer(tmp_path, nan_judge)
    with pytest.raises(FloatingPointError, match=r"step 0: loss is not finite"):
        trainer.run(algo, "nash-md")


def test_nan_can_skip_the_update(tmp_path):
    calls = {"n": 0}

    def sometimes_nan(prompts, a, b):
        calls["n"] += 1
        value = float("nan") if calls["n"] == 2 else 0.7
        return torch.full((len(prompts),), value)

    trainer, algo = _tiny_trainer(tmp_path, sometimes_nan, on_nonfinite="skip")
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algo, "nash-md")
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 3 and '"skipped": 1.0' in lines[1]
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))

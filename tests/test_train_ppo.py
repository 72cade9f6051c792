"""RLHF-PPO (``nlhf train ppo``) on a tiny model: the adaptive KL rule, the config and judge
checks, the value head's positions and gradients; one step moves the weights and logs every
documented metric, one PPO update on a fixed rollout, micro-batches, the checkpointed state;
(slow) exact resume after SIGKILL, and learning what a judge that counts lowercase letters
prefers."""

import pytest
import torch

import tiny_train
from nlhf.models import Policy, PolicyConfig, sample
from nlhf.models.judges import FunctionJudge
from nlhf.models.text import decode_completions as decode
from nlhf.models.text import tokenize_prompts as tokenize
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train import ppo
from nlhf.train.kl_control import KLController, adaptive_kl_factor
from nlhf.train.online import Trainer
from nlhf.train.value_head import ValueHead, logprobs_and_values
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    saved_tensors,
)
from trainer_docs import logged_metrics

PROMPTS = ["say a", "hello", "abc", "x", "the cat", "a b"]


def lowercase(prompt: str, text: str) -> float:
    return float(sum(ch.islower() for ch in text))


def make(tmp_path, lora_r=0, judge=None, **overrides):
    model, tok = tiny_byte_lm("gpt2")
    policy = Policy(model, tok, PolicyConfig(lora_r=lora_r))
    settings = dict(
        out=str(tmp_path), steps=2, batch_size=8, max_new_tokens=6, lr=3e-3,
        checkpoint_every=1000, progress=False, tensorboard=False, seed=3,
    )  # fmt: skip
    settings.update(overrides)
    config = ppo.Config(**settings)
    judge = judge if judge is not None else FunctionJudge(lowercase)
    trainer = Trainer(config, policy=policy, judge=judge, prompts=PROMPTS)
    return trainer, config


# --------------------------------------------------------------------------- pure pieces


def test_adaptive_kl_controller_follows_ziegler_rule():
    ctl = KLController(0.1, target=6.0, horizon=100)
    assert ctl.update(kl=6.6, samples=10) == pytest.approx(0.1 * (1 + 0.1 * 10 / 100))
    ctl = KLController(0.1, target=6.0, horizon=100)
    assert ctl.update(kl=600.0, samples=10) == pytest.approx(0.1 * 1.02)  # error clipped at +0.2
    ctl = KLController(0.1, target=6.0, horizon=100)
    assert ctl.update(kl=0.0, samples=10) == pytest.approx(0.1 * 0.98)  # clipped at −0.2
    assert adaptive_kl_factor(6.0, 6.0, 10, 100) == 1.0
    # Above target β keeps growing, below it shrinks; it converges geometrically, not at once.
    up = KLController(0.05, target=1.0, horizon=10)
    values = [up.update(kl=5.0, samples=5) for _ in range(3)]
    assert values == pytest.approx([0.05 * 1.1, 0.05 * 1.1**2, 0.05 * 1.1**3])


def test_fixed_kl_controller_never_moves_and_state_round_trips():
    fixed = KLController(0.05)
    assert not fixed.adaptive
    assert fixed.update(kl=100.0, samples=1000) == 0.05
    ctl = KLController(0.05, target=6.0, horizon=10)
    ctl.update(kl=20.0, samples=8)
    other = KLController(0.05, target=6.0, horizon=10)
    other.load_state_dict(ctl.state_dict())
    assert other.value == ctl.value != 0.05


@pytest.mark.parametrize(
    "kwargs", [dict(init=-1.0), dict(init=0.1, target=0.0), dict(init=0.1, horizon=0)]
)
def test_kl_controller_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        KLController(**kwargs)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (dict(batch_size=6, mini_batches=4), "mini_batches"),
        (dict(epochs=0), "epochs"),
        (dict(clip=0.0), "clip"),
        (dict(vf_coef=-1.0), "vf_coef"),
        (dict(lam=1.5), "lam"),
    ],
)
def test_config_rejects_bad_values_naming_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        ppo.Config(**overrides)


def test_a_pairwise_judge_is_refused_with_a_clear_message(tmp_path):
    trainer, config = make(tmp_path, judge=lambda prompts, a, b: torch.full((len(a),), 0.5))
    with pytest.raises(TypeError, match=r"scalar reward.*ScoreJudge.*nash-md"):
        ppo.PPO(trainer, config)


def test_values_sit_at_the_state_before_each_token_and_logprobs_match(tmp_path):
    trainer, _ = make(tmp_path)
    policy = trainer.policy
    ids, mask = tokenize(policy.tokenizer, PROMPTS, policy.device)
    y = sample(policy, ids, mask, 5, generator=torch.Generator().manual_seed(0))
    head = ValueHead(32)
    torch.nn.init.normal_(head.linear.weight)
    with torch.no_grad():
        out = logprobs_and_values(policy, head, ids, mask, y.tokens, y.mask)
    torch.testing.assert_close(out.logprobs, policy.logprobs(ids, mask, y.tokens, y.mask))
    assert (out.entropy[y.mask.bool()] > 0).all()
    assert (out.entropy <= torch.log(torch.tensor(float(len(policy.tokenizer))))).all()
    # V at t sees x and y_<t only: changing token 2 moves V at 3, not at 0..2.
    changed = y.tokens.clone()
    changed[:, 2] = (changed[:, 2] + 1) % 256
    full = torch.ones_like(y.mask)
    with torch.no_grad():
        a = logprobs_and_values(policy, head, ids, mask, y.tokens, full).values
        b = logprobs_and_values(policy, head, ids, mask, changed, full).values
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert (a[:, 3] - b[:, 3]).abs().min() > 0


def test_repeated_prompts_run_once_and_give_the_same_values_logprobs_and_gradients(tmp_path):
    """A batch whose prompt rows repeat (one prompt, several completions) runs each prompt
    once; its log-probs, values, entropies and gradients equal those of every row on its own."""
    trainer, config = make(tmp_path, lora_r=4, value_trunk="shared")
    algo = ppo.PPO(trainer, config)
    torch.nn.init.normal_(algo.head.linear.weight)
    policy = trainer.policy
    ids, mask = tokenize(policy.tokenizer, [PROMPTS[0], PROMPTS[1], PROMPTS[0]], policy.device)
    y = sample(policy, ids, mask, 4, generator=torch.Generator().manual_seed(0))
    params = [*policy.trainable_parameters(), *algo.head.parameters()]

    def run(parts):
        out = [algo.forward(ids[p], mask[p], y.tokens[p], y.mask[p]) for p in parts]
        fields = [
            torch.cat([getattr(o, f) for o in out]) for f in ("logprobs", "values", "entropy")
        ]
        loss = fields[0].sum() + fields[1].pow(2).sum()
        return fields, torch.autograd.grad(loss, params, allow_unused=True)

    together, grads = run([slice(0, 3)])
    alone, alone_grads = run([slice(r, r + 1) for r in range(3)])
    for a, b in zip(together, alone, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    for a, b in zip(grads, alone_grads, strict=True):
        if a is None or b is None:
            assert a is None and b is None
        else:  # float32 sums in another order: an error relative to the tensor's scale
            torch.testing.assert_close(a, b, atol=1e-6 * float(b.abs().max()), rtol=1e-4)
    assert any(g is not None and g.abs().sum() > 0 for g in grads[:-2])


@pytest.mark.parametrize("trunk", ["shared", "detached"])
def test_value_loss_reaches_the_lora_adapter_only_with_a_shared_trunk(tmp_path, trunk):
    trainer, config = make(tmp_path, lora_r=4, value_trunk=trunk)
    algo = ppo.PPO(trainer, config)
    torch.nn.init.normal_(algo.head.linear.weight)
    policy = trainer.policy
    ids, mask = tokenize(policy.tokenizer, PROMPTS, policy.device)
    y = sample(policy, ids, mask, 4, generator=torch.Generator().manual_seed(0))
    algo.forward(ids, mask, y.tokens, y.mask).values.pow(2).sum().backward()
    adapter = [p.grad for p in policy.trainable_parameters()]
    reached = any(g is not None and g.abs().sum() > 0 for g in adapter)
    assert reached == (trunk == "shared")
    assert algo.head.linear.weight.grad.abs().sum() > 0


# --------------------------------------------------------------------------- one step


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("ppo", str(tmp_path), ["steps=1"])
    algorithm = ppo.PPO(trainer, config)
    before = [p.detach().clone() for p in trainer.params]  # the value head's included
    trainer.run(algorithm, "ppo")
    assert_one_documented_step(before, trainer, "ppo", "ppo")


def test_one_update_lowers_policy_and_value_losses_on_a_fixed_rollout(tmp_path):
    trainer, config = make(tmp_path, epochs=4, mini_batches=2, lr=1e-2)
    algo = ppo.PPO(trainer, config)
    rollout = algo.rollout(trainer.batches(0), 0)
    everything = torch.arange(rollout.tokens.shape[0])

    def losses():
        with torch.no_grad():
            _, stats = algo.losses(rollout.rows(everything))
        return float(stats["policy_loss"]), float(stats["value_loss"])

    policy_before, value_before = losses()
    assert abs(policy_before) < 1e-4  # ratio 1 and whitened advantages: the surrogate is 0
    metrics = algo.optimize(rollout, 0)
    policy_after, value_after = losses()
    assert policy_after < policy_before - 0.01
    assert value_after < 0.9 * value_before  # values may move only ±cliprange_value
    assert 0.0 < metrics["clip_fraction"] < 1.0 and metrics["approx_kl"] > 0.0
    assert metrics["grad_norm"] > 0.0


def test_update_logs_the_documented_metrics_and_adapts_the_kl_coefficient(tmp_path):
    trainer, config = make(tmp_path, init_kl_coef=0.2, kl_target=0.01, kl_horizon=8, epochs=1)
    algo = ppo.PPO(trainer, config)
    metrics = algo.update(trainer.batches(0), 0)
    documented = logged_metrics("ppo", "ppo")
    assert set(metrics) <= documented, set(metrics) - documented
    assert metrics["kl_coef"] == 0.2
    expected = 0.2 * adaptive_kl_factor(metrics["kl"], 0.01, 8, 8)
    assert algo.kl.value == pytest.approx(expected)
    # A fixed coefficient stays put.
    trainer, config = make(tmp_path / "fixed", init_kl_coef=0.2, adaptive_kl=False, epochs=1)
    fixed = ppo.PPO(trainer, config)
    fixed.update(trainer.batches(0), 0)
    assert fixed.kl.value == 0.2


def test_micro_batches_give_the_gradient_of_the_whole_mini_batch(tmp_path):
    grads = []
    for accum in (1, 4):
        trainer, config = make(tmp_path / str(accum), grad_accum=accum, epochs=1)
        algo = ppo.PPO(trainer, config)
        torch.nn.init.normal_(algo.head.linear.weight, std=0.1)
        rollout = algo.rollout(trainer.batches(0), 0)
        seen = []

        def record(trainer=trainer, seen=seen):
            seen.append(torch.cat([p.grad.flatten() for p in trainer.params]))
            trainer.optimizer.zero_grad(set_to_none=True)
            return 1.0

        trainer.clip_and_step = record
        algo.optimize(rollout, 0)
        grads.append(torch.stack(seen))
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-4, atol=1e-6)


def test_checkpoint_state_carries_value_head_and_kl_coefficient(tmp_path):
    trainer, config = make(tmp_path, epochs=1)
    algo = ppo.PPO(trainer, config)
    algo.update(trainer.batches(0), 0)
    state = algo.state_dict()
    trainer2, _ = make(tmp_path / "other")
    other = ppo.PPO(trainer2, config)
    other.load_state_dict(state)
    assert other.kl.value == algo.kl.value
    torch.testing.assert_close(other.head.linear.weight, algo.head.linear.weight, rtol=0, atol=0)
    assert algo.head.linear.weight.abs().sum() > 0  # it was trained


# --------------------------------------------------------------------------- end to end


def saved_weights(folder):
    return {**policy_weights(folder), **saved_tensors(folder / "value_head.safetensors")}


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("ppo", tmp_path, unfinished="value_head.safetensors")
    a, b = saved_weights(full), saved_weights(resumed)
    assert "linear.weight" in a
    assert_identical(a, b)

    def curve(folder):
        rows = metrics(folder)
        return [{k: v for k, v in r.items() if not k.endswith("seconds")} for r in rows]

    full_curve = curve(full)
    assert full_curve == curve(resumed)
    assert [r["step"] for r in full_curve] == [1, 2, 3, 4, 5, 6]
    coefs = [r["kl_coef"] for r in full_curve]
    assert len(set(coefs)) > 1  # the adaptive coefficient moved, and resumed where it was


@pytest.mark.slow
def test_ppo_learns_what_the_judge_prefers(tmp_path):
    """Win rate = mean σ(s(y) − s(y_ref)) over 120 prompts: the judge's score s counts
    lowercase letters, y is sampled from the trained policy and y_ref from the reference."""
    trainer, config = make(tmp_path, steps=20, lr=5e-3)
    _, last = ppo.train(trainer, config)
    policy = trainer.policy
    prompts = PROMPTS * 20
    ids, mask = tokenize(policy.tokenizer, prompts, policy.device)
    g = torch.Generator().manual_seed(123)
    mine = sample(policy, ids, mask, 6, generator=g)
    ref = sample(policy, ids, mask, 6, reference=policy.reference, beta=1.0, generator=g)
    tok = policy.tokenizer
    score = trainer.judge.scores
    s = score(prompts, decode(tok, mine.tokens, mine.mask))
    s_ref = score(prompts, decode(tok, ref.tokens, ref.mask))
    win = float(torch.sigmoid(s - s_ref).mean())
    assert win > 0.8, (win, float(s.mean()), float(s_ref.mean()))
    assert last["reward"] > 3.0 and last["kl"] > 0.0

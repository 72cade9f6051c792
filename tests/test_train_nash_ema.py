"""Nash-EMA (``nlhf train nash-ema``) on a tiny model: swapping weights in and out restores
them, the config checks; one step moves the weights and logs every documented metric, the
moving average is the closed form, sampling the opponent leaves the policy untouched, the
average round-trips through a checkpoint; (slow) a SIGKILLed run resumes bit-identically (EMA
included), and it learns what the judge prefers (lowercase letters)."""

import copy

import pytest
import torch

import tiny_train
from nlhf.models import Policy, PolicyConfig, sample
from nlhf.models.judges import FunctionJudge
from nlhf.models.sampling import row_generators
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm
from nlhf.train import nash_ema
from nlhf.train.online import Trainer
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)

PROMPTS = ["say a", "hello", "abc", "x", "the cat", "a b"]


def make(tmp_path, lora_r=0, **overrides):
    tok = byte_tokenizer()
    model = tiny_causal_lm(
        "gpt2",
        vocab_size=len(tok),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        seed=0,
    )
    policy = Policy(model, tok, PolicyConfig(lora_r=lora_r))
    judge = FunctionJudge(lambda prompt, text: sum(ch.islower() for ch in text), scale=2.0)
    settings = dict(
        out=str(tmp_path),
        steps=3,
        batch_size=2,
        max_new_tokens=4,
        lr=1e-2,
        tau=0.05,
        ema_decay=0.7,
        progress=False,
        tensorboard=False,
        seed=1,
    )
    settings.update(overrides)
    config = nash_ema.Config(**settings)
    trainer = Trainer(config, policy=policy, judge=judge, prompts=PROMPTS)
    return trainer, nash_ema.NashEMA(trainer, config)


# --------------------------------------------------------------------------- pure pieces


def test_swapped_weights_restores_on_error_and_checks_names(tmp_path):
    trainer, _ = make(tmp_path)
    model = trainer.policy.model
    name, param = next(iter(model.named_parameters()))
    pointer, original = param.data_ptr(), param.detach().clone()
    with (
        pytest.raises(RuntimeError),
        nash_ema.swapped_weights(model, {name: torch.zeros_like(param)}),
    ):
        assert float(param.detach().abs().sum()) == 0.0
        raise RuntimeError("boom")
    assert param.data_ptr() == pointer and torch.equal(param.detach(), original)
    with pytest.raises(KeyError, match="no parameters named"):
        with nash_ema.swapped_weights(model, {"nope": torch.zeros(1)}):
            pass
    with pytest.raises(ValueError, match="shape"):
        with nash_ema.swapped_weights(model, {name: torch.zeros(3)}):
            pass
    assert param.data_ptr() == pointer and torch.equal(param.detach(), original)


@pytest.mark.parametrize("field, value", [("ema_decay", 1.5), ("ema_decay", -0.1), ("tau", -1)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        nash_ema.Config(**{field: value})


# --------------------------------------------------------------------------- one step


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("nash-ema", str(tmp_path), ["steps=1"])
    algorithm = nash_ema.NashEMA(trainer, config)
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "nash-ema")
    assert_one_documented_step(before, trainer, "nash-ema", "nash_ema")


def test_ema_after_k_steps_is_the_closed_form(tmp_path):
    trainer, algorithm = make(tmp_path)
    model, d = trainer.policy.model, 0.7
    history = [nash_ema.trainable_weights(model)]
    for step in range(4):
        algorithm.update(trainer.batches(step), step)
        history.append(nash_ema.trainable_weights(model))
    k = len(history) - 1
    assert not torch.equal(
        history[0]["transformer.h.0.attn.c_attn.weight"],
        history[-1]["transformer.h.0.attn.c_attn.weight"],
    )
    for name, value in algorithm.ema.items():
        expected = d**k * history[0][name] + sum(
            (1 - d) * d ** (k - j) * history[j][name] for j in range(1, k + 1)
        )
        torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)


def test_sampling_the_opponent_uses_the_ema_and_leaves_the_policy_untouched(tmp_path):
    trainer, algorithm = make(tmp_path, lora_r=4)
    model = trainer.policy.model
    g = torch.Generator().manual_seed(0)
    for value in algorithm.ema.values():  # an average far from the policy (B ≠ 0 under LoRA)
        value.add_(0.5 * torch.randn(value.shape, generator=g))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    batch = trainer.batches(0)[0]
    opponent = algorithm.sample_opponent(batch, 0)
    after = model.state_dict()
    assert before.keys() == after.keys()
    for key in before:
        assert torch.equal(before[key], after[key]), key
    assert all(p.data_ptr() == after[n].data_ptr() for n, p in model.named_parameters())

    # The same draw from a separate copy that carries the EMA weights.
    twin = copy.deepcopy(model)
    with torch.no_grad():
        params = dict(twin.named_parameters())
        for name, value in algorithm.ema.items():
            params[name].copy_(value)
    twin_policy = Policy(twin, trainer.policy.tokenizer)
    gens = row_generators(1, 0, batch.rows, salt=1)
    expected = sample(twin_policy, batch.ids, batch.mask, 4, generator=gens)
    assert torch.equal(opponent.tokens, expected.tokens)
    own = sample(
        trainer.policy, batch.ids, batch.mask, 4, generator=row_generators(1, 0, batch.rows, salt=1)
    )
    assert not torch.equal(own.policy_logprobs, opponent.policy_logprobs)


def test_state_round_trip_and_mismatch(tmp_path):
    trainer, algorithm = make(tmp_path)
    algorithm.update(trainer.batches(0), 0)
    state = algorithm.state_dict()
    _, fresh = make(tmp_path / "b")
    fresh.load_state_dict(state)
    for name in state["ema"]:
        assert torch.equal(fresh.ema[name], algorithm.ema[name])
    _, lora = make(tmp_path / "c", lora_r=2)
    with pytest.raises(ValueError, match="lora_r"):
        lora.load_state_dict(state)


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("nash-ema", tmp_path, "lora_r=4")
    assert_identical(policy_weights(full), policy_weights(resumed))
    ema_a, ema_b = torch.load(full / "ema.pt"), torch.load(resumed / "ema.pt")
    assert_identical(ema_a, ema_b)

    def curve(folder):
        rows = metrics(folder)
        return [(r["step"], r["loss"], r["win_rate"], r["kl"], r["ema_distance"]) for r in rows]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_nash_ema_learns_what_the_judge_prefers(tmp_path):
    win = trained_win_rate(
        "nash-ema",
        tmp_path,
        *("steps=30", "batch_size=8", "lr=1e-2", "ema_decay=0.9", "checkpoint_every=1000"),
    )
    assert win > 0.8

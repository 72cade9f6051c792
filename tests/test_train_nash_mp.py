"""Nash-MP (``nlhf train nash-mp``) on a tiny model: the folded proximal target, the config
checks; one step moves the weights and logs every documented metric, both proximal steps start
from the previous iterate, the update plays against the look-ahead policy, a failed iteration
leaves no trace; (slow) a SIGKILLed run resumes bit-identically, and it learns what the judge
prefers (lowercase letters)."""

import copy

import pytest
import torch

import tiny_train
from nlhf.losses import nash_md_pg_loss
from nlhf.models import Policy, PolicyConfig
from nlhf.models.judges import FunctionJudge
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm
from nlhf.train import nash_mp
from nlhf.train.core import NonFiniteError
from nlhf.train.online import Trainer
from nlhf.train.weights import trainable_weights
from online_harness import (
    assert_identical,
    assert_one_documented_step,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)

PROMPTS = ["say a", "hello", "abc", "x", "the cat", "a b"]


def lowercase(prompt, text):
    return sum(ch.islower() for ch in text)


def make(tmp_path, lora_r=0, judge=None, **overrides):
    tok = byte_tokenizer()
    model = tiny_causal_lm(
        "gpt2",
        vocab_size=len(tok),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        seed=0,
    )
    policy = Policy(model, tok, PolicyConfig(lora_r=lora_r))
    judge = judge or FunctionJudge(lowercase, scale=2.0)
    settings = dict(
        out=str(tmp_path),
        steps=2,
        batch_size=2,
        max_new_tokens=4,
        lr=1e-2,
        tau=0.05,
        eta=0.5,
        prox_steps=2,
        progress=False,
        tensorboard=False,
        seed=1,
    )
    settings.update(overrides)
    config = nash_mp.Config(**settings)
    trainer = Trainer(config, policy=policy, judge=judge, prompts=PROMPTS)
    return trainer, nash_mp.NashMP(trainer, config)


# --------------------------------------------------------------------------- pure pieces


def test_prox_target_folds_both_kl_terms_into_one():
    g = torch.Generator().manual_seed(0)
    lp = torch.randn(3, 5, generator=g, requires_grad=True)
    ref, anchor = torch.randn(3, 5, generator=g), torch.randn(3, 5, generator=g)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0], [1, 0, 0, 0, 0]]).bool()
    pref = torch.tensor([0.9, 0.2, 0.5])
    tau, lam = 0.05, 2.0
    target, total = nash_mp.prox_target(ref, anchor, tau, lam)
    folded = nash_md_pg_loss(lp, target, mask, pref, total)
    # advantage once, then each KL term with its own coefficient (advantage 0 for the second)
    separate = nash_md_pg_loss(lp, ref, mask, pref, tau) + nash_md_pg_loss(
        lp, anchor, mask, torch.full((3,), 0.5), lam
    )
    (g1,) = torch.autograd.grad(folded, lp)
    (g2,) = torch.autograd.grad(separate, lp)
    assert total == pytest.approx(2.05)
    torch.testing.assert_close(g1, g2)


@pytest.mark.parametrize("field, value", [("eta", 0.0), ("prox_steps", 0), ("tau", -0.1)])
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        nash_mp.Config(**{field: value})


# --------------------------------------------------------------------------- one step


def test_one_step_moves_every_weight_and_logs_every_documented_metric(tmp_path):
    trainer, config = tiny_train.make("nash-mp", str(tmp_path), ["steps=1"])
    algorithm = nash_mp.NashMP(trainer, config)
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "nash-mp")
    assert_one_documented_step(before, trainer, "nash-mp", "nash_mp")


def test_both_proximal_steps_start_from_the_previous_iterate(tmp_path, monkeypatch):
    trainer, algorithm = make(tmp_path, lora_r=4)
    model = trainer.policy.model
    theta_k = trainable_weights(model)
    calls = []
    original = nash_mp.NashMP._optimizer_step

    def spy(self, chunks, step, salt, anchor, opponent, at_anchor):
        calls.append(
            dict(
                start=trainable_weights(model),
                anchor=anchor,
                opponent=None if opponent is None else {k: v.clone() for k, v in opponent.items()},
                at_anchor=at_anchor,
                salt=salt,
                optimizer_steps=[s.get("step") for s in trainer.optimizer.state.values()],
            )
        )
        out = original(self, chunks, step, salt, anchor, opponent, at_anchor)
        calls[-1]["end"] = trainable_weights(model)
        return out

    monkeypatch.setattr(nash_mp.NashMP, "_optimizer_step", spy)
    metrics = algorithm.update(trainer.batches(0), 0)
    assert [c["at_anchor"] for c in calls] == [True, False, True, False]
    assert len({c["salt"] for c in calls}) == 4
    lookahead_end = calls[1]["end"]
    for name, value in theta_k.items():
        assert torch.equal(calls[0]["start"][name], value)  # look-ahead from θ_k
        assert torch.equal(calls[2]["start"][name], value)  # update from θ_k again
        assert all(torch.equal(c["anchor"][name], value) for c in calls)
        assert torch.equal(calls[2]["opponent"][name], lookahead_end[name])  # vs π_{k+½}
    assert calls[0]["opponent"] is None and calls[1]["opponent"] is None  # vs π_k
    assert any(not torch.equal(lookahead_end[n], theta_k[n]) for n in theta_k)
    # the optimizer state is reset too: the update phase starts with a fresh Adam
    assert calls[2]["optimizer_steps"] == calls[0]["optimizer_steps"] == []
    final = trainable_weights(model)
    for name in final:
        assert torch.equal(final[name], calls[3]["end"][name])
    assert metrics["step_distance"] > 0 and metrics["lookahead_distance"] > 0
    assert 0.0 <= metrics["win_rate"] <= 1.0 and 0.0 <= metrics["lookahead_win_rate"] <= 1.0


def test_anchor_logprobs_come_from_the_previous_iterate(tmp_path):
    trainer, algorithm = make(tmp_path)
    model, policy = trainer.policy.model, trainer.policy
    theta_k = trainable_weights(model)
    twin = copy.deepcopy(model)  # π_k, kept apart
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
    moved = {k: v.clone() for k, v in model.state_dict().items()}
    batch = trainer.batches(0)[0]
    y, opponent, anchor_lp = algorithm._rollout(batch, 0, 4, theta_k, None, at_anchor=False)
    for key, value in model.state_dict().items():  # sampling π_k left the policy alone
        assert torch.equal(value, moved[key]), key
    from nlhf.models.logprobs import completion_logprobs

    expected = completion_logprobs(twin, batch.ids, batch.mask, y.tokens, y.mask)
    torch.testing.assert_close(anchor_lp, expected)
    assert not torch.allclose(anchor_lp, y.policy_logprobs)
    own = policy.logprobs(batch.ids, batch.mask, opponent.tokens, opponent.mask)
    assert torch.isfinite(own).all()


def test_a_failed_iteration_is_rolled_back(tmp_path):
    state = {"fail": False, "n": 0}

    def score(prompt, text):
        state["n"] += 1
        return float("nan") if state["fail"] and state["n"] > 8 else lowercase(prompt, text)

    trainer, algorithm = make(tmp_path, judge=FunctionJudge(score, scale=2.0))
    algorithm.update(trainer.batches(0), 0)  # one clean iteration: Adam has state now
    before = trainable_weights(trainer.policy.model)
    opt_before = copy.deepcopy(trainer.optimizer.state_dict())
    state.update(fail=True, n=0)  # the update phase (3rd optimizer step) judges NaN
    with pytest.raises(NonFiniteError, match="loss is not finite"):
        algorithm.update(trainer.batches(1), 1)
    after = trainable_weights(trainer.policy.model)
    for name in before:
        assert torch.equal(before[name], after[name])
    opt_after = trainer.optimizer.state_dict()
    for key, saved in opt_before["state"].items():
        for field, value in saved.items():
            assert torch.equal(
                torch.as_tensor(value), torch.as_tensor(opt_after["state"][key][field])
            )


# --------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = kill_and_resume("nash-mp", tmp_path, "lora_r=4", "grad_accum=2")
    assert_identical(policy_weights(full), policy_weights(resumed))

    def curve(folder):
        keys = ("loss", "win_rate", "lookahead_win_rate", "kl", "prox_kl", "step_distance")
        return [(r["step"], *(r[k] for k in keys)) for r in metrics(folder)]

    assert curve(full) == curve(resumed)
    assert [s for s, *_ in curve(full)] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_nash_mp_learns_what_the_judge_prefers(tmp_path):
    win = trained_win_rate(
        "nash-mp",
        tmp_path,
        *("steps=30", "batch_size=8", "lr=1e-2", "prox_steps=1", "checkpoint_every=1000"),
    )
    assert win > 0.8

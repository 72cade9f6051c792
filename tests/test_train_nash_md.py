"""Nash-MD-PG on a tiny model: it learns what the judge prefers (lowercase letters), and a
SIGKILLed run resumes to exactly the weights and metrics of an uninterrupted one."""

import textwrap

import pytest

from online_harness import (
    assert_identical,
    kill_and_resume,
    metrics,
    policy_weights,
    trained_win_rate,
)

SETUP = textwrap.dedent(
    """
    import torch
    from nlhf.models import Policy, PolicyConfig
    from nlhf.models.judges import FunctionJudge
    from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm
    from nlhf.train import nash_md
    from nlhf.train.online import Trainer

    def make(out, **overrides):
        tok = byte_tokenizer()
        model = tiny_causal_lm("gpt2", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id, seed=0)
        policy = Policy(model, tok, PolicyConfig(lora_r=overrides.pop("lora_r", 0)))
        judge = FunctionJudge(lambda prompt, text: sum(ch.islower() for ch in text), scale=2.0)
        settings = dict(out=str(out), steps=6, batch_size=4, max_new_tokens=6, lr=3e-3,
                        checkpoint_every=2, tau=0.05, beta=0.125, progress=False,
                        tensorboard=False, seed=3)
        settings.update(overrides)
        config = nash_md.Config(**settings)
        trainer = Trainer(config, policy=policy, judge=judge,
                          prompts=["say a", "hello", "abc", "x", "the cat", "a b"])
        return trainer, config

    def train(out, **overrides):
        trainer, config = make(out, **overrides)
        return trainer, trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    """
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

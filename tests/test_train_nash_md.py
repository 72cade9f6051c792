"""Nash-MD-PG on a tiny model: it learns what the judge prefers (lowercase letters), and a
SIGKILLed run resumes to exactly the weights and metrics of an uninterrupted one."""

import json
import subprocess
import sys
import textwrap

import pytest
import torch

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


def run_script(body: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", SETUP + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def weights(folder):
    from safetensors.torch import load_file

    (path,) = (folder / "policy").glob("*.safetensors")  # the adapter under LoRA
    return load_file(str(path))


@pytest.mark.slow
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full = run_script(f"train({str(tmp_path / 'full')!r}, lora_r=4)")
    assert full.returncode == 0, full.stderr[-2000:]
    killed = run_script(
        f"""
        import os, signal
        from nlhf.train.checkpoint import Checkpointer
        original = Checkpointer.save
        def save_and_die(self, step, state):
            original(self, step, state)
            if step == 4:
                os.kill(os.getpid(), signal.SIGKILL)
        Checkpointer.save = save_and_die
        train({str(tmp_path / "resumed")!r}, lora_r=4)
        """
    )
    assert killed.returncode == -9
    assert not (tmp_path / "resumed" / "policy").exists()
    resumed = run_script(f"train({str(tmp_path / 'resumed')!r}, lora_r=4)")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming from step 4" in resumed.stdout
    a, b = weights(tmp_path / "full"), weights(tmp_path / "resumed")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)

    def curve(folder):
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        return [(r["step"], r["loss"], r["win_rate"], r["kl"]) for r in rows]

    assert curve(tmp_path / "full") == curve(tmp_path / "resumed")
    assert [s for s, *_ in curve(tmp_path / "full")] == [1, 2, 3, 4, 5, 6]


@pytest.mark.slow
def test_nash_md_learns_what_the_judge_prefers(tmp_path):
    result = run_script(
        f"""
        from nlhf.models import sample
        trainer, last = train({str(tmp_path)!r}, steps=60, batch_size=8, lr=1e-2,
                              checkpoint_every=1000)
        policy, judge = trainer.policy, trainer.judge
        from nlhf.train.online import decode, tokenize
        prompts = trainer.prompts * 20
        ids, mask = tokenize(policy.tokenizer, prompts, policy.device)
        g = torch.Generator().manual_seed(123)
        mine = sample(policy, ids, mask, 6, generator=g)
        ref = sample(policy, ids, mask, 6, reference=policy.reference, beta=1.0, generator=g)
        tok = policy.tokenizer
        p = judge(prompts, decode(tok, mine.tokens, mine.mask), decode(tok, ref.tokens, ref.mask))
        print("WIN", float(p.mean()))
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    win = float(result.stdout.split("WIN")[-1])
    assert win > 0.8

"""One online trainer on a tiny random-init GPT-2, for the end-to-end tests of each trainer.

    python tests/tiny_train.py ALGORITHM OUT [key=value ...] [--die-after-checkpoint N]
        [--win-rate]
    python tests/tiny_train.py nash-md runs/x lora_r=4 --die-after-checkpoint 4

ALGORITHM is nash-md, nash-ema, nash-mp, online-dpo, ppo, sppo, inpo, onpo, mpo or dno; it
trains into OUT for 6 steps of 4 prompts × 6 tokens with a checkpoint every 2 steps (seed 3),
against a judge that counts lowercase letters. ``key=value`` sets any field of the trainer's
``Config`` (typed as on the command line: ``lora_r=4 loss_type=ipo``), ``lora_r`` also the
policy's adapter.

- ``--die-after-checkpoint N``: SIGKILL this process right after the step-N checkpoint is
  written, before anything else (the resume tests resume the run from its files);
- ``--win-rate``: after training print ``win_rate <p>``, the judge's mean P(y ≻ y_ref) of a
  trained policy's sample against the reference's on 120 prompts.

nash-ema also writes its moving average to ``OUT/ema.pt``; ppo its value head to
``OUT/value_head.safetensors``.  tests/online_harness.py runs this script; the in-process
tests of each trainer build the same trainer with :func:`make`.
"""

import argparse
import os
import signal
from collections.abc import Callable, Sequence
from typing import Any

import torch

from nlhf.config import build_config
from nlhf.models import Policy, PolicyConfig, sample
from nlhf.models.judges import FunctionJudge
from nlhf.models.text import decode_completions, tokenize_prompts
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train import dno, inpo, nash_ema, nash_md, nash_mp, online_dpo, ppo, sppo
from nlhf.train.online import Trainer

PROMPTS = ["say a", "hello", "abc", "x", "the cat", "a b"]
SHARED = dict(
    steps=6, batch_size=4, max_new_tokens=6, checkpoint_every=2, progress=False,
    tensorboard=False, seed=3, lora_r=0,
)  # fmt: skip
ALGORITHMS = {  # module, algorithm, settings beyond SHARED, the judge's scale
    "nash-md": (nash_md, nash_md.NashMDPG, dict(lr=3e-3, tau=0.05, beta=0.125), 2.0),
    "nash-ema": (nash_ema, nash_ema.NashEMA, dict(lr=3e-3, tau=0.05, ema_decay=0.8), 2.0),
    "nash-mp": (nash_mp, nash_mp.NashMP, dict(lr=3e-3, tau=0.05, eta=0.5, prox_steps=2), 2.0),
    "online-dpo": (online_dpo, online_dpo.OnlineDPO, dict(lr=3e-3, beta=0.1), 2.0),
    "online-ipo": (online_dpo, online_dpo.OnlineDPO, dict(lr=3e-3, beta=0.1), 2.0),
    "egpo": (online_dpo, online_dpo.OnlineDPO, dict(lr=3e-3, beta=0.1), 2.0),
    "sppo": (sppo, sppo.SPPO, dict(lr=3e-3, samples=3, eta=1.0), 2.0),
    "inpo": (inpo, inpo.INPO, dict(lr=3e-3, samples=4, eta=0.5, tau=0.1), 2.0),
    "onpo": (inpo, inpo.INPO, dict(lr=3e-3, samples=4, eta=0.5, tau=0.1), 2.0),
    "mpo": (nash_md, nash_md.NashMDPG, dict(lr=3e-3, tau=0.05, magnet_every=3), 2.0),
    "dno": (dno, dno.DNO, dict(lr=3e-3, samples=3, eta=1.0, min_margin=0.1, replay=1.0), 2.0),
    "ppo": (
        ppo,
        ppo.PPO,
        dict(lr=1e-2, epochs=1, mini_batches=2, kl_horizon=8, kl_target=0.01, lora_r=4),
        1.0,
    ),
}


PRESETS = {  # presets of another's Config
    "onpo": inpo.OnpoConfig,
    "mpo": nash_md.MpoConfig,
    "online-ipo": online_dpo.OnlineIpoConfig,
    "egpo": online_dpo.EgpoConfig,
}


def lowercase(prompt: str, text: str) -> float:
    return float(sum(ch.islower() for ch in text))


def make(
    name: str, out: str, overrides: Sequence[str] = (), judge: Callable | None = None
) -> tuple[Trainer, Any]:
    """The trainer and config of ``name`` in ``out`` with ``key=value`` ``overrides`` (and, for
    the in-process tests, another ``judge(prompts, a, b) -> P(a ≻ b)``)."""
    module, _, settings, scale = ALGORITHMS[name]
    values = {**SHARED, **settings, "out": out}
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep:
            raise SystemExit(f"tiny_train.py: {item!r} is not key=value")
        values[key] = raw
    config = build_config(PRESETS.get(name, module.Config), values)
    model, tok = tiny_byte_lm("gpt2")
    policy_config = PolicyConfig(
        lora_r=config.lora_r, gradient_checkpointing=config.gradient_checkpointing
    )
    policy = Policy(model, tok, policy_config)
    judge = judge if judge is not None else FunctionJudge(lowercase, scale=scale)
    return Trainer(config, policy=policy, judge=judge, prompts=PROMPTS), config


def die_after_checkpoint(trainer: Trainer, step: int) -> None:
    """SIGKILL this process as soon as the step-``step`` checkpoint is on disk."""
    save = trainer.checkpoints.save

    def save_then_die(at: int, state: dict) -> None:
        save(at, state)
        if at == step:
            os.kill(os.getpid(), signal.SIGKILL)

    trainer.checkpoints.save = save_then_die


def train(name: str, trainer: Trainer, config: Any) -> None:
    _, algorithm, _, _ = ALGORITHMS[name]
    if name == "ppo":
        ppo.train(trainer, config)  # also writes value_head.safetensors
        return
    built = algorithm(trainer, config)
    trainer.run(built, name)
    if name == "nash-ema":
        torch.save(built.ema, f"{config.out}/ema.pt")


def win_rate(trainer: Trainer) -> float:
    """Mean judge P(policy sample ≻ initial model's sample) over the prompts × 20 (the initial
    model, not ``policy.reference``, which a magnet reset moves)."""
    policy, tok = trainer.policy, trainer.policy.tokenizer
    initial = tiny_byte_lm("gpt2")[0].to(policy.device).eval()
    prompts = trainer.prompts * 20
    ids, mask = tokenize_prompts(tok, prompts, policy.device)
    g = torch.Generator().manual_seed(123)
    mine = sample(policy, ids, mask, 6, generator=g)
    ref = sample(policy, ids, mask, 6, reference=initial, beta=1.0, generator=g)
    p = trainer.judge(
        prompts,
        decode_completions(tok, mine.tokens, mine.mask),
        decode_completions(tok, ref.tokens, ref.mask),
    )
    return float(p.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("algorithm", choices=sorted(ALGORITHMS))
    parser.add_argument("out")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    parser.add_argument("--die-after-checkpoint", type=int, metavar="N")
    parser.add_argument("--win-rate", action="store_true")
    args = parser.parse_args()
    trainer, config = make(args.algorithm, args.out, args.overrides)
    if args.die_after_checkpoint:
        die_after_checkpoint(trainer, args.die_after_checkpoint)
    train(args.algorithm, trainer, config)
    if args.win_rate:
        print(f"win_rate {win_rate(trainer)}")


if __name__ == "__main__":
    main()

"""A few steps of online training on a tiny random-init GPT-2, for the multi-process test.

    python tests/distributed_run.py OUT [ALGORITHM ...] [--grad-accum N] [--fsdp] [--lora-r R]
        [--gradient-checkpointing] [--then OUT [ALGORITHM ...] [...]]
    accelerate launch --cpu --num_processes 2 --num_machines 1 --mixed_precision no \\
        --dynamo_backend no tests/distributed_run.py OUT nash-md ppo

Each algorithm (nash-md, ppo, online-dpo, nash-ema, nash-mp) trains into ``OUT/<algorithm>``
with the same global batch (``--fsdp``: the model sharded over the processes); the judge
counts lowercase letters (a plain function, so every launched process builds its own).
``--then`` starts another job with its own folder and options, run after the previous one by
the same processes (an interpreter start fewer).  tests/test_train_distributed.py compares
the outputs of one and of two processes.
"""

import argparse
import sys

from nlhf.models import Policy, PolicyConfig
from nlhf.models.judges import FunctionJudge
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train import nash_ema, nash_md, nash_mp, online_dpo, ppo
from nlhf.train.online import Trainer

PROMPTS = ["say a", "hello", "abc", "x", "the cat", "a b", "Hi", "zz top"]
ALGORITHMS = {
    "nash-md": (nash_md, nash_md.NashMDPG, {}),
    "ppo": (ppo, ppo.PPO, {"epochs": 2, "mini_batches": 2, "lr": 3e-3}),
    "online-dpo": (online_dpo, online_dpo.OnlineDPO, {"label": "soft"}),
    "nash-ema": (nash_ema, nash_ema.NashEMA, {"ema_decay": 0.5}),
    "nash-mp": (nash_mp, nash_mp.NashMP, {"prox_steps": 2}),
}


def lowercase(prompt: str, text: str) -> float:
    return float(sum(ch.islower() for ch in text))


def train(
    out: str,
    name: str,
    grad_accum: int,
    fsdp: bool = False,
    lora_r: int = 0,
    gradient_checkpointing: bool = False,
) -> None:
    module, algorithm, extra = ALGORITHMS[name]
    model, tok = tiny_byte_lm("gpt2")
    config = PolicyConfig(lora_r=lora_r, gradient_checkpointing=gradient_checkpointing)
    policy = Policy(model, tok, config)
    settings = dict(
        out=f"{out}/{name}", steps=3, batch_size=4, grad_accum=grad_accum, max_new_tokens=5,
        lr=1e-2, checkpoint_every=2, progress=False, tensorboard=False, seed=3, fsdp=fsdp,
    )  # fmt: skip
    settings.update(extra)
    config = module.Config(**settings)
    trainer = Trainer(config, policy=policy, judge=FunctionJudge(lowercase), prompts=PROMPTS)
    if name == "ppo":
        ppo.train(trainer, config)  # also writes value_head.safetensors
    else:
        trainer.run(algorithm(trainer, config), name)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    jobs: list[list[str]] = [[]]
    for arg in argv:
        if arg == "--then":
            jobs.append([])
        else:
            jobs[-1].append(arg)
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("algorithms", nargs="*", default=["nash-md", "ppo"])
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--fsdp", action="store_true")
    parser.add_argument("--lora-r", type=int, default=0)
    parser.add_argument("--gradient-checkpointing", action="store_true")
    for job in jobs:
        args = parser.parse_args(job)
        for name in args.algorithms:
            train(
                args.out, name, args.grad_accum, args.fsdp, args.lora_r, args.gradient_checkpointing
            )


if __name__ == "__main__":
    main()

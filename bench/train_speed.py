"""Speed and peak memory of one training step: our online trainers against TRL 1.12's.

    .venv/bin/python bench/train_speed.py            # writes bench/results/train_speed.json
    .venv/bin/python bench/train_speed.py --runs nash_md:32,ppo:32
    .venv/bin/python bench/train_speed.py --one nash_md --tokens 32   # ours only, in-process
    .venv/bin/python bench/train_speed.py --workload smollm2 --rounds 1   # train_speed_smollm2.json
    .venv/bin/python bench/train_speed.py --smoke     # both workloads, 1 round of 1+1 steps
    .venv/bin/python bench/train_speed.py --workload smollm2 --runs nash_md:64+gc

The peer is the TRL CPU baseline in ``shared/bench/trl`` (:data:`common.PEER`; ``bench.py``,
its own venv and
models made by its ``prepare.py``).  Every run, peer or ours, is a fresh subprocess, so peak
RSS (``ru_maxrss`` read after training) is per process; peer and ours alternate run by run in
one invocation of this script, so both see the same machine, for ``--rounds`` rounds (3; the
order flips each round) whose medians are reported: one run's ratio moves by about ±10% on
this shared machine.

Workload, identical on both sides: the peer's GPT-2 policy (4 layers, 4 heads, 256 dims,
3.74 M parameters) and reference copy from ``<models>/policy``, its byte-level BPE tokenizer
(``tok/``), its 256 prompts; 8 prompts per step; completions per prompt as the peer (Nash-MD:
y ~ π and y′ ~ π_β with β = 0.5, the peer's ``mixture_coef``; online DPO: 2; PPO: 1);
32 new tokens (and 128 for Nash-MD); temperature 1; fp32; 2 torch threads; every weight
trained (our ``lora_r=0``: a frozen reference copy, like the peer); AdamW lr 1e-5; 2 warm-up
and 10 measured steps, the median of the 10 reported.  Judges: for Nash-MD and PPO the peer's
random GPT2ForSequenceClassification reward model (``<models>/reward``) wrapped as our
:class:`~nlhf.models.judges.RewardModelJudge` (Nash-MD: P = σ(r(y) − r(y′)), as TRL); for
online DPO the peer's ``vowel_fraction`` of the completion text as a
:class:`~nlhf.models.judges.FunctionJudge`.  PPO: 4 epochs, 1 mini-batch (4 optimizer steps per
rollout), fixed KL coefficient, as TRL's PPOTrainer; our value is a linear head on the
policy's trunk, TRL's a second GPT-2 (the peer's design, kept as is).

The SmolLM2 workload (``--workload smollm2``; ``both``, the default, runs it after the tiny
one): SmolLM2-135M-Instruct (the embedded policy, float32, every weight trained, TRL's fp32
reference copy against ours, whose ``reference_dtype`` is ``auto``) with its own tokenizer,
the same 256 prompts, 8 prompts per step, 64 new tokens (Nash-MD-PG: y and y′; online DPO:
2 completions; PPO: 1), AdamW lr 1e-5, 1 warm-up and 4 measured steps; judges as above but
the reward (and PPO's value) model is a random 4-layer, 256-dim GPT2ForSequenceClassification
over SmolLM2's vocabulary (seeds 1 and 2), made once by :func:`prepare_smollm2` in
``$TRLBENCH_ROOT/smollm2``, a peer folder whose ``bench.py`` is the peer's own (with
``--device cuda`` a copy that does not force the CPU) and whose ``tok`` is SmolLM2's.

A run key ending in ``+gc`` (the SmolLM2 workload has ``nash_md:64+gc``) trains ours with
``gradient_checkpointing=true`` against the same peer run, which keeps its activations (TRL's
default): what the option trades, step time for peak memory.

Our step time is the trainer's ``step_seconds`` (prompts → rollout → judge → loss → optimizer
step); the peer's is the time between TRL's ``on_step_end`` callbacks.  ``cotenant_cpu_fraction``
is the CPU used by other processes during a run, as a fraction of the machine (above ~0.1 the
timings are suspect).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import PEER, ROOT, record

PEER_ROOT = Path(os.environ.get("TRLBENCH_ROOT", Path.home() / ".cache" / "trlbench"))
PEER_PYTHON = PEER_ROOT / "venv" / "bin" / "python"
MODELS = PEER_ROOT / "models"
GOALS = {
    "tiny": {"nash_md:32": 0.5, "nash_md:128": 0.2, "online_dpo:32": 0.5, "ppo:32": 0.4},
    "smollm2": {"nash_md:64": 0.5, "online_dpo:64": 0.5, "ppo:64": 0.5, "nash_md:64+gc": 0.5},
}
RSS_GOALS = {"tiny": 0.9, "smollm2": 0.8}
WORKLOADS = {
    "tiny": {"runs": "nash_md:32,nash_md:128,online_dpo:32,ppo:32", "warmup": 2, "steps": 10},
    "smollm2": {
        "runs": "nash_md:64,ppo:64,online_dpo:64,nash_md:64+gc",
        "warmup": 1,
        "steps": 4,
    },
}
BETA = 0.5  # the peer's mixture_coef


def vowel_fraction(prompt: str, completion: str) -> float:
    """The peer's text reward: the fraction of the completion's letters that are vowels."""
    letters = [ch for ch in completion if ch.isalpha()]
    return sum(ch in "aeiouAEIOU" for ch in letters) / max(1, len(letters))


def cpu_busy() -> float:
    """Busy CPU seconds of the whole machine (all processes), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu(children: bool = False) -> float:
    t = os.times()
    return t.user + t.system + ((t.children_user + t.children_system) if children else 0.0)


# --------------------------------------------------------------------------- ours (one run)


def run_ours(args: argparse.Namespace) -> dict:
    """Train ``args.one`` for warm-up + measured steps in this process; the result record."""
    import torch

    torch.set_num_threads(args.threads)
    import transformers
    from transformers import (
        AutoModelForCausalLM,
        AutoModelForSequenceClassification,
        PreTrainedTokenizerFast,
    )

    from nlhf.models import Policy, PolicyConfig
    from nlhf.models.judges import FunctionJudge, RewardModelJudge
    from nlhf.models.reward_model import RewardModel
    from nlhf.train.online import Trainer

    transformers.logging.set_verbosity_error()
    name, steps = args.one, args.warmup + args.steps
    peer = Path(args.peer_dir)
    tok = PreTrainedTokenizerFast.from_pretrained(str(peer / "tok"))
    tok.padding_side = "left"
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    prompts = json.loads((peer / "prompts.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(str(Path(args.models_dir) / "policy"))
    policy = Policy(
        model, tok, PolicyConfig(lora_r=0, gradient_checkpointing=args.gradient_checkpointing)
    )
    if name == "online_dpo":
        judge, judge_name = FunctionJudge(vowel_fraction), "vowel_fraction(text)"
    else:
        rm = AutoModelForSequenceClassification.from_pretrained(
            str(Path(args.models_dir) / "reward")
        )
        judge = RewardModelJudge(RewardModel(rm, tok))
        judge_name = "GPT2ForSequenceClassification(random)"
    out = tempfile.mkdtemp(prefix=f"nlhf-train-speed-{name}-")
    common = dict(
        lora_r=0,
        steps=steps,
        batch_size=args.batch_prompts,
        max_new_tokens=args.tokens,
        temperature=1.0,
        optimizer="adamw",
        lr=args.lr,
        seed=args.seed,
        out=out,
        checkpoint_every=10**9,
        resume=False,
        tensorboard=False,
        progress=False,
    )
    if name == "nash_md":
        from nlhf.train.nash_md import Config, NashMDPG

        config = Config(beta=BETA, **common)
        trainer = Trainer(config, policy=policy, judge=judge, prompts=prompts)
        algorithm = NashMDPG(trainer, config)
    elif name == "online_dpo":
        from nlhf.train.online_dpo import Config, OnlineDPO

        config = Config(**common)
        trainer = Trainer(config, policy=policy, judge=judge, prompts=prompts)
        algorithm = OnlineDPO(trainer, config)
    elif name == "ppo":
        from nlhf.train.ppo import PPO, Config

        config = Config(epochs=args.ppo_epochs, mini_batches=1, adaptive_kl=False, **common)
        trainer = Trainer(config, policy=policy, judge=judge, prompts=prompts)
        algorithm = PPO(trainer, config)
    else:
        raise SystemExit(f"unknown algorithm {name!r} (nash_md, online_dpo, ppo)")

    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    busy0, own0, t0 = cpu_busy(), own_cpu(), time.perf_counter()
    trainer.run(algorithm, name)
    wall = time.perf_counter() - t0
    cotenant = ((cpu_busy() - busy0) - (own_cpu() - own0)) / (wall * (os.cpu_count() or 1))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    lines = [json.loads(x) for x in (Path(out) / "metrics.jsonl").read_text().splitlines() if x]
    measured = lines[args.warmup :]
    times = [m["step_seconds"] for m in measured]
    keys = (
        "sample_seconds",
        "judge_seconds",
        "forward_seconds",
        "rollout_seconds",
        "update_seconds",
        "length",
        "mixture_length",
    )
    parts = {k: round(statistics.mean(m[k] for m in measured), 4) for k in keys if k in measured[0]}
    return {
        "trainer": name,
        "max_new_tokens": args.tokens,
        "reward": judge_name,
        "steps_measured": len(times),
        "sec_per_step_median": round(statistics.median(times), 4),
        "sec_per_step_min": round(min(times), 4),
        "sec_per_step_max": round(max(times), 4),
        "step_times": [round(x, 3) for x in times],
        "mean_parts": parts,
        "peak_rss_mb": round(peak, 1),
        "rss_before_train_mb": round(rss_before, 1),
        "train_wall_s": round(wall, 2),
        "cotenant_cpu_frac": round(max(0.0, cotenant), 3),
        "threads": torch.get_num_threads(),
    }


# --------------------------------------------------------------------------- the driver


def prepare_smollm2(device: str) -> Path:
    """The peer folder of the SmolLM2 workload (module doc), made once; its path."""
    import torch
    from transformers import GPT2Config, GPT2ForSequenceClassification, PreTrainedTokenizerFast

    from nlhf.assets import policy_path

    folder = PEER_ROOT / "smollm2"
    smollm2 = policy_path()
    (folder / "models").mkdir(parents=True, exist_ok=True)
    for link, target in (
        (folder / "tok", smollm2),
        (folder / "models" / "policy", smollm2),
        (folder / "prompts.json", PEER / "prompts.json"),
    ):
        if not link.exists():
            link.symlink_to(target)
    tok = PreTrainedTokenizerFast.from_pretrained(str(smollm2))
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    for name, seed in (("reward", 1), ("value", 2)):
        if not (folder / "models" / name / "config.json").exists():
            config = GPT2Config(
                vocab_size=len(tok), n_layer=4, n_head=4, n_embd=256, n_positions=1024,
                num_labels=1, pad_token_id=pad, eos_token_id=tok.eos_token_id,
            )  # fmt: skip
            torch.manual_seed(seed)
            GPT2ForSequenceClassification(config).save_pretrained(folder / "models" / name)
    peer_bench(folder, device)
    return folder


def peer_bench(folder: Path, device: str) -> Path:
    """``folder``/bench.py: the peer's script, on CUDA a copy that does not force the CPU."""
    script = (PEER / "bench.py").read_text()
    if device != "cpu":
        script = script.replace("use_cpu=True", "use_cpu=False")
    target = folder / "bench.py"
    if not target.exists() or target.read_text() != script:
        target.write_text(script)
    return target


def workload_dirs(workload: str, device: str) -> tuple[Path, Path]:
    """(peer folder, models folder) of a workload on a device."""
    if workload == "smollm2":
        folder = prepare_smollm2(device)
        return folder, folder / "models"
    if device == "cpu":
        return PEER, MODELS
    folder = PEER_ROOT / f"tiny-{device}"
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("tok", "prompts.json"):
        if not (folder / name).exists():
            (folder / name).symlink_to(PEER / name)
    peer_bench(folder, device)
    return folder, MODELS


def child_env(device: str) -> dict:
    """The environment of a run: no GPU visible when the workload is on the CPU."""
    env = dict(os.environ)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def flags(args: argparse.Namespace, **extra) -> list[str]:
    """The workload flags both benchmark scripts share, plus ``extra`` (as --key value)."""
    shared = {
        "models_dir": args.models_dir,
        "threads": args.threads,
        "warmup": args.warmup,
        "steps": args.steps,
        "batch_prompts": args.batch_prompts,
        "lr": args.lr,
        "ppo_epochs": args.ppo_epochs,
        **extra,
    }
    return [x for k, v in shared.items() for x in (f"--{k.replace('_', '-')}", str(v))]


def run_peer(args: argparse.Namespace, name: str, tokens: int) -> dict:
    """One peer run (its driver, one trainer, one repeat); its JSON line, or an error record."""
    peer = Path(args.peer_dir)
    cmd = [str(PEER_PYTHON), "-W", "ignore", str(peer / "bench.py"), "--trainers", name]
    cmd += flags(args, repeats=1, max_new_tokens=tokens, mixture_coef=BETA)
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=peer, env=child_env(args.device))
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    tail = (p.stderr.strip().splitlines() or ["?"])[-1]
    return {"trainer": name, "error": tail[-500:], "rc": p.returncode}


def run_child(args: argparse.Namespace, name: str, tokens: int, variant: str = "") -> dict:
    """One of our runs in a fresh subprocess (``variant`` "gc": with activation
    checkpointing); its JSON line, or an error record."""
    cmd = [sys.executable, "-W", "ignore", str(Path(__file__).resolve()), "--one", name]
    cmd += flags(args, tokens=tokens, seed=args.seed, peer_dir=args.peer_dir)
    cmd += ["--gradient-checkpointing"] if variant == "gc" else []
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=child_env(args.device))
    for line in p.stdout.splitlines():
        if line.startswith("BENCH "):
            return json.loads(line[6:])
    tail = (p.stderr.strip().splitlines() or ["?"])[-1]
    return {"trainer": name, "error": tail[-500:], "rc": p.returncode}


def combine(runs: list[dict]) -> dict:
    """One side's rounds as one record: the median of the runs' step medians and peak RSS,
    the largest co-tenant load; the first error if any run failed."""
    for run in runs:
        if "error" in run:
            return run
    return {
        "sec_per_step_median": round(statistics.median(r["sec_per_step_median"] for r in runs), 4),
        "peak_rss_mb": round(statistics.median(r["peak_rss_mb"] for r in runs), 1),
        "cotenant_cpu_frac": max(r.get("cotenant_cpu_frac", 0.0) for r in runs),
        "round_medians": [r["sec_per_step_median"] for r in runs],
    }


def parse_run(run_key: str) -> tuple[str, str, str]:
    """``trainer:tokens[+variant]`` (``nash_md:64+gc``) → (trainer, tokens, variant or "")."""
    trainer_tokens, _, variant = run_key.partition("+")
    name, tokens = trainer_tokens.split(":")
    return name, tokens, variant


def compare(key: str, ours: dict, peer: dict, workload: str = "tiny") -> dict:
    """The per-run summary: medians, RSS, their ratios and goals."""

    def ratio(field: str) -> float | None:
        if "error" in ours or "error" in peer:
            return None
        return round(ours[field] / peer[field], 3)

    step_ratio, rss_ratio = ratio("sec_per_step_median"), ratio("peak_rss_mb")
    goal, rss_goal = GOALS[workload].get(key), RSS_GOALS[workload]
    return {
        "ours_step_s": ours.get("sec_per_step_median"),
        "peer_step_s": peer.get("sec_per_step_median"),
        "step_ratio": step_ratio,
        "step_goal": goal,
        "step_goal_met": None if step_ratio is None or goal is None else step_ratio <= goal,
        "ours_peak_rss_mb": ours.get("peak_rss_mb"),
        "peer_peak_rss_mb": peer.get("peak_rss_mb"),
        "rss_ratio": rss_ratio,
        "rss_goal": rss_goal,
        "rss_goal_met": None if rss_ratio is None else rss_ratio <= rss_goal,
        "ours_cotenant_cpu_frac": ours.get("cotenant_cpu_frac"),
        "peer_cotenant_cpu_frac": peer.get("cotenant_cpu_frac"),
        "peer_error": peer.get("error"),
        "ours_error": ours.get("error"),
    }


def table(summary: dict, cotenant: float, rounds: int, device: str) -> str:
    def num(value, fmt: str) -> str:
        return "–" if value is None else format(value, fmt)

    lines = [
        "| workload | trainer | new tokens | ours (s/step) | TRL 1.12 (s/step) | ours / TRL (goal) "
        "| ours peak RSS (MB) | TRL peak RSS (MB) | RSS ratio (goal) | other CPU load |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for key, s in summary.items():
        workload, run = key.split("/")
        name, tokens, variant = parse_run(run)
        name += " (gradient checkpointing)" if variant == "gc" else ""
        peer_s = "fails" if s["peer_error"] else num(s["peer_step_s"], ".3f")
        peer_rss = "fails" if s["peer_error"] else num(s["peer_peak_rss_mb"], ".0f")
        load = " / ".join(
            num(x, ".0%") for x in (s["ours_cotenant_cpu_frac"], s["peer_cotenant_cpu_frac"])
        )
        lines.append(
            f"| {workload} | {name} | {tokens} | {num(s['ours_step_s'], '.3f')} | {peer_s} | "
            f"{num(s['step_ratio'], '.3f')} (≤ {num(s['step_goal'], 'g')}) | "
            f"{num(s['ours_peak_rss_mb'], '.0f')} | {peer_rss} | {num(s['rss_ratio'], '.3f')} "
            f"(≤ {s['rss_goal']}) | {load} |"
        )
    lines.append("")
    lines.append(
        f"Each figure: the median over {rounds} run{'s' if rounds != 1 else ''} (each the median "
        "of the measured steps after the warm-up steps, in its own process; peer and ours "
        "alternate, taking turns to go first); other CPU load: the most CPU used by other "
        "processes during one of our runs / the peer's, as a share of the machine "
        f"({cotenant:.0%} over the whole benchmark). Device: {device}."
    )
    for key, s in summary.items():
        if s["peer_error"]:
            lines.append(f"TRL at {key} fails: {s['peer_error'][:200]}")
        if s["ours_error"]:
            lines.append(f"ours at {key} fails: {s['ours_error'][:200]}")
    return "\n".join(lines)


def compare_workload(args: argparse.Namespace, workload: str, raw: dict, summary: dict) -> None:
    """Every run of ``workload``: peer and ours alternating for ``args.rounds`` rounds."""
    spec = WORKLOADS[workload]
    peer_dir, models_dir = workload_dirs(workload, args.device)
    run_args = argparse.Namespace(**vars(args))
    run_args.peer_dir, run_args.models_dir = str(peer_dir), str(models_dir)
    for field in ("warmup", "steps"):
        if getattr(args, field) is None:
            setattr(run_args, field, spec[field])
    for run_key in (args.runs or spec["runs"]).split(","):
        name, tokens, variant = parse_run(run_key)
        key = f"{workload}/{run_key}"
        got: dict[str, list[dict]] = {"ours": [], "peer": []}
        for round_ in range(args.rounds):
            order = ["ours", "peer"] if args.ours_first == (round_ % 2 == 0) else ["peer", "ours"]
            for side in order:
                print(f"{key}: {side} (round {round_ + 1}) …", file=sys.stderr, flush=True)
                if side == "peer":
                    got[side].append(run_peer(run_args, name, int(tokens)))
                else:
                    got[side].append(run_child(run_args, name, int(tokens), variant))
                print(f"  {json.dumps(got[side][-1])[:300]}", file=sys.stderr, flush=True)
        raw[key] = got
        summary[key] = compare(run_key, combine(got["ours"]), combine(got["peer"]), workload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--workload", choices=["tiny", "smollm2", "both"], default="both", help="module doc"
    )
    parser.add_argument(
        "--runs", default=None, help="trainer:new_tokens pairs to compare (default: the workload's)"
    )
    parser.add_argument("--one", help="run one of ours in this process (nash_md, online_dpo, ppo)")
    parser.add_argument("--tokens", type=int, default=32, help="--one: new tokens")
    parser.add_argument("--models-dir", default=str(MODELS), help="--one: the prepared models")
    parser.add_argument("--peer-dir", default=str(PEER), help="--one: tokenizer and prompts")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (both sides)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (peer: 2)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up steps (per workload)")
    parser.add_argument("--steps", type=int, default=None, help="measured steps (per workload)")
    parser.add_argument("--batch-prompts", type=int, default=8, help="prompts per step (peer: 8)")
    parser.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate (peer: 1e-5)")
    parser.add_argument("--ppo-epochs", type=int, default=4, help="PPO epochs (peer: 4)")
    parser.add_argument("--seed", type=int, default=0, help="our seed")
    parser.add_argument(
        "--gradient-checkpointing", action="store_true", help="--one: gradient_checkpointing=true"
    )
    parser.add_argument("--ours-first", action="store_true", help="run ours before the peer")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="peer/ours runs per comparison, alternating which goes first; each side's figure "
        "is the median over its rounds",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="1 round, 1 warm-up + 1 measured step, 4 new tokens; printed, nothing recorded",
    )
    args = parser.parse_args()
    if args.one:
        args.warmup = 2 if args.warmup is None else args.warmup
        args.steps = 10 if args.steps is None else args.steps
        print("BENCH " + json.dumps(run_ours(args)), flush=True)
        return
    if args.smoke:
        args.rounds, args.warmup, args.steps = 1, 1, 1
        args.runs = args.runs or "nash_md:4,online_dpo:4,ppo:4"

    busy0, own0, start = cpu_busy(), own_cpu(children=True), time.perf_counter()
    raw: dict[str, dict] = {}
    summary: dict[str, dict] = {}
    workloads = ["tiny", "smollm2"] if args.workload == "both" else [args.workload]
    for workload in workloads:
        compare_workload(args, workload, raw, summary)
    wall = time.perf_counter() - start
    busy = (cpu_busy() - busy0) - (own_cpu(children=True) - own0)
    cotenant = round(max(0.0, busy / (wall * (os.cpu_count() or 1))), 3)
    import torch
    import transformers

    result = {
        "cotenant_cpu_fraction": cotenant,
        "workload": {
            "workloads": {w: WORKLOADS[w] for w in workloads},
            "device": args.device,
            "prompts_per_step": args.batch_prompts,
            "threads": args.threads,
            "rounds": args.rounds,
            "lr": args.lr,
            "ppo_epochs": args.ppo_epochs,
            "nash_md_beta": BETA,
            "dtype": "float32",
            "full_fine_tuning": True,
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "wall_s": round(wall, 1),
        "summary": summary,
        "runs": raw,
    }
    name = "train_speed" + ("_smollm2" if args.workload == "smollm2" else "")
    name += "" if args.device == "cpu" else f"_{args.device}"
    record(name, result, table(summary, cotenant, args.rounds, args.device), write=not args.smoke)


if __name__ == "__main__":
    main()

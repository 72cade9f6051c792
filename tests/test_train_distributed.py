"""Data-parallel training: ``accelerate launch`` with 2 CPU processes (gloo) reproduces 1 process.

The same tiny runs (tests/distributed_run.py; global batch 4, 3 steps) run in the test's own
process (one torch thread, as every launched process) and through ``accelerate launch
--multi_gpu --num_processes 2`` (on a machine without GPUs the trainer forms a gloo group on
the CPU; ``--cpu`` would start one process).

- Same global batch, 1 process with ``grad_accum=1`` (nash-md, ppo, online-dpo): per step the
  logged loss agrees to 1e-5 (absolute), the gradient norm before clipping to 1e-4 (relative:
  a loss summed instead of averaged over the processes doubles it, which Adam and clipping
  would hide in the weights), the other logged statistics to 1e-4; the final weights to atol
  1e-4 / rtol 1e-3 after moving well away from their initial values.  The processes pad
  their halves of the batch separately, so float rounding differs slightly.
- 1 process with ``grad_accum=2`` forms exactly the chunks of the two processes (nash-md,
  online-dpo, nash-ema, nash-mp): loss, gradient norm and weights are equal bit for bit.

A last test launches the documented command line, ``accelerate launch ... -m nlhf.cli train
ppo``, against ``nlhf train ppo`` in one process.
"""

import contextlib
import io
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import children
import distributed_run
from nlhf import cli
from online_harness import metrics, policy_weights, saved_tensors

HERE = Path(__file__).parent
ALGORITHMS = ["nash-md", "ppo", "online-dpo"]
SAME_CHUNKS = ["nash-md", "online-dpo", "nash-ema", "nash-mp"]
SHARDED = sorted(set(ALGORITHMS) | set(SAME_CHUNKS))  # every online trainer under fsdp=true
LOGGED = {
    "nash-md": ("win_rate", "kl", "length", "mixture_length"),
    "ppo": ("reward", "reward_std", "kl", "kl_coef", "returns", "value_mean", "policy_loss",
            "value_loss", "clip_fraction", "approx_kl", "entropy", "length"),
    "online-dpo": ("judge_chosen_prob", "tie_rate", "reward_margin", "reward_accuracy", "kl",
                   "length"),
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(*args: str, processes: int, timeout: int = 240) -> SimpleNamespace:
    """``accelerate launch ... ARGS`` with several processes; with one, ``python ARGS`` run in
    this process (:func:`in_process`: an interpreter start fewer).  ``stdout`` of the run."""
    if processes == 1:
        return in_process(*args)
    command = [
        str(Path(sys.executable).parent / "accelerate"), "launch", "--multi_gpu",
        "--num_processes", str(processes), "--num_machines", "1",
        "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()), *args,
    ]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as accelerate launch sets it on CPUs
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    return SimpleNamespace(stdout=done.stdout)


def in_process(*args: str) -> SimpleNamespace:
    """``python -m nlhf.cli ARGS`` or ``python tests/distributed_run.py ARGS`` in this process,
    on one torch thread as the launched processes; ``stdout`` of the run."""
    said, threads = io.StringIO(), torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(said):
            if args[:2] == ("-m", "nlhf.cli"):
                code = cli.main(list(args[2:]))
            else:
                assert Path(args[0]) == HERE / "distributed_run.py", args[0]
                code = distributed_run.main(list(args[1:]))
    finally:
        torch.set_num_threads(threads)
    assert not code, said.getvalue()[-2000:]
    return SimpleNamespace(stdout=said.getvalue())


@pytest.fixture(autouse=True)
def children_tmpdir(tmp_path, monkeypatch):
    """The processes a test launches (torchrun's ``torchelastic_*`` log folders included) keep
    their temp files in the test's folder: :func:`launch` passes ``os.environ`` on."""
    monkeypatch.setenv("TMPDIR", str(children.tmpdir(tmp_path)))


LORA = ("nash-md", "ppo", "--lora-r", "4", "--grad-accum", "2")
CHECKPOINTED = ("nash-md", "online-dpo", "ppo")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """p1: 1 process; p1-accum2: 1 process, grad_accum 2; p2: 2 processes; p2-fsdp: 2
    processes, the model sharded; lora-p1 and lora-fsdp: LoRA policies, grad_accum 2, 1
    process and 2 sharded ones; gc-fsdp: 2 sharded processes with gradient checkpointing.
    One launch of 2 processes and one of 1 (``--then``)."""
    root = tmp_path_factory.mktemp("distributed")
    script = str(HERE / "distributed_run.py")
    with pytest.MonkeyPatch.context() as env:  # set up before the per-test folder above
        env.setenv("TMPDIR", str(children.tmpdir(root)))
        launch(
            script, str(root / "p2"), *SHARDED,
            "--then", str(root / "p2-fsdp"), *SHARDED, "--fsdp",
            "--then", str(root / "lora-fsdp"), *LORA, "--fsdp",
            "--then", str(root / "gc-fsdp"), *CHECKPOINTED, "--fsdp", "--gradient-checkpointing",
            processes=2,
        )  # fmt: skip
        launch(
            script, str(root / "p1"), *ALGORITHMS,
            "--then", str(root / "p1-accum2"), *SAME_CHUNKS, "--grad-accum", "2",
            "--then", str(root / "lora-p1"), *LORA,
            processes=1,
        )  # fmt: skip
    return root


@pytest.fixture
def runs(root):
    return root / "p1", root / "p2"


def initial_weights() -> dict:
    from nlhf.models.tiny import tiny_byte_lm

    model, _ = tiny_byte_lm("gpt2")
    return model.state_dict()


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_two_processes_reproduce_one(runs, algorithm):
    one, two = (metrics(folder / algorithm) for folder in runs)
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4, abs=1e-7)
        for key in LOGGED[algorithm]:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-4), (a["step"], key)
    assert len({r["loss"] for r in one}) == 3  # the loss moves: the runs learn something

    assert len({r["grad_norm"] for r in two}) == 3
    w1, w2 = (policy_weights(folder / algorithm) for folder in runs)
    assert w1.keys() == w2.keys()
    for key in w1:
        torch.testing.assert_close(w2[key], w1[key], atol=1e-4, rtol=1e-3)
    start = initial_weights()
    moved = max(float((w1[k] - start[k]).abs().max()) for k in w1 if k in start)
    assert moved > 1e-2  # lr 1e-2 for 3 steps: far more than the tolerance above

    # the main process alone wrote the outputs, once
    two_folder = runs[1] / algorithm
    assert (two_folder / "checkpoints" / "step-2" / "state.pt").exists()
    assert json.loads((two_folder / "config.json").read_text())["processes"] == 2
    assert json.loads((runs[0] / algorithm / "config.json").read_text())["processes"] == 1
    if algorithm == "ppo":
        h1, h2 = (saved_tensors(folder / "ppo" / "value_head.safetensors") for folder in runs)
        for key in h1:
            torch.testing.assert_close(h2[key], h1[key], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("algorithm", SHARDED)
def test_sharded_processes_reproduce_one(root, algorithm):
    """``fsdp=true``: each process holds half of every weight, gradient and optimizer moment
    (the frozen reference copy too) and the run is the one-process run: losses to 1e-5,
    gradient norms to 1e-4, other statistics and the final weights as above.  Nash-EMA and
    Nash-MP are compared with one process forming the same chunks (see the module doc)."""
    one_name = "p1" if algorithm in ALGORITHMS else "p1-accum2"
    one, two = (metrics(root / name / algorithm) for name in (one_name, "p2-fsdp"))
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4, abs=1e-7)
        for key in LOGGED.get(algorithm, ()):
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-4), (a["step"], key)
    w1, w2 = (policy_weights(root / name / algorithm) for name in (one_name, "p2-fsdp"))
    assert w1.keys() == w2.keys()
    for key in w1:
        torch.testing.assert_close(w2[key], w1[key], atol=1e-4, rtol=1e-3)
    if algorithm == "ppo":
        h1, h2 = (
            saved_tensors(root / n / "ppo" / "value_head.safetensors") for n in ("p1", "p2-fsdp")
        )
        for key in h1:
            torch.testing.assert_close(h2[key], h1[key], atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("algorithm", CHECKPOINTED)
def test_sharded_checkpointed_runs_reproduce_one_process(root, algorithm):
    """``fsdp=true`` with ``gradient_checkpointing=true`` (each sharded decoder layer run
    again in the backward pass): the one-process run's losses, gradient norms and weights."""
    one, two = (metrics(root / name / algorithm) for name in ("p1", "gc-fsdp"))
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3]
    for a, b in zip(one, two, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4, abs=1e-7)
    w1, w2 = (policy_weights(root / name / algorithm) for name in ("p1", "gc-fsdp"))
    for key in w1:
        torch.testing.assert_close(w2[key], w1[key], atol=1e-4, rtol=1e-3)


def test_sharded_lora_runs_reproduce_one_process(root):
    """``fsdp=true`` with a LoRA policy (Nash-MD-PG's fused policy/reference decode through
    the sharded model, PPO's whole value head beside it, with grad_accum 2): the one-process
    losses, gradient norms and adapter weights."""
    for algorithm in ("nash-md", "ppo"):
        one, two = (metrics(root / n / algorithm) for n in ("lora-p1", "lora-fsdp"))
        assert len(one) == len(two) == 3
        for a, b in zip(one, two, strict=True):
            assert abs(a["loss"] - b["loss"]) <= 1e-5, (algorithm, a["step"])
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4, abs=1e-7)
        w1, w2 = (policy_weights(root / n / algorithm) for n in ("lora-p1", "lora-fsdp"))
        assert w1.keys() == w2.keys() and all("lora_" in k for k in w1)
        for key in w1:
            torch.testing.assert_close(w2[key], w1[key], atol=1e-4, rtol=1e-3)


def test_sharded_run_resumes_from_its_checkpoint(root, tmp_path):
    """Nash-EMA under ``fsdp=true`` restarted from its step-2 checkpoint (sharded weights,
    optimizer moments and moving average, all saved whole) ends with the same weights."""
    import shutil

    shutil.copytree(root / "p2-fsdp" / "nash-ema", tmp_path / "nash-ema")
    shutil.rmtree(tmp_path / "nash-ema" / "policy")
    done = launch(
        str(HERE / "distributed_run.py"), str(tmp_path), "nash-ema", "--fsdp", processes=2
    )
    assert "resuming from step 2 of 3" in done.stdout
    first, again = metrics(root / "p2-fsdp" / "nash-ema"), metrics(tmp_path / "nash-ema")
    assert [r["step"] for r in again] == [1, 2, 3]
    assert again[-1]["loss"] == pytest.approx(first[-1]["loss"], abs=1e-6)
    from online_harness import assert_identical

    assert_identical(
        policy_weights(root / "p2-fsdp" / "nash-ema"), policy_weights(tmp_path / "nash-ema")
    )


LOCKSTEP = """
import torch
from nlhf.models import Policy, PolicyConfig, sample
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train.distributed import Processes, leave_group_at_exit
from nlhf.train.sharding import shard_policy

procs = Processes()
model, tok = tiny_byte_lm("gpt2")
policy = Policy(model, tok, PolicyConfig(lora_r=0))
shard_policy(policy)
ids = torch.tensor([[5, 6, 7]])
eos = list(range(len(tok))) if procs.index == 0 else []  # process 0: any token ends the row
out = sample(policy, ids, torch.ones_like(ids), 6, eos_token_id=eos,
             generator=torch.Generator().manual_seed(0))
print(f"RANK {procs.index} lengths {out.lengths.tolist()}", flush=True)
procs.barrier()
leave_group_at_exit()()  # the library's teardown: a bare destroy can abort the sharded process
"""


def test_sharded_sampling_keeps_the_processes_in_step(tmp_path):
    """With a sharded model every decoding forward is a collective: a process whose rows have
    all ended keeps stepping (its rows padded) until every process's rows have."""
    script = tmp_path / "lockstep.py"
    script.write_text(LOCKSTEP)
    done = launch(str(script), processes=2, timeout=120)
    assert "RANK 0 lengths [1]" in done.stdout
    assert "RANK 1 lengths [6]" in done.stdout


LEAVING = """
import os
import torch
from nlhf.train.distributed import Processes, leave_group_at_exit

procs = Processes()
from nlhf.models.tiny import tiny_byte_lm

model, tok = tiny_byte_lm("gpt2")  # transformers imports torch._dynamo: after the group
model(torch.tensor([[5, 6, 7]])).logits.sum().backward()
procs.sync_gradients(list(model.parameters()))
procs.gather(torch.ones(2))
procs.barrier()


def gloo_threads():
    names = (open(f"/proc/self/task/{t}/comm").read() for t in os.listdir("/proc/self/task"))
    return sum(name.startswith(("pt_gloo", "gloo")) for name in names)


before = gloo_threads()
leave_group_at_exit()()
print(f"RANK {procs.index} gloo threads {before} -> {gloo_threads()}", flush=True)
"""


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="thread names come from /proc")
def test_leaving_the_group_ends_its_threads(tmp_path):
    """The exit hook destroys the group and so joins gloo's worker threads while the
    interpreter is alive, also after transformers imported ``torch._dynamo`` (whose import
    used to capture the group in default arguments): no worker is left to free a collective's
    tensors during teardown, which aborted finished runs now and then."""
    script = tmp_path / "leaving.py"
    script.write_text(LEAVING)
    done = launch(str(script), processes=2, timeout=120)
    for rank in (0, 1):
        counts = re.search(rf"RANK {rank} gloo threads (\d+) -> (\d+)", done.stdout)
        assert counts, done.stdout
        assert int(counts[1]) > 0 and int(counts[2]) == 0


NAN_ON_ONE_PROCESS = """
import sys
import torch
from nlhf.models import Policy, PolicyConfig
from nlhf.models.judges import ScoreJudge
from nlhf.models.tiny import tiny_byte_lm
from nlhf.train import nash_md, online_dpo, ppo
from nlhf.train.online import Trainer


class Judge(ScoreJudge):  # process 0's second judgement has a NaN, nobody else's
    calls = 0

    def scores(self, prompts, completions):
        self.calls += 1
        s = torch.tensor([float(len(c)) for c in completions])
        if trainer.procs.index == 0 and self.calls == 2:
            s[0] = float("nan")
        return s


out = sys.argv[1]
for name in sys.argv[2:]:  # one run after the other in the same processes
    module, algorithm = {"online-dpo": (online_dpo, online_dpo.OnlineDPO),
                         "nash-md": (nash_md, nash_md.NashMDPG), "ppo": (ppo, ppo.PPO)}[name]
    model, tok = tiny_byte_lm("gpt2")
    policy = Policy(model, tok, PolicyConfig(lora_r=0))
    config = module.Config(out=f"{out}/{name}", steps=3, batch_size=4, max_new_tokens=4,
                           lr=1e-2, progress=False, tensorboard=False, fsdp=True,
                           on_nonfinite="skip")
    judge = Judge()
    trainer = Trainer(config, policy=policy, judge=judge, prompts=["a", "bb", "ccc", "dddd"])
    trainer.run(algorithm(trainer, config), name)
    if trainer.procs.index == 0:
        print(f"{name}: done", flush=True)
"""

NOT_FINITE = ["online-dpo", "nash-md", "ppo"]


@pytest.fixture(scope="module")
def not_finite(tmp_path_factory):
    """The three runs of the test below, one after the other in one launch of 2 processes."""
    folder = tmp_path_factory.mktemp("not-finite")
    script = folder / "nan.py"
    script.write_text(NAN_ON_ONE_PROCESS)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(children.tmpdir(folder)))
        done = launch(str(script), str(folder / "run"), *NOT_FINITE, processes=2, timeout=300)
    return folder / "run", done.stdout


@pytest.mark.parametrize("algorithm", NOT_FINITE)
def test_sharded_run_skips_a_step_one_process_found_not_finite(not_finite, algorithm):
    """``fsdp=true``, ``on_nonfinite=skip``: a NaN judgement on one process only skips that
    step on every process (agreed before any backward pass, so neither waits for the other
    in a sharded collective), and training goes on."""
    run, stdout = not_finite
    printed, done, _ = stdout.partition(f"{algorithm}: done")
    assert done and "update skipped" in printed.rsplit(": done", 1)[-1]  # in this run's part
    rows = metrics(run / algorithm)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r.get("skipped", 0.0) for r in rows] == [0.0, 1.0, 0.0]


@pytest.mark.parametrize("algorithm", SAME_CHUNKS)
def test_two_processes_equal_one_process_with_their_chunks(root, algorithm):
    one, two = (metrics(root / name / algorithm) for name in ("p1-accum2", "p2"))
    assert len(one) == len(two) == 3
    for a, b in zip(one, two, strict=True):
        assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"])
    from online_harness import assert_identical

    assert_identical(*(policy_weights(root / name / algorithm) for name in ("p1-accum2", "p2")))


def save_tiny_model(folder: Path) -> None:
    """The tiny random GPT-2 of these tests and its byte tokenizer, as a model folder."""
    from nlhf.models.tiny import tiny_byte_lm

    model, tok = tiny_byte_lm("gpt2")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


@pytest.mark.slow  # about 15-20 s: two more launches of the full CLI
def test_cli_under_accelerate_launch(tmp_path):
    """The documented command: ``accelerate launch ... -m nlhf.cli train ppo``; the tiny
    model's bytes score 0 under VADER, so a length penalty gives the rewards that move it."""
    save_tiny_model(tmp_path / "tiny")
    prompts = ["I loved", "This film", "The worst", "What a", "Great", "Sad"]
    (tmp_path / "prompts.jsonl").write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in prompts)
    )
    args = [
        "-m", "nlhf.cli", "train", "ppo", "--policy", str(tmp_path / "tiny"), "--lora-r", "2",
        "--prompts", str(tmp_path / "prompts.jsonl"), "--judge", "vader", "--steps", "2",
        "--batch-size", "4", "--max-new-tokens", "4", "--lr", "0.01", "--no-progress",
        "--no-tensorboard", "judge_length_penalty=0.1",
    ]  # fmt: skip
    outs = []
    for processes in (1, 2):
        out = tmp_path / f"p{processes}"
        done = launch(*args, "--out", str(out), processes=processes)
        assert done.stdout.count("ppo: 2 steps") == 1  # the summary from the main process only
        outs.append(metrics(out))
    assert all(row["grad_norm"] > 1e-3 for row in outs[0])  # updates that move the policy
    for a, b in zip(*outs, strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)


@pytest.mark.slow  # about 40 s: four launches of the CLI, then two
@pytest.mark.parametrize(
    "command,lora,runs", [("dpo", "0", ("p1", "fsdp")), ("sft", "4", ("p1", "p2"))]
)
def test_offline_trainers_under_two_processes(tmp_path, command, lora, runs):
    """``nlhf train dpo|sft`` under 2 processes give the 1-process losses, gradient norms and
    weights, with uneven shares (5 = 3 + 2) and a last batch of one pair (one process gets
    nothing): DPO with the model sharded (``fsdp=true``; every weight trains and the frozen
    reference copy is sharded too), SFT with a LoRA adapter and each share weighted by its
    response tokens.  The sharded DPO run resumed from its step-2 checkpoint ends the same,
    under two sharded processes and under one unsharded process."""
    import random
    import shutil

    save_tiny_model(tmp_path / "tiny")
    rng = random.Random(0)
    with open(tmp_path / "pairs.jsonl", "w") as f:
        for i in range(14):  # replies of different lengths: SFT's token weights matter
            word = "".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9)))
            f.write(json.dumps({"prompt": f"item {i}", "chosen": word, "rejected": word.upper()}))
            f.write("\n")
    args = [
        "-m", "nlhf.cli", "train", command, "--policy", str(tmp_path / "tiny"), "--lora-r", lora,
        "--data", str(tmp_path / "pairs.jsonl"), "--held-out", "0.2", "--batch-size", "5",
        "--lr", "0.01", "--no-progress", "--no-tensorboard", "checkpoint_every=2",
    ]  # fmt: skip
    settings = {"p1": (1, []), "p2": (2, []), "fsdp": (2, ["fsdp=true"])}
    outs = {}
    for name in runs:
        processes, extra = settings[name]
        out = tmp_path / name
        launch(*args, "--out", str(out), *extra, processes=processes)
        summary = json.loads((out / "metrics.json").read_text())
        assert summary["train_examples"] % 5 == 1  # the last batch has one row
        assert json.loads((out / "config.json").read_text())["processes"] == processes
        outs[name] = metrics(out)
    one = outs["p1"]
    assert len(one) == 3
    assert len({r["loss"] for r in one}) == 3
    w1 = policy_weights(tmp_path / "p1")
    for name in runs[1:]:
        two = outs[name]
        assert len(two) == 3
        for a, b in zip(one, two, strict=True):
            assert abs(a["loss"] - b["loss"]) <= 1e-5, (name, a["step"], a["loss"], b["loss"])
            assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4), name
            for key in (
                ("pairs", "reward_accuracy", "reward_margin") if command == "dpo" else ("tokens",)
            ):
                assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (name, a["step"], key)
        w2 = policy_weights(tmp_path / name)
        assert w2.keys() == w1.keys()
        for key in w1:
            torch.testing.assert_close(w2[key], w1[key], atol=1e-4, rtol=1e-3)

    if "fsdp" not in runs:
        return
    # Resume the sharded run from its step-2 checkpoint: the same last step and weights.
    fsdp = tmp_path / "fsdp"
    shutil.rmtree(fsdp / "policy")
    (fsdp / "metrics.json").unlink()
    done = launch(*args, "--out", str(fsdp), "fsdp=true", processes=2)
    assert "resuming from step 2 of 3" in done.stdout
    resumed = metrics(fsdp)
    assert [r["step"] for r in resumed] == [1, 2, 3]
    assert resumed[-1]["loss"] == pytest.approx(outs["fsdp"][-1]["loss"], abs=1e-6)
    again = policy_weights(fsdp)
    for key in w1:
        torch.testing.assert_close(again[key], w1[key], atol=1e-4, rtol=1e-3)
    # Checkpoints hold whole tensors: one unsharded process resumes the sharded run too.
    shutil.rmtree(fsdp / "policy")
    done = launch(*args, "--out", str(fsdp), processes=1)
    assert "resuming from step 2 of 3" in done.stdout
    for key, value in policy_weights(fsdp).items():
        torch.testing.assert_close(value, w1[key], atol=1e-4, rtol=1e-3)


@pytest.mark.slow  # about 20 s: two launches of the CLI
def test_judge_trainer_under_two_processes(tmp_path):
    """``nlhf train reward-model`` under 2 processes: uneven shares (5 = 3 + 2) and a last
    batch of one pair (one process gets nothing), each share weighted by its pairs' weights,
    give the 1-process losses, gradient norms and weights (dropout off, so the processes'
    random streams do not matter)."""
    from nlhf.models.reward_model import RewardModel
    from tiny_encoder import make_tiny_encoder

    words = [f"w{i}" for i in range(12)]
    encoder = make_tiny_encoder(tmp_path / "encoder", [*words, "item"], dropout=0.0)
    with open(tmp_path / "pairs.jsonl", "w") as f:
        for i in range(14):
            row = {"prompt": f"item w{i}", "chosen": words[i % 6], "rejected": words[6 + i % 6]}
            f.write(json.dumps({**row, "weight": 1.0 + (i % 3)}) + "\n")
    args = [
        "-m", "nlhf.cli", "train", "reward-model", "--backbone", str(encoder),
        "--data", str(tmp_path / "pairs.jsonl"), "--held-out", "0.2", "--batch-size", "5",
        "--max-length", "16", "--lr", "0.01", "--no-progress", "--no-tensorboard",
    ]  # fmt: skip
    outs, weights = {}, {}
    for processes in (1, 2):
        out = tmp_path / f"p{processes}"
        launch(*args, "--out", str(out), processes=processes)
        assert json.loads((out / "metrics.json").read_text())["train_examples"] % 5 == 1
        outs[processes] = metrics(out)
        weights[processes] = RewardModel.load(out / "model").state_dict()
    assert len(outs[1]) == 3 and len({r["loss"] for r in outs[1]}) == 3
    for a, b in zip(outs[1], outs[2], strict=True):
        assert abs(a["loss"] - b["loss"]) <= 1e-5, (a["step"], a["loss"], b["loss"])
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-4)
        assert b["accuracy"] == pytest.approx(a["accuracy"], abs=1e-6)
    # The classifier's bias cancels in every r(y_w) − r(y_l): its gradient is rounding noise,
    # which Adam turns into steps of either sign, so it is left out of the comparison.
    for key, value in weights[1].items():
        if key != "model.classifier.bias":
            torch.testing.assert_close(weights[2][key], value, atol=5e-4, rtol=1e-3, msg=key)
    held = [
        json.loads((tmp_path / f"p{n}" / "metrics.json").read_text())["held_out"] for n in (1, 2)
    ]
    assert held[1]["mean_margin"] == pytest.approx(held[0]["mean_margin"], rel=1e-3, abs=1e-5)


# --------------------------------------------------------------------------- in one process


class FakeAccelerator(SimpleNamespace):
    """What :class:`nlhf.train.distributed.Processes` reads, for a process of a pretend group."""


def fake(index: int, count: int = 2):
    return FakeAccelerator(
        num_processes=count, process_index=index, is_main_process=index == 0, device="cpu"
    )


def test_batch_must_split_over_processes_and_chunks():
    from nlhf.train import nash_md
    from nlhf.train.online import Trainer

    config = nash_md.Config(batch_size=6, grad_accum=2, progress=False)
    with pytest.raises(ValueError, match=r"multiple of the number of processes \(2\) × grad_acc"):
        Trainer(config, accelerator=fake(0))


def test_shares_are_contiguous_and_cover_the_batch():
    from nlhf.train.distributed import Processes

    rows = list(range(8))
    shares = [Processes(fake(i, 4)).share(rows) for i in range(4)]
    assert shares == [[0, 1], [2, 3], [4, 5], [6, 7]]
    with pytest.raises(ValueError, match="do not split evenly"):
        Processes(fake(0, 3)).share(rows)
    uneven = [Processes(fake(i, 3)).split(rows) for i in range(3)]
    assert uneven == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert [Processes(fake(i, 3)).split([9]) for i in range(3)] == [[9], [], []]

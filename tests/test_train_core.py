"""The core loop on a policy that is no language model: a linear map fitted to a target map.

Checks what every trainer gets from :mod:`nlhf.train.core`: weighted chunks, metrics.jsonl,
checkpoints that resume bit for bit, NaN/inf named by the step of metrics.jsonl (or skipped),
gradient clipping, a head trained beside the policy, and a saved result.
"""

import copy
import json
import math
from dataclasses import dataclass

import pytest
import torch
from torch import nn

from nlhf.train.checkpoint import Checkpointer
from nlhf.train.core import Algorithm, Module, NonFiniteError, Trainer, TrainFields, weighted_mean

TARGET = torch.tensor([[1.0, -2.0], [0.5, 3.0]])


@dataclass
class Chunk:
    x: torch.Tensor
    weight: float


def source(step: int, chunks: int = 2, rows: int = 3) -> list[Chunk]:
    """Seeded by the step: a resumed run sees the same data."""
    g = torch.Generator().manual_seed(step)
    x = torch.randn(chunks * rows, 2, generator=g)
    return [Chunk(part, len(part) / len(x)) for part in x.split(rows)]


class Regression(Algorithm):
    def loss(self, chunk: Chunk, step: int):
        model = self.trainer.policy.model
        error = model(chunk.x) - chunk.x @ TARGET.T
        return error.pow(2).mean(), {"rows": float(len(chunk.x))}


def make(tmp_path, steps=30, batches=source, **overrides):
    torch.manual_seed(0)
    config = TrainFields(
        **{"lr": 0.05, "out": str(tmp_path), "progress": False, "tensorboard": False, **overrides}
    )
    linear = nn.Linear(2, 2, bias=False)
    policy = Module(linear, lambda folder: torch.save(linear.state_dict(), folder / "w.pt"))
    return Trainer(config, policy, steps, batches), linear


def lines(tmp_path):
    return [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]


def test_weighted_mean_weights_rows_and_drops_weight_zero():
    rows = [(0.25, {"a": 4.0}), (0.75, {"a": 0.0, "b": 2.0}), (0.0, {"a": 100.0})]
    assert weighted_mean(rows) == {"a": 1.0, "b": 2.0 * 0.75 / 1.0}


def test_chunks_are_weighted_so_the_gradient_is_the_whole_batch(tmp_path):
    """Two chunks of 1 and 3 rows weighted 1/4 and 3/4 give the gradient of one 4-row mean."""
    trainer, linear = make(tmp_path)
    x = torch.randn(4, 2)
    parts = [Chunk(x[:1], 0.25), Chunk(x[1:], 0.75)]
    algorithm = Regression(trainer, trainer.config)
    trainer.accumulate(lambda c: algorithm.loss(c, 0), parts)
    split = linear.weight.grad.clone()
    linear.weight.grad = None
    algorithm.loss(Chunk(x, 1.0), 0)[0].backward()
    torch.testing.assert_close(split, linear.weight.grad)


def test_a_run_fits_logs_every_step_and_saves(tmp_path):
    trainer, linear = make(tmp_path, steps=80, lr=0.1, schedule="cosine")
    last = trainer.run(Regression(trainer, trainer.config), "regression")
    assert torch.allclose(linear.weight.detach(), TARGET, atol=0.05)
    rows = lines(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 81))
    assert {"loss", "rows", "grad_norm", "lr", "step_seconds"} <= rows[0].keys()
    assert rows[-1]["loss"] < 0.01 * rows[0]["loss"] and {"step": 80, **last} == rows[-1]
    assert rows[0]["rows"] == 3.0  # a weighted mean over the chunks
    assert (tmp_path / "policy" / "w.pt").exists()
    assert json.loads((tmp_path / "config.json").read_text())["algorithm"] == "regression"


@pytest.mark.parametrize("optimizer", ["adamw", "lion", "graft"])
def test_an_interrupted_run_resumes_bit_for_bit(tmp_path, optimizer):
    settings = dict(checkpoint_every=4, optimizer=optimizer, schedule="cosine", warmup_steps=3)
    full, a = make(tmp_path / "full", **settings)
    full.run(Regression(full, full.config), "regression")
    original = Checkpointer.save

    def save_and_stop(self, step, state):
        original(self, step, state)
        if step == 12:
            raise KeyboardInterrupt

    Checkpointer.save = save_and_stop
    try:
        cut, _ = make(tmp_path / "cut", **settings)
        with pytest.raises(KeyboardInterrupt):
            cut.run(Regression(cut, cut.config), "regression")
    finally:
        Checkpointer.save = original
    resumed, b = make(tmp_path / "cut", **settings)
    resumed.run(Regression(resumed, resumed.config), "regression")
    assert torch.equal(a.weight, b.weight)

    def curve(path):
        return [(r["step"], r["loss"], r["lr"]) for r in lines(path)]

    assert curve(tmp_path / "full") == curve(tmp_path / "cut")


def nan_at_step(n):
    def batches(step):
        chunks = source(step)
        if step == n - 1:  # the n-th step, as metrics.jsonl numbers it
            chunks[1].x[0, 0] = float("nan")
        return chunks

    return batches


def test_a_nan_stops_the_run_naming_the_step_of_metrics_jsonl(tmp_path):
    trainer, _ = make(tmp_path, steps=5, batches=nan_at_step(3))
    with pytest.raises(FloatingPointError, match=r"^step 3: loss is not finite \(on_nonfinite"):
        trainer.run(Regression(trainer, trainer.config), "regression")
    assert [r["step"] for r in lines(tmp_path)] == [1, 2]
    assert not (tmp_path / "policy").exists()


def test_on_nonfinite_skip_skips_that_update_only(tmp_path):
    trainer, linear = make(tmp_path, steps=5, batches=nan_at_step(3), on_nonfinite="skip")
    trainer.run(Regression(trainer, trainer.config), "regression")
    rows = lines(tmp_path)
    assert [r.get("skipped", 0.0) for r in rows] == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert torch.isfinite(linear.weight).all()


def test_grad_clip_bounds_each_step_and_zero_turns_it_off(tmp_path):
    def moved(**overrides):
        trainer, linear = make(tmp_path / str(overrides), steps=1, optimizer="lion", **overrides)
        before = linear.weight.detach().clone()
        trainer.run(Regression(trainer, trainer.config), "regression")
        return lines(tmp_path / str(overrides))[0]["grad_norm"], (linear.weight - before).abs()

    norm, _ = moved(grad_clip=0.0)
    assert norm > 1.0  # the reported norm is the one before clipping, clip or not
    assert moved(grad_clip=1e-3)[0] == pytest.approx(norm)

    class Raise(Algorithm):
        def update(self, chunks, step):
            raise NonFiniteError("grad_norm")

    trainer, _ = make(tmp_path / "raise", steps=2)
    with pytest.raises(FloatingPointError, match="step 1: grad_norm is not finite"):
        trainer.run(Raise(trainer, trainer.config), "raise")


def test_a_head_beside_the_policy_trains_and_checkpoints_with_it(tmp_path):
    trainer, _ = make(tmp_path, steps=3, checkpoint_every=2)
    head = nn.Linear(2, 1)
    trainer.add_parameters(head)
    before = head.weight.detach().clone()

    class WithHead(Regression):
        def loss(self, chunk, step):
            loss, metrics = super().loss(chunk, step)
            return loss + head(chunk.x).pow(2).mean(), metrics

    trainer.run(WithHead(trainer, trainer.config), "head")
    assert not torch.equal(before, head.weight)
    assert len(trainer.optimizer.param_groups) == 2
    assert any(p is head.weight for p in trainer.params)
    saved = torch.load(tmp_path / "checkpoints" / "step-2" / "state.pt", weights_only=False)
    assert len(saved["optimizer"]["state"]) == 3  # the policy's weight, the head's two


def test_module_gives_heads_their_own_learning_rate():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    groups = Module(model, lambda folder: None, head_names=("1.",), head_lr=0.5)
    body, heads = groups.trainable_parameters()
    assert [id(p) for p in heads["params"]] == [id(model[1].weight), id(model[1].bias)]
    assert heads["lr"] == 0.5 and "lr" not in body and len(body["params"]) == 2


def test_extragradient_steps_from_theta_with_the_look_ahead_gradient(tmp_path):
    """θ½ = step(θ, g(θ)); θ′ = step(θ, g(θ½)) from θ's optimizer state: checked against two
    plain AdamW optimizers driven by hand, on a rotational (game) field F(x, y) = (y, −x)."""

    def field_loss(p):
        x, y = p[0], p[1]
        return x * y.detach() - y * x.detach()  # ∇x = y, ∇y = −x: a bilinear game's field

    class Chunk:
        weight = 1.0

    point = torch.nn.Parameter(torch.tensor([1.0, 0.5]))
    holder = torch.nn.Module()
    holder.p = point
    config = TrainFields(out=str(tmp_path / "eg"), lr=0.1, grad_clip=0.0, tensorboard=False)
    trainer = Trainer(
        config, Module(holder, lambda folder: None), steps=3, batches=lambda s: [Chunk()]
    )
    reference = torch.nn.Parameter(point.detach().clone())
    opt = torch.optim.AdamW([reference], lr=0.1, weight_decay=0.0)
    for _ in range(3):
        trainer.extragradient_step(lambda chunk: (field_loss(point), {}), [Chunk()])
        theta, state = reference.detach().clone(), copy.deepcopy(opt.state_dict())
        opt.zero_grad()
        field_loss(reference).backward()
        opt.step()  # θ½
        opt.zero_grad()
        field_loss(reference).backward()  # g(θ½)
        grad = reference.grad.clone()
        with torch.no_grad():
            reference.copy_(theta)
        opt.load_state_dict(state)
        reference.grad = grad
        opt.step()
        torch.testing.assert_close(point.detach(), reference.detach(), rtol=0, atol=1e-7)
    assert float(point.detach().norm()) < float(torch.tensor([1.0, 0.5]).norm())


def test_optimism_steps_from_theta_with_the_gradient_at_the_prediction(tmp_path):
    """Step 1 is plain; then θ̂ = step(θ, g_prev) and θ′ = step(θ, g(θ̂)) from θ's optimizer
    state, g_prev the last step's gradient: checked against AdamW driven by hand on the
    rotational field, where it spirals out more slowly than plain steps (under Adam's
    normalized steps neither contracts)."""

    def field_loss(p):
        x, y = p[0], p[1]
        return x * y.detach() - y * x.detach()

    class Chunk:
        weight = 1.0

    def trainer_at(name):
        point = torch.nn.Parameter(torch.tensor([1.0, 0.5]))
        holder = torch.nn.Module()
        holder.p = point
        config = TrainFields(out=str(tmp_path / name), lr=0.05, grad_clip=0.0, tensorboard=False)
        module = Module(holder, lambda folder: None)
        return Trainer(config, module, steps=1, batches=lambda s: [Chunk()]), point

    trainer, point = trainer_at("optimistic")
    plain, plain_point = trainer_at("plain")
    reference = torch.nn.Parameter(point.detach().clone())
    opt = torch.optim.AdamW([reference], lr=0.05, weight_decay=0.0)
    last = None
    for _ in range(200):
        trainer.optimistic_step(lambda chunk: (field_loss(point), {}), [Chunk()])
        plain.gradient_step(lambda chunk: (field_loss(plain_point), {}), [Chunk()])
        theta, state = reference.detach().clone(), copy.deepcopy(opt.state_dict())
        if last is not None:
            reference.grad = last.clone()
            opt.step()  # θ̂
        opt.zero_grad()
        field_loss(reference).backward()
        last = reference.grad.clone()
        with torch.no_grad():
            reference.copy_(theta)
        opt.load_state_dict(state)
        reference.grad = last.clone()
        opt.step()
        opt.zero_grad()
        torch.testing.assert_close(point.detach(), reference.detach(), rtol=0, atol=1e-6)
    assert float(point.detach().norm()) < float(plain_point.detach().norm())


def test_the_extragradient_rule_runs_an_online_trainer(tmp_path):
    import tiny_train
    from nlhf.train import nash_md

    trainer, config = tiny_train.make(
        "nash-md", str(tmp_path / "eg"), ["steps=2", "step_rule=extragradient"]
    )
    before = [p.detach().clone() for p in trainer.params]
    last = trainer.run(nash_md.NashMDPG(trainer, config), "nash-md")
    assert math.isfinite(last["loss"]) and last["grad_norm"] > 0
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))

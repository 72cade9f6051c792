"""nlhf.train.optim and nlhf.train.graft: Lion, AdamW#Lion grafting, build_optimizer, lr_factor."""

from __future__ import annotations

import copy
import io
import math

import pytest
import torch

from nlhf.train.graft import Graft
from nlhf.train.optim import Lion, build_optimizer, lr_factor

ADAM_BETAS = (0.9, 0.999)
LION_BETAS = (0.9, 0.99)
EPS = 1e-8


def unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x)


# ---------------------------------------------------------------------------------------------
# Graft: the update rule written out by hand


def test_graft_matches_its_update_rule_written_out():
    a = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 3.0]))
    b = torch.nn.Parameter(torch.tensor([[0.2, -0.7], [1.5, 0.0], [-0.3, 0.9]]))
    frozen = torch.nn.Parameter(torch.tensor([4.0, 5.0]))  # never gets a gradient
    groups = [
        {"params": [a], "lr": 0.05, "weight_decay": 0.1},
        {"params": [b, frozen]},
    ]
    opt = Graft(groups, lr=0.01, weight_decay=0.0)
    grads = {
        "a": [
            torch.tensor([0.3, -0.1, 0.0, 2.0]),  # a zero entry: sign(c) has a zero there
            torch.tensor([-1.0, 0.2, 0.5, 0.1]),
            torch.tensor([0.4, 0.4, -0.6, -3.0]),
        ],
        "b": [
            torch.tensor([[1.0, -0.5], [0.25, 2.0], [-1.5, 0.75]]),
            torch.tensor([[-0.2, 0.1], [0.3, -0.4], [0.5, 0.6]]),
            torch.tensor([[2.0, 0.0], [-1.0, 1.0], [0.1, -0.2]]),
        ],
    }
    hand = {}
    for name, p, lr, wd in (("a", a, 0.05, 0.1), ("b", b, 0.01, 0.0)):
        z = torch.zeros_like(p, dtype=torch.float64)
        hand[name] = {"theta": p.detach().double().clone(), "m": z, "v": z, "mu": z, "lr": lr}
        hand[name]["wd"] = wd

    b1, b2 = ADAM_BETAS
    l1, l2 = LION_BETAS
    for t in (1, 2, 3):
        a.grad, b.grad = grads["a"][t - 1].clone(), grads["b"][t - 1].clone()
        opt.step()
        for name, p in (("a", a), ("b", b)):
            h = hand[name]
            g = grads[name][t - 1].double()
            # AdamW
            h["m"] = b1 * h["m"] + (1 - b1) * g
            h["v"] = b2 * h["v"] + (1 - b2) * g * g
            m_hat = h["m"] / (1 - b1**t)
            v_hat = h["v"] / (1 - b2**t)
            u = m_hat / (torch.sqrt(v_hat) + EPS)
            # Lion
            c = l1 * h["mu"] + (1 - l1) * g
            d = torch.sign(c)
            h["mu"] = l2 * h["mu"] + (1 - l2) * g
            # weight decay, then the grafted step
            h["theta"] = h["theta"] * (1 - h["lr"] * h["wd"])
            h["theta"] = h["theta"] - h["lr"] * torch.sqrt((u * u).sum()) * d / torch.sqrt(
                (d * d).sum()
            )
            torch.testing.assert_close(p.detach().double(), h["theta"], rtol=0, atol=1e-6)
            state = opt.state[p]
            assert state["step"].item() == t
            torch.testing.assert_close(state["exp_avg"].double(), h["m"], rtol=0, atol=1e-6)
            torch.testing.assert_close(state["exp_avg_sq"].double(), h["v"], rtol=0, atol=1e-6)
            torch.testing.assert_close(state["lion_momentum"].double(), h["mu"], rtol=0, atol=1e-6)
    assert torch.equal(frozen.detach(), torch.tensor([4.0, 5.0]))
    assert frozen not in opt.state
    assert set(opt.state[a]) == {"step", "exp_avg", "exp_avg_sq", "lion_momentum"}


def test_graft_step_is_zero_when_the_sign_direction_is_all_zero():
    # Lion's β₁ = 0 makes c = g, so a zero gradient gives sign(c) = 0 while AdamW's
    # moment from the first step still asks for a step of norm > 0.
    p = torch.nn.Parameter(torch.tensor([1.0, -1.0, 2.0]))
    opt = Graft([p], lr=0.1, lion_betas=(0.0, 0.5))
    p.grad = torch.tensor([1.0, 2.0, -3.0])
    opt.step()
    before = p.detach().clone()
    p.grad = torch.zeros(3)
    opt.step()
    assert torch.linalg.vector_norm(opt.state[p]["exp_avg"]) > 0
    assert torch.equal(p.detach(), before)
    assert torch.isfinite(p).all()


# ---------------------------------------------------------------------------------------------
# Graft: norm from AdamW, direction from Lion


def one_step_of_each(p0: torch.Tensor, history: list[torch.Tensor], g: torch.Tensor, lr: float):
    """The step Graft, torch.optim.AdamW (weight_decay=0) and Lion take from the same state
    (reached with the gradients of ``history``) on the gradient ``g``."""
    p = torch.nn.Parameter(p0.clone())
    graft = Graft([p], lr=lr)
    for h in history:
        p.grad = h.clone()
        graft.step()
    state = graft.state[p]

    q = torch.nn.Parameter(p.detach().clone())
    adamw = torch.optim.AdamW([q], lr=lr, betas=ADAM_BETAS, eps=EPS, weight_decay=0.0)
    adamw.state[q] = {
        "step": state["step"].clone(),
        "exp_avg": state["exp_avg"].clone(),
        "exp_avg_sq": state["exp_avg_sq"].clone(),
    }
    r = torch.nn.Parameter(p.detach().clone())
    lion = Lion([r], lr=lr, betas=LION_BETAS)
    lion.state[r] = {"exp_avg": state["lion_momentum"].clone()}

    steps = []
    for param, opt in ((p, graft), (q, adamw), (r, lion)):
        before = param.detach().clone()
        param.grad = g.clone()
        opt.step()
        steps.append(param.detach() - before)
    return tuple(steps)


def norm_is_adamws(step: torch.Tensor, adamw_step: torch.Tensor) -> bool:
    return math.isclose(
        torch.linalg.vector_norm(step).item(),
        torch.linalg.vector_norm(adamw_step).item(),
        rel_tol=1e-5,
    )


def direction_is_lions(step: torch.Tensor, lion_step: torch.Tensor) -> bool:
    return torch.allclose(unit(step), unit(lion_step), rtol=0, atol=1e-5)


def test_graft_moves_as_far_as_adamw_along_lions_direction():
    torch.manual_seed(0)
    p0 = torch.randn(5, 7)
    history = [torch.randn(5, 7) for _ in range(3)]
    g = torch.randn(5, 7) * torch.linspace(0.1, 3.0, 7)  # uneven scales: Adam ≠ sign
    graft_step, adamw_step, lion_step = one_step_of_each(p0, history, g, lr=0.1)
    assert norm_is_adamws(graft_step, adamw_step)
    assert direction_is_lions(graft_step, lion_step)
    # the two checks tell the parts apart: AdamW alone has the norm but not the direction,
    # Lion alone the direction but not the norm
    assert norm_is_adamws(adamw_step, adamw_step)
    assert not direction_is_lions(adamw_step, lion_step)
    assert direction_is_lions(lion_step, lion_step)
    assert not norm_is_adamws(lion_step, adamw_step)


# ---------------------------------------------------------------------------------------------
# Graft: resuming from state_dict


def model_and_graft(seed: int) -> tuple[torch.nn.Module, Graft]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    groups = [
        {"params": model[0].parameters(), "lr": 3e-3},
        {"params": model[2].parameters()},
    ]
    return model, Graft(groups, lr=1e-3, weight_decay=0.01)


def train(model: torch.nn.Module, opt: Graft, batches: list[tuple[torch.Tensor, torch.Tensor]]):
    for x, y in batches:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()


def test_graft_resumes_from_its_state_dict_bit_for_bit():
    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(6, 4, generator=gen), torch.randn(6, 2, generator=gen)) for _ in range(7)
    ]
    k = 3

    model, opt = model_and_graft(seed=0)
    train(model, opt, batches)

    first, first_opt = model_and_graft(seed=0)
    train(first, first_opt, batches[:k])
    buffer = io.BytesIO()
    torch.save({"model": first.state_dict(), "optimizer": first_opt.state_dict()}, buffer)
    buffer.seek(0)
    saved = torch.load(buffer)

    resumed, resumed_opt = model_and_graft(seed=123)  # different weights until loaded
    resumed.load_state_dict(saved["model"])
    resumed_opt.load_state_dict(saved["optimizer"])
    assert [g["lr"] for g in resumed_opt.param_groups] == [3e-3, 1e-3]
    train(resumed, resumed_opt, batches[k:])

    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        sa, sb = opt.state[a], resumed_opt.state[b]
        assert set(sa) == set(sb) == {"step", "exp_avg", "exp_avg_sq", "lion_momentum"}
        for key in sa:
            assert torch.equal(sa[key], sb[key]), key


def test_graft_keeps_its_step_count_float32_through_load_state_dict():
    p = torch.nn.Parameter(torch.ones(3, dtype=torch.bfloat16))
    opt = Graft([p], lr=1e-2)
    for _ in range(2):
        p.grad = torch.full((3,), 0.5, dtype=torch.bfloat16)
        opt.step()
    q = torch.nn.Parameter(p.detach().clone())
    other = Graft([q], lr=1e-2)
    other.load_state_dict(copy.deepcopy(opt.state_dict()))
    assert other.state[q]["step"].dtype == torch.float32
    assert other.state[q]["step"].item() == 2
    assert other.state[q]["exp_avg"].dtype == torch.bfloat16


def test_graft_rejects_bad_arguments():
    p = torch.nn.Parameter(torch.zeros(2))
    with pytest.raises(ValueError, match="lr must be > 0"):
        Graft([p], lr=0.0)
    with pytest.raises(ValueError, match="adam_betas"):
        Graft([p], adam_betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lion_betas"):
        Graft([p], lion_betas=(-0.1, 0.99))
    with pytest.raises(ValueError, match="eps"):
        Graft([p], eps=-1.0)
    with pytest.raises(ValueError, match="weight_decay"):
        Graft([p], weight_decay=-0.1)


# ---------------------------------------------------------------------------------------------
# build_optimizer


def test_build_optimizer_graft_keeps_each_groups_lr():
    a = torch.nn.Parameter(torch.tensor([1.0, -1.0]))
    b = torch.nn.Parameter(torch.tensor([2.0, 0.5, -3.0]))
    groups = [{"params": iter([a]), "lr": 0.5}, {"params": [b]}]
    opt = build_optimizer("graft", groups, lr=0.1, weight_decay=0.01)
    assert isinstance(opt, Graft)
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.01, 0.01]
    assert "lr" not in groups[1]  # the caller's groups are left as they were

    # a schedule scales every group's own lr (factor(0) = 1 for linear decay without warm-up)
    scheduler = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(10, 0, "linear"))
    assert [g["lr"] for g in opt.param_groups] == [0.5, 0.1]

    # first step: AdamW's u is ≈ sign(g), so each tensor moves by ≈ its group's lr per entry
    a.grad, b.grad = torch.tensor([0.3, -2.0]), torch.tensor([1.0, -0.1, 0.2])
    opt.step()
    torch.testing.assert_close(
        a.detach(), torch.tensor([1.0, -1.0]) * (1 - 0.5 * 0.01) - 0.5 * torch.tensor([1.0, -1.0])
    )
    torch.testing.assert_close(
        b.detach(),
        torch.tensor([2.0, 0.5, -3.0]) * (1 - 0.1 * 0.01) - 0.1 * torch.tensor([1.0, -1.0, 1.0]),
    )
    scheduler.step()
    assert [g["lr"] for g in opt.param_groups] == pytest.approx([0.45, 0.09])


def test_build_optimizer_adamw_and_lion():
    p = torch.nn.Parameter(torch.zeros(3))
    adamw = build_optimizer("adamw", [p], lr=1e-3, weight_decay=0.1)
    assert type(adamw) is torch.optim.AdamW
    assert adamw.defaults["fused"] is True  # nothing sharded: the fused kernel
    assert adamw.param_groups[0]["weight_decay"] == 0.1
    lion = build_optimizer("lion", [{"params": [p], "lr": 3e-4}], lr=1e-4)
    assert isinstance(lion, Lion)
    assert lion.param_groups[0]["lr"] == 3e-4
    assert lion.param_groups[0]["weight_decay"] == 0.0


def test_build_optimizer_rejects_an_unknown_name():
    p = torch.nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match="adamw, lion or graft"):
        build_optimizer("sgd", [p], lr=1e-3)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# Lion


def test_lion_matches_its_update_rule_written_out():
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 0.5, 0.0]))
    opt = Lion([p], lr=0.1, betas=(0.9, 0.99), weight_decay=0.2)
    theta = p.detach().clone()
    m = torch.zeros(4)
    for g in (
        torch.tensor([0.3, -0.1, 0.0, 1.0]),
        torch.tensor([-1.0, 0.2, 0.5, -0.01]),
        torch.tensor([0.05, 0.05, -0.5, 0.0]),
    ):
        p.grad = g.clone()
        opt.step()
        c = 0.9 * m + 0.1 * g
        theta = theta * (1 - 0.1 * 0.2) - 0.1 * torch.sign(c)
        m = 0.99 * m + 0.01 * g
        torch.testing.assert_close(p.detach(), theta, rtol=0, atol=1e-6)
        torch.testing.assert_close(opt.state[p]["exp_avg"], m, rtol=0, atol=1e-7)
    with pytest.raises(ValueError, match="lr must be > 0"):
        Lion([p], lr=0.0)
    with pytest.raises(ValueError, match="betas"):
        Lion([p], betas=(0.9, 1.0))


# ---------------------------------------------------------------------------------------------
# lr_factor


def test_lr_factor_warms_up_linearly():
    for schedule in ("constant", "linear", "cosine"):
        f = lr_factor(steps=14, warmup_steps=4, schedule=schedule)
        assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]


def test_lr_factor_constant_linear_and_cosine():
    constant = lr_factor(steps=14, warmup_steps=4, schedule="constant")
    assert [constant(s) for s in (4, 9, 14, 100)] == [1.0, 1.0, 1.0, 1.0]
    # after the warm-up, progress = (step - 4) / (14 - 4)
    linear = lr_factor(steps=14, warmup_steps=4, schedule="linear")
    assert [linear(s) for s in (4, 6, 9, 14, 20)] == pytest.approx([1.0, 0.8, 0.5, 0.0, 0.0])
    cosine = lr_factor(steps=14, warmup_steps=4, schedule="cosine")
    # 0.5·(1 + cos(π·progress)): progress 0.2 → (1 + 0.809017)/2; 0.5 → 0.5; ≥ 1 → 0
    assert [cosine(s) for s in (4, 6, 9, 14, 30)] == pytest.approx([1.0, 0.9045085, 0.5, 0.0, 0.0])
    no_warmup = lr_factor(steps=10, warmup_steps=0, schedule="linear")
    assert [no_warmup(s) for s in (0, 5, 10)] == pytest.approx([1.0, 0.5, 0.0])


def test_lr_factor_follows_the_time_budget():
    seconds = [0.0]
    budget = {"steps": 1_000_000, "warmup_steps": 2, "time_limit": 2.0}  # two minutes
    linear = lr_factor(schedule="linear", elapsed=lambda: seconds[0], **budget)
    cosine = lr_factor(schedule="cosine", elapsed=lambda: seconds[0], **budget)
    constant = lr_factor(schedule="constant", elapsed=lambda: seconds[0], **budget)
    assert linear(0) == 0.5  # the warm-up still counts steps
    assert linear(5) == 1.0 and cosine(5) == 1.0
    seconds[0] = 30.0  # a quarter of the budget, whatever the step
    assert linear(5) == pytest.approx(0.75) and linear(500_000) == pytest.approx(0.75)
    assert cosine(5) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))  # 0.8535534
    assert constant(5) == 1.0
    seconds[0] = 60.0
    assert linear(5) == pytest.approx(0.5) and cosine(5) == pytest.approx(0.5)
    seconds[0] = 180.0  # past the budget
    assert linear(5) == 0.0 and cosine(5) == pytest.approx(0.0)
    # a time limit without a clock falls back to the step count
    steps_only = lr_factor(steps=12, warmup_steps=2, schedule="linear", time_limit=2.0)
    assert steps_only(7) == pytest.approx(0.5)


def test_lr_factor_rejects_an_unknown_schedule():
    with pytest.raises(ValueError, match="constant, linear or cosine"):
        lr_factor(steps=10, warmup_steps=0, schedule="step")  # type: ignore[arg-type]

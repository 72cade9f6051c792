"""Nash-MD-PG for acting policies (nlhf.control.nash): a step's preferences, baseline, per-step
weights (nlhf.losses.nash_md_pg_weights) and loss match a hand computation; self-play scores
in-group win rates; one step moves every actor weight; a SIGKILLed run resumes bit for bit;
the true-return preference alone teaches CartPole."""

import math

import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

import control_train
from nlhf.control import nash
from nlhf.control.rollout import ControlRollout
from nlhf.control.trainer import build_trainer
from online_harness import assert_identical, metrics, saved_tensors

LOG_PI = math.log(0.5)  # the uniform policy of the hand-worked tests
LOG_MU = torch.log(torch.tensor([0.8, 0.2]))  # μ of the hand-worked tests


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def tiny(tmp_path, **fields):
    """A ControlNashMDPG on CartPole with π uniform (zero output layer) and μ = (0.8, 0.2)."""
    values = dict(out=str(tmp_path), steps=1, states=1, samples=2, opponents=1, length=3,
                  tau=0.1, epochs=1, progress=False, tensorboard=False)  # fmt: skip
    config = nash.Config(**{**values, **fields})
    trainer = build_trainer(config, critic=False)
    algorithm = nash.ControlNashMDPG(trainer, config, nash.return_preference)
    with torch.no_grad():
        for model, bias in ((algorithm.policy, torch.zeros(2)), (algorithm.reference, LOG_MU)):
            model.actor[-1].weight.zero_()
            model.actor[-1].bias.copy_(bias)
    return trainer, algorithm


def hand_rollout(actions, rewards, dones) -> ControlRollout:
    """3 steps of len(actions) copies played by the uniform π."""
    actions, rewards = torch.tensor(actions).T, torch.tensor(rewards, dtype=torch.float32).T
    dones = torch.tensor(dones).T
    t, n = actions.shape
    ends = {(int(a), int(b)): torch.full((4,), 0.5) for a, b in torch.nonzero(dones)}
    return ControlRollout(
        obs=torch.zeros(t, n, 4), actions=actions, logprobs=torch.full((t, n), LOG_PI),
        values=torch.zeros(t, n), rewards=rewards, dones=dones,
        episodes=torch.zeros(t, n, dtype=torch.long), next_obs=torch.zeros(n, 4), final_obs=ends,
    )  # fmt: skip


def test_one_step_by_hand(tmp_path):
    _, algorithm = tiny(tmp_path)
    # copies 0, 1 play π, copy 2 the opponent; copy 1's episode ends at its second step.
    rollout = hand_rollout(
        actions=[[0, 1, 1], [0, 1, 0], [1, 1, 1]],
        rewards=[[1, 1, 1], [1, 1, 0], [1, 1, 1]],
        dones=[[False] * 3, [False, True, False], [False] * 3],
    )
    batch, logged = algorithm.weigh(rollout)
    # returns 3, 2 against 3: P = σ(0) = 0.5 and σ(−1) = 0.268941; the leave-one-out
    # baseline of each is the other's P, so A = ±0.231059.
    a = 0.5 - 1 / (1 + math.e)
    assert logged["win_rate"] == pytest.approx((0.5 + 1 / (1 + math.e)) / 2)
    # log π − log μ: action 0 → log(0.5/0.8) = −0.470004, action 1 → log(0.5/0.2) = 0.916291
    k0, k1 = math.log(0.5 / 0.8), math.log(0.5 / 0.2)
    # weights A − τ·(the KL of the rest of the segment), τ = 0.1; copy 1 has 2 steps
    w = [
        [a - 0.1 * (k0 + 2 * k1), a - 0.1 * 2 * k1, a - 0.1 * k1],
        [-a - 0.1 * (k0 + k1), -a - 0.1 * k1, 0.0],
    ]
    torch.testing.assert_close(batch.weights, torch.tensor(w))
    assert batch.mask.tolist() == [[True] * 3, [True, True, False]]
    # the loss at the rollout's policy (ratio 1): −mean of the weights over the 5 steps
    loss, _ = algorithm.loss(batch, 0)
    assert float(loss.detach()) == pytest.approx(-(sum(w[0]) + sum(w[1])) / 5, abs=1e-6)


def test_self_play_scores_in_group_win_rates(tmp_path):
    _, algorithm = tiny(tmp_path, beta=0.0, samples=3, opponents=0, tau=0.0)
    rollout = hand_rollout(
        actions=[[0, 0, 0]] * 3,
        rewards=[[1, 1, 1], [1, 1, 0], [1, 0, 0]],
        dones=[[False] * 3, [False, True, False], [True, False, False]],
    )
    batch, _ = algorithm.weigh(rollout)
    s = torch.sigmoid(torch.tensor([1.0, 2.0]))  # returns 3, 2, 1: σ(ΔR) of each pair
    win = torch.stack([(s[0] + s[1]) / 2, ((1 - s[0]) + s[0]) / 2, ((1 - s[1]) + (1 - s[0])) / 2])
    expected = (win - 0.5)[:, None] * batch.mask
    torch.testing.assert_close(batch.weights, expected)


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        (dict(beta=1.5), "beta"),
        (dict(samples=1), "leave_one_out"),
        (dict(opponents=0), "opponents"),
        (dict(states=0), "states"),
    ],
)
def test_config_refuses_bad_values(fields, needle):
    with pytest.raises(ValueError, match=needle):
        nash.Config(**fields)


def test_one_step_moves_every_actor_weight_and_logs_its_metrics(tmp_path):
    trainer, algorithm, _ = control_train.make(
        "nash", str(tmp_path), ["steps=1", "length=40", "states=4"]
    )
    assert len(trainer.params) == 6  # the actor only: the critic is frozen
    before = [p.detach().clone() for p in trainer.params]
    critic = [p.detach().clone() for p in algorithm.policy.critic.parameters()]
    trainer.run(algorithm, "control-nash")
    assert not any(torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))
    assert all(
        torch.equal(a, b) for a, b in zip(critic, algorithm.policy.critic.parameters(), strict=True)
    )
    (row,) = metrics(tmp_path)
    for key in ("loss", "win_rate", "kl", "segment_return", "opponent_return", "approx_kl",
                "entropy", "grad_norm", "agent_steps", "steps_per_second"):  # fmt: skip
        assert math.isfinite(row[key]), key


def test_sigkill_and_resume_on_sticky_pong_matches_an_uninterrupted_run(tmp_path):
    pytest.importorskip("ale_py", reason="ale-py is not installed (nlhf[control])")
    full, resumed = control_train.kill_and_resume(
        "nash", tmp_path, "env=ALE/Pong-v5", "sticky=0.25", "length=8"
    )
    weights = [saved_tensors(f / "policy" / "model.safetensors") for f in (full, resumed)]
    assert_identical(*weights)

    def curve(folder):
        return [(r["step"], r["loss"], r["win_rate"], r["kl"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)


def test_the_return_preference_alone_teaches_cartpole(tmp_path):
    config = nash.Config(out=str(tmp_path), steps=60, progress=False, tensorboard=False)
    _, last = nash.train(config, nash.return_preference)
    assert metrics(tmp_path)[0]["episode_return"] < 30
    assert last["episode_return"] > 80


@pytest.mark.slow
def test_the_return_preference_alone_solves_cartpole(tmp_path):
    config = nash.Config(out=str(tmp_path), steps=250, progress=False, tensorboard=False)
    nash.train(config, nash.return_preference)
    best = max(r.get("episode_return", 0.0) for r in metrics(tmp_path))
    assert best >= 475  # CartPole-v1's threshold: the mean of the last 20 episodes

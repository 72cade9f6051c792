"""The SPO update of the NLHF route (nlhf.control.spo), each piece against its definition on a
constructed rollout: segments end after ``length`` steps or with their episode and carry over
rollouts; a segment's win rate minus its baseline is the reward at its end step, −τ·log(π/μ)
at every step; GAE from the critic; the entropy bonus; one step trains actor and critic."""

import math

import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

from nlhf.control import nash, spo
from nlhf.control.rollout import ControlRollout, Episode
from nlhf.control.trainer import build_trainer
from online_harness import metrics

LOG_MU = torch.log(torch.tensor([0.8, 0.2]))  # μ of the hand-worked tests; π is uniform
K = [math.log(0.5 / 0.8), math.log(0.5 / 0.2)]  # log π − log μ of actions 0 and 1


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def rollout_of(actions, rewards, dones, first=0.0, values=None, length=None) -> ControlRollout:
    """A rollout of [T, N] steps; obs[t, n] = (first + t, n, 0, 0); an episode that ends at
    (t, n) ends in the observation (−1, n, t, 0), ``length`` steps long (default t + 1)."""
    actions, rewards = torch.tensor(actions), torch.tensor(rewards, dtype=torch.float32)
    dones = torch.tensor(dones)
    t, n = actions.shape
    finished = [Episode(int(b), 0, 0.0, int(a) + 1 if length is None else length)
                for a, b in torch.nonzero(dones)]  # fmt: skip
    obs = torch.zeros(t, n, 4)
    obs[..., 0] = first + torch.arange(t, dtype=torch.float32)[:, None]
    obs[..., 1] = torch.arange(n, dtype=torch.float32)
    ends = {(int(a), int(b)): torch.tensor([-1.0, float(b), float(a), 0.0])
            for a, b in torch.nonzero(dones)}  # fmt: skip
    return ControlRollout(
        obs=obs, actions=actions, logprobs=torch.full((t, n), math.log(0.5)),
        values=torch.zeros(t, n) if values is None else torch.tensor(values),
        rewards=rewards, dones=dones, episodes=torch.zeros(t, n, dtype=torch.long),
        next_obs=torch.ones(n, 4), finished=finished, final_obs=ends,
    )  # fmt: skip


def test_segments_end_after_length_steps_or_with_their_episode_and_carry_over():
    streams = spo.Streams(copies=2, length=3)
    # copy 1's episode ends at t=1
    first = rollout_of([[0, 0], [0, 1], [0, 0], [0, 0]], [[1, 1]] * 4,
                       [[False, False], [False, True], [False, False], [False, False]])  # fmt: skip
    segs, logprobs, ends = streams.cut(first)
    assert ends == [(2, 0), (1, 1)]
    assert segs.mask.tolist() == [[True] * 3, [True, True, False]]
    assert segs.obs[1, :, 0].tolist() == [0, 1, -1]  # goes on in the end state (−1, 1, 1, 0)
    assert segs.actions[1].tolist() == [0, 1, 0] and segs.rewards[1].tolist() == [1, 1, 0]
    torch.testing.assert_close(logprobs[1], torch.tensor([math.log(0.5)] * 2 + [0.0]))
    # copy 0 holds step 3, copy 1 steps 2–3; the next rollout's steps are 10, 11, ...
    second = rollout_of([[1, 1]] * 4, [[1, 1]] * 4, [[False, False]] * 4, first=10.0)
    segs, _, ends = streams.cut(second)
    assert ends == [(1, 0), (0, 1), (3, 1)]
    assert segs.obs[:, :, 0].tolist() == [[3, 10, 11], [2, 3, 10], [11, 12, 13]]
    assert segs.mask.all() and segs.actions[0].tolist() == [0, 1, 1]
    assert [len(held.get("actions", [])) for held in streams.open] == [2, 0]


def tiny(tmp_path, **fields):
    """A ControlSPO on CartPole with π uniform (zero output layer) and μ = (0.8, 0.2), judged
    by the true-return preference σ(R_a − R_b)."""
    values = dict(update="spo", out=str(tmp_path), steps=1, n_envs=2, n_steps=3, length=3,
                  mini_batches=1, tau=0.1, beta=0.0, progress=False, tensorboard=False)  # fmt: skip
    config = nash.Config(**{**values, **fields})
    trainer = build_trainer(config)
    algorithm = spo.ControlSPO(trainer, config, spo.every_pair(nash.return_preference))
    with torch.no_grad():
        for model, bias in ((algorithm.policy, torch.zeros(2)), (algorithm.reference, LOG_MU)):
            model.actor[-1].weight.zero_()
            model.actor[-1].bias.copy_(bias)
    return trainer, algorithm


def test_self_play_rewards_the_win_rate_over_the_other_segments_at_the_segment_end(tmp_path):
    _, algorithm = tiny(tmp_path)
    # copy 0: three living steps (return 3); copy 1 ends at t=1 (return 2)
    rollout = rollout_of([[0, 1], [1, 1], [1, 0]], [[1, 1], [1, 1], [1, 0]],
                         [[False, False], [False, True], [False, False]])  # fmt: skip
    rewards, logged = algorithm.rewards(rollout)
    # the leave-one-out win rates are σ(1) and σ(−1); the baseline of each is the other's
    w = 1 / (1 + math.exp(-1))
    score = w - (1 - w)
    kl = [[K[0], K[1]], [K[1], K[1]], [K[1], K[0]]]  # log π − log μ of each step's action
    expected = -0.1 * torch.tensor(kl)
    expected[2, 0] += score  # copy 0's segment ends at its third step
    expected[1, 1] -= score  # copy 1's with its episode, at its second
    torch.testing.assert_close(rewards, expected)
    assert logged["win_rate"] == pytest.approx(0.5)
    assert logged["kl"] == pytest.approx(((K[0] + 2 * K[1]) + 2 * K[1]) / 2)  # Σ per segment


def test_a_segment_cut_by_the_time_limit_is_not_scored(tmp_path):
    _, algorithm = tiny(tmp_path, tau=0.0)
    assert algorithm.max_steps == 500  # CartPole-v1's limit
    dones = [[False, False], [False, True], [False, False]]
    kept, logged = algorithm.rewards(rollout_of([[0, 0]] * 3, [[1, 1]] * 3, dones))
    _, algorithm = tiny(tmp_path, tau=0.0)
    cut, _ = algorithm.rewards(rollout_of([[0, 0]] * 3, [[1, 1]] * 3, dones, length=500))
    assert kept[1, 1] < 0 and kept[2, 0] > 0 and logged["segments"] == 2  # a lost game
    assert cut.abs().sum() == 0  # the lone scored segment scores ½ − ½


def test_opponent_copies_score_pi_against_the_mixture_segments(tmp_path):
    _, algorithm = tiny(tmp_path, beta=0.5, opponents=1, baseline="half", tau=0.0)
    assert algorithm.runner.n == 3  # two copies of π, one of the opponent π_β
    rollout = rollout_of(
        [[0, 0, 0]] * 3,
        [[1, 1, 1], [1, 0, 1], [1, 0, 1]],
        [[False, False, False], [False, False, False], [False, False, False]],
    )
    rewards, logged = algorithm.rewards(rollout)
    expected = torch.zeros(3, 2)
    expected[2, 0] = 0.5 - 0.5  # return 3 against 3: σ(0) − ½
    expected[2, 1] = 1 / (1 + math.e**2) - 0.5  # return 1 against 3
    torch.testing.assert_close(rewards, expected)
    assert logged["opponent_return"] == 3.0
    # the opponent acts from π^(1−β)·μ^β, π from itself
    logits, _ = algorithm.act(torch.zeros(3, 4))
    mixed = torch.log_softmax(0.5 * LOG_MU, -1)
    torch.testing.assert_close(torch.log_softmax(logits, -1)[2], mixed)
    torch.testing.assert_close(torch.softmax(logits[:2], -1), torch.full((2, 2), 0.5))


def test_advantages_are_gae_of_the_critic_over_each_copys_stream(tmp_path):
    _, algorithm = tiny(tmp_path, n_steps=4, gamma=0.9, lam=0.8)
    values = [[0.5, 1.0], [0.2, -1.0], [0.1, 0.3], [0.4, 0.0]]
    rollout = rollout_of([[0, 0]] * 4, [[1, 1]] * 4,
                         [[False, False], [False, True], [False, False], [False, False]],
                         values=values)  # fmt: skip
    rewards = torch.tensor([[0.1, 0.2], [0.3, -0.4], [0.0, 0.5], [1.0, 0.6]])
    batch = algorithm.batch(spo.learners_of(rollout, 2), rewards)
    v = torch.tensor(values)
    after = algorithm.policy.value(rollout.next_obs).detach()  # V after the last step
    gamma, lam, dones = 0.9, 0.8, rollout.dones
    expected = torch.zeros(4, 2)
    for n in range(2):
        for t in range(4):  # A_t = Σ_k (γλ)^k δ_{t+k}, up to the episode's end
            total, k = 0.0, 0
            while t + k < 4:
                s = t + k
                later = after[n] if s == 3 else v[s + 1, n]
                delta = rewards[s, n] + gamma * later * (not dones[s, n]) - v[s, n]
                total += (gamma * lam) ** k * delta
                if dones[s, n]:
                    break
                k += 1
            expected[t, n] = total
    torch.testing.assert_close(batch.advantages, expected.reshape(-1))
    torch.testing.assert_close(batch.returns, (expected + v).reshape(-1))


def test_the_loss_carries_the_entropy_bonus_and_the_value_loss(tmp_path):
    _, algorithm = tiny(tmp_path, n_steps=4, clip_value=False)
    rollout = rollout_of([[0, 1]] * 4, [[1, 1]] * 4, [[False, False]] * 4)
    batch = algorithm.batch(spo.learners_of(rollout, 2), torch.ones(4, 2))
    index = torch.arange(8)
    losses = {}
    for coef in (0.0, 0.5):
        algorithm.config.ent_coef = coef
        loss, logged = algorithm.losses(batch, index)
        losses[coef] = float(loss.detach())
    # π is uniform over two actions: entropy −Σ π log π = log 2 at every state
    assert logged["entropy"] == pytest.approx(math.log(2))
    assert losses[0.0] - losses[0.5] == pytest.approx(0.5 * math.log(2), abs=1e-6)
    values = algorithm.policy.value(batch.obs).detach()
    value_loss = 0.5 * ((values - batch.returns) ** 2).mean()
    assert logged["value_loss"] == pytest.approx(float(value_loss), rel=1e-5)


def test_update_spo_needs_a_rollout_at_least_a_segment_long():
    with pytest.raises(ValueError, match="n_steps"):
        nash.Config(update="spo", n_steps=20, length=25)


def test_one_step_trains_actor_and_critic_and_logs_its_metrics(tmp_path):
    config = nash.Config(update="spo", out=str(tmp_path), steps=1, n_envs=2, n_steps=64,
                         length=16, beta=0.125, opponents=1, progress=False,
                         tensorboard=False)  # fmt: skip
    trainer = build_trainer(config)
    algorithm = spo.ControlSPO(trainer, config, spo.every_pair(nash.return_preference))
    assert len(trainer.params) == 12  # actor and critic
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "control-spo")
    assert not any(torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))
    (row,) = metrics(tmp_path)
    for key in ("loss", "win_rate", "kl", "segments", "segment_return", "opponent_return",
                "entropy", "value_loss", "explained_variance", "agent_steps"):  # fmt: skip
        assert math.isfinite(row[key]), key
    assert row["agent_steps"] == 3 * 64  # π's two copies and the opponent's
    algorithm.runner.close()

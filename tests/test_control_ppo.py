"""PPO for acting policies (nlhf.control.ppo): GAE over streams with episode ends, worked by
hand; one step moves every weight and logs the documented metrics; a learned reward replaces
the game's; a SIGKILLed run resumes to bit-identical weights; CartPole improves in seconds."""

import math

import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

import control_train
from nlhf.config import ConfigError
from nlhf.control import ppo
from nlhf.control.rollout import build_trainer
from nlhf.losses import gae
from online_harness import assert_identical, metrics, saved_tensors

DOCUMENTED = {
    "loss", "policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction", "grad_norm",
    "explained_variance", "episodes", "episode_return", "episode_length", "agent_steps",
    "rollout_seconds", "update_seconds", "steps_per_second", "lr", "step_seconds",
}  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_stream_gae_by_hand():
    # γ = 0.9, λ = 0.8; step 1 ends its episode, so step 2 starts another one.
    # t=2: δ = 1 + 0.9·2 − 0.5 = 2.3 = A₂;   t=1 (done): δ = 1 − 0.5 = 0.5 = A₁;
    # t=0: δ = 1 + 0.9·0.5 − 0.5 = 0.95, A₀ = 0.95 + 0.9·0.8·0.5 = 1.31
    rewards, values = torch.ones(3, 1), torch.full((3, 1), 0.5)
    dones = torch.tensor([[False], [True], [False]])
    adv, ret = ppo.stream_gae(rewards, values, dones, torch.tensor([2.0]), 0.9, 0.8)
    torch.testing.assert_close(adv.flatten(), torch.tensor([1.31, 0.5, 2.3]))
    torch.testing.assert_close(ret, adv + values)


def test_stream_gae_of_one_whole_episode_is_the_sequence_gae():
    g = torch.Generator().manual_seed(0)
    rewards, values = torch.randn(7, 1, generator=g), torch.randn(7, 1, generator=g)
    dones = torch.zeros(7, 1, dtype=torch.bool)
    dones[-1] = True
    adv, _ = ppo.stream_gae(rewards, values, dones, torch.tensor([9.0]), 0.99, 0.95)
    expected, _ = gae(rewards.T, values.T, torch.ones(1, 7, dtype=torch.bool), 0.99, 0.95)
    torch.testing.assert_close(adv.T, expected)


@pytest.mark.parametrize(
    ("field", "value"), [("n_envs", 0), ("minibatches", 3), ("clip", 0.0), ("gamma", 1.5)]
)
def test_config_refuses_bad_values(field, value):
    with pytest.raises(ConfigError, match=field):
        ppo.Config(**{field: value})


def test_one_step_moves_every_weight_and_logs_the_documented_metrics(tmp_path):
    trainer, algorithm, _ = control_train.make("ppo", str(tmp_path), ["steps=1", "n_steps=64"])
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, "control-ppo")
    after = [p.detach() for p in trainer.params]
    assert len(after) == 12 and not any(
        torch.equal(a, b) for a, b in zip(before, after, strict=True)
    )
    (row,) = metrics(tmp_path)
    assert row.pop("step") == 1
    assert row.keys() == DOCUMENTED, row.keys() ^ DOCUMENTED
    assert all(math.isfinite(v) for v in row.values())
    assert (tmp_path / "policy" / "model.safetensors").exists()


def test_a_learned_reward_replaces_the_game_reward_normalized(tmp_path):
    seen = []

    def reward_fn(obs, actions):
        seen.append((obs.shape, actions.shape))
        return 3.0 - obs[:, 2].abs() * 10  # any per-step r̂(s, a)

    config = ppo.Config(
        out=str(tmp_path), steps=2, n_envs=2, n_steps=16, minibatches=2, progress=False,
        tensorboard=False,
    )  # fmt: skip
    trainer = build_trainer(config)
    algorithm = ppo.PPO(trainer, config, reward_fn)
    trainer.run(algorithm, "control-ppo")
    assert seen == [(torch.Size([32, 4]), torch.Size([32]))] * 2
    assert algorithm.moments.count == 64
    rows = metrics(tmp_path)
    assert all(2.0 < r["learned_reward"] <= 3.0 for r in rows)
    rollout = algorithm.runner.collect(lambda o: (torch.zeros(len(o), 2), torch.zeros(len(o))), 4)
    normalized, _ = algorithm.rewards(rollout)
    raw = 3.0 - rollout.obs[..., 2].abs() * 10
    m = algorithm.moments
    torch.testing.assert_close(normalized, (raw - m.mean) / m.std)


def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path):
    full, resumed = control_train.kill_and_resume("ppo", tmp_path)
    weights = [saved_tensors(f / "policy" / "model.safetensors") for f in (full, resumed)]
    assert_identical(*weights)

    def curve(folder):
        return [(r["step"], r["loss"], r["episode_return"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed)


def test_cartpole_improves_clearly_within_seconds(tmp_path):
    config = ppo.Config(out=str(tmp_path), steps=30, progress=False, tensorboard=False)
    _, last = ppo.train(config)
    assert metrics(tmp_path)[0]["episode_return"] < 30  # a near-uniform policy: about 20
    assert last["episode_return"] > 50

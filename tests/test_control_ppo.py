"""PPO for acting policies (nlhf.control.ppo): its fields mean what the LM PPO's fields of the
same name mean; one step moves every weight and logs the documented metrics; a learned reward
replaces the game's; a SIGKILLed run resumes to bit-identical weights; CartPole improves in
seconds.  (GAE over episode streams is tested with nlhf.losses.)"""

import dataclasses
import math

import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

import control_train
from nlhf.control import ppo
from nlhf.control.trainer import build_trainer
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


@pytest.mark.parametrize(
    ("field", "value"), [("n_envs", 0), ("mini_batches", 3), ("clip", 0.0), ("gamma", 1.5)]
)
def test_config_refuses_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        ppo.Config(**{field: value})


#: What a field of both PPO configs must say in its help on both sides (the same meaning).
SHARED_MEANING = {
    "clip": "clip",
    "epochs": "passes",
    "mini_batches": "mini-batches",
    "target_kl": "stop",
    "gamma": "discount",
    "lam": "λ",
    "lr": "learning rate",
    "schedule": "learning-rate",
    "grad_clip": "gradient norm",
    "checkpoint_every": "checkpoint",
    "steps": "steps",
    "time_limit": "minutes",
    "vf_coef": "value loss",
    "out": "output folder",
}


def test_a_field_both_ppo_configs_have_means_the_same_on_both_sides():
    from nlhf.train import ppo as lm_ppo

    def helps(cls):
        return {f.name: f.metadata["help"] for f in dataclasses.fields(cls)}

    mine, theirs = helps(ppo.Config), helps(lm_ppo.Config)
    differ = {name for name in mine.keys() & theirs.keys() if mine[name] != theirs[name]}
    assert differ <= SHARED_MEANING.keys(), differ - SHARED_MEANING.keys()
    for name in differ:
        word = SHARED_MEANING[name]
        assert word in mine[name].lower() and word in theirs[name].lower(), (name, word)


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
        out=str(tmp_path), steps=2, n_envs=2, n_steps=16, mini_batches=2, progress=False,
        tensorboard=False,
    )  # fmt: skip
    trainer = build_trainer(config)
    algorithm = ppo.ControlPPO(trainer, config, reward_fn)
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

"""Games for acting policies (nlhf.control.envs): feature vectors and specs; a saved state
replays bit for bit, in the same env and in another one, in every family (classic control
with its RNG, Pong with sticky actions, MinAtar, and games restored by replaying their seed
and actions); a game whose replay differs is refused before training; options that do not fit
a game are one-line errors naming the option."""

import numpy as np
import pytest

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

import gymnasium as gym

from nlhf.config import ConfigError
from nlhf.control import routes
from nlhf.control.envs import (
    check_restorable,
    make_env,
    make_vector_env,
    restore_state,
    save_state,
    spec_of,
)


def play(env, steps: int, seed: int = 0) -> list:
    """``steps`` fixed pseudo-random actions; every observation, reward and end flag (an
    ended episode is reset, so the RNG of the env's resets is replayed too)."""
    actions = np.random.default_rng(seed).integers(env.action_space.n, size=steps)
    out = []
    for a in actions.tolist():
        obs, reward, terminated, truncated, _ = env.step(a)
        out.append((obs.copy(), reward, terminated, truncated))
        if terminated or truncated:
            out.append((env.reset()[0].copy(), 0.0, False, False))
    return out


def assert_same(a: list, b: list) -> None:
    assert len(a) == len(b)
    for (oa, ra, ta, ua), (ob, rb, tb, ub) in zip(a, b, strict=True):
        assert np.array_equal(oa, ob) and (ra, ta, ua) == (rb, tb, ub)


def replays_exactly(env_id: str, other_seed: int, points: int = 10, **kwargs) -> list:
    """Save the state at ``points`` places along one game and replay 30 steps from each, in
    the same env and in another one played differently meanwhile (its previous action, its
    RNG and its features' memory differ); returns the first replay's steps."""
    env, elsewhere = make_env(env_id, 3, **kwargs), make_env(env_id, other_seed, **kwargs)
    replays = []
    for point in range(points):
        play(env, 15, seed=point)
        play(elsewhere, 5, seed=100 + point)
        saved = save_state(env)
        first = play(env, 30)
        restore_state(env, saved)
        assert_same(first, play(env, 30))
        restore_state(elsewhere, saved)
        assert_same(first, play(elsewhere, 30))
        replays += first
    return replays


def test_cartpole_features_and_spec():
    env = make_env("CartPole-v1", 0)
    spec = spec_of(env)
    assert (spec.obs_dim, spec.n_actions, spec.fps) == (4, 2, 50.0)
    obs, *_ = env.step(0)
    assert obs.dtype == np.float32 and obs.shape == (4,)


def test_cartpole_restore_replays_bit_for_bit_including_resets():
    steps = replays_exactly("CartPole-v1", other_seed=99)
    assert sum(t or u for _, _, t, u in steps) >= 3  # several episodes ended and reset


@pytest.mark.parametrize("env_id", ["Acrobot-v1", "MountainCar-v0"])
def test_classic_control_restores_its_own_state_bit_for_bit(env_id):
    env = make_env(env_id, 0)
    assert set(save_state(env)["core"]) == {"state"}  # no replay: the game's own state
    steps = replays_exactly(env_id, other_seed=99, points=4)
    assert len({obs.tobytes() for obs, *_ in steps}) > 30  # the game moved


@pytest.mark.parametrize("env_id", ["FrozenLake-v1", "Taxi-v4"])
def test_a_game_without_a_state_of_its_own_is_restored_by_replaying_its_actions(env_id):
    # slippery FrozenLake draws every move from its RNG (and falls in holes); Taxi's start
    env = make_env(env_id, 0)
    assert save_state(env)["core"] == {} and type(env).__name__ == "Replay"
    steps = replays_exactly(env_id, other_seed=9, points=4)
    assert env_id != "FrozenLake-v1" or sum(t or u for _, _, t, u in steps) >= 3
    check_restorable(env_id)  # no refusal
    obs = env.reset()[0]
    assert obs.sum() == 1.0 and set(obs.tolist()) == {0.0, 1.0}  # a Discrete state is one-hot


class CountedGame(gym.Env):
    """A game whose start depends on how many games were made before it, not on its seed."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)
    made = 0

    def __init__(self):
        CountedGame.made += 1
        self.x = float(CountedGame.made)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.array([self.x], np.float32), {}

    def step(self, action):
        self.x += action
        return np.array([self.x], np.float32), 0.0, False, False, {}


def test_a_game_whose_replay_differs_is_refused_before_training(tmp_path):
    gym.register("CountedGame-v0", entry_point=CountedGame, max_episode_steps=50)
    try:
        with pytest.raises(ConfigError, match=r"^env: CountedGame-v0 has no state to save"):
            check_restorable("CountedGame-v0")
        config = routes.NLHFConfig(env="CountedGame-v0", update="nash-md-pg", out=str(tmp_path))
        with pytest.raises(ConfigError, match="no state to save"):
            routes.build(config)
        routes.build(routes.RLHFConfig(env="CountedGame-v0", out=str(tmp_path)))  # no states
    finally:
        del gym.registry["CountedGame-v0"]


TINY = dict(steps=1, progress=False, tensorboard=False, budget=20, initial=10, chunk=5,
            fit_epochs=1, hidden=[8])  # fmt: skip


def test_both_routes_step_on_a_game_restored_by_replay(tmp_path):
    # FrozenLake's continuations are replays of its seed and actions (no other test's family)
    ppo = dict(n_envs=2, n_steps=32, mini_batches=2, segment=10)
    nash = dict(states=2, samples=2, opponents=1, length=10, update="nash-md-pg")
    rlhf = routes.RLHFConfig(env="FrozenLake-v1", out=str(tmp_path / "rlhf"), **ppo, **TINY)
    nlhf = routes.NLHFConfig(env="FrozenLake-v1", out=str(tmp_path / "nlhf"), **nash, **TINY)
    for config in (rlhf, nlhf):
        route, last = routes.train(config)
        assert route.trainer.steps_done == 1 and route.labelling.buffer.added > 0
        assert last["kl_per_step"] >= 0.0 and last["entropy"] > 0.0


def test_pong_sticky_actions_are_played_frame_by_frame():
    pytest.importorskip("ale_py", reason="ale-py is not installed (nlhf[control])")
    env = make_env("ALE/Pong-v5", 0, sticky=0.5)
    assert env.unwrapped._frameskip == 1  # four frames per agent step, each one sticky
    assert spec_of(env).fps == 15.0
    rewards = [r for _, r, *_ in play(env, 3000)]
    assert -1.0 in rewards  # points are still scored and counted


def test_vector_env_resets_a_finished_copy_in_the_same_step():
    envs = make_vector_env("CartPole-v1", 3, seed=5)
    envs.reset()
    for _ in range(200):
        obs, _, terminated, truncated, info = envs.step(np.zeros(3, dtype=np.int64))
        done = terminated | truncated
        if done.any():
            i = int(np.flatnonzero(done)[0])
            assert not np.array_equal(info["final_obs"][i], obs[i])
            assert abs(obs[i]).max() <= 0.05  # a fresh CartPole start
            return
    raise AssertionError("pushing left never ended an episode")


def test_pong_ram_features_and_sticky_restore_replay_bit_for_bit():
    pytest.importorskip("ale_py", reason="ale-py is not installed (nlhf[control])")
    env = make_env("ALE/Pong-v5", 0, sticky=0.25)
    spec = spec_of(env)
    assert (spec.obs_dim, spec.n_actions, spec.fps) == (6, 6, 15.0)
    steps = replays_exactly("ALE/Pong-v5", other_seed=7, sticky=0.25)
    features = np.stack([obs for obs, *_ in steps])
    assert np.abs(features).max() <= 1.01
    assert features[:, 4:].std(0).min() > 0  # the ball moves both ways


def test_pong_pixels_construct():
    pytest.importorskip("ale_py", reason="ale-py is not installed (nlhf[control])")
    env = make_env("ALE/Pong-v5", 0, features="pixels")
    spec = spec_of(env, "pixels")
    obs, *_ = env.step(0)
    assert spec.obs_dim == obs.shape[0] == 4 * 80 * 80
    assert 0.0 <= obs.min() and obs.max() <= 1.0


def test_minatar_grid_is_flattened():
    pytest.importorskip("minatar", reason="MinAtar is not installed (pip install minatar)")
    env = make_env("MinAtar/Breakout-v1", 0)
    assert spec_of(env).obs_dim == 10 * 10 * 4
    replays_exactly("MinAtar/Breakout-v1", other_seed=9)


@pytest.mark.parametrize(
    ("kwargs", "option"),
    [
        (dict(env_id="CartPole-v1", sticky=0.25), "sticky"),
        (dict(env_id="CartPole-v1", features="pixels"), "features"),
        (dict(env_id="CartPole-v1", features="rgb"), "features"),
        (dict(env_id="NoSuchGame-v0"), "env"),
        (dict(env_id="Pendulum-v1"), "env"),  # Box actions
        (dict(env_id="Blackjack-v1"), "env"),  # a tuple of numbers, no array
    ],
)
def test_options_that_do_not_fit_name_the_option(kwargs, option):
    with pytest.raises(ConfigError, match=f"^{option}: "):
        make_env(seed=0, **kwargs)

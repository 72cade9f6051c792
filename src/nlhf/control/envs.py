"""The games an acting policy plays, as feature vectors, and their states saved and restored.

    env = make_env("CartPole-v1", seed=0)                    # 4 features, 2 actions
    env = make_env("ALE/Pong-v5", seed=0, sticky=0.25)       # 6 RAM features, 6 actions
    envs = make_vector_env("ALE/Pong-v5", n_envs=8, seed=0)  # SyncVectorEnv, same-step reset
    saved = save_state(env); ...; restore_state(env, saved)  # replays bit for bit

1. ``make_env`` builds the gymnasium env with a feature wrapper (``features``: ``auto`` picks
   the 4 CartPole observations, 6 Pong RAM features, or a MinAtar grid flattened; ``pixels``
   gives 4 stacked 80×80 grey Atari frames, for a GPU) and seeds it with one reset;
2. :class:`EnvSpec` says what a policy needs (obs_dim, n_actions) and the clip rate (``fps``);
3. ``save_state`` copies everything a replay depends on: the emulator (ALE ``cloneState``)
   or the physics state, the env's numpy RNG, the time limit's step count and the wrappers'
   memory (features; sticky actions, played here frame by frame with their own RNG);
   ``restore_state`` puts it back into this env or any other env made with the same arguments.
"""

from __future__ import annotations

import copy
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from nlhf.config import ConfigError
from nlhf.control import require

Features = Literal["auto", "pixels"]

ATARI_FRAMESKIP = 4
ATARI_FPS = 15.0  # 60 emulator frames per second, frameskip 4
PONG_RAM = {"player_y": 51, "enemy_y": 50, "ball_x": 49, "ball_y": 54}  # AtariARI annotations
PIXEL_SIDE, PIXEL_STACK = 80, 4


@dataclass(frozen=True)
class EnvSpec:
    """What a policy and a clip need to know of a game."""

    env_id: str
    features: str
    obs_dim: int
    n_actions: int
    fps: float  # agent steps per second of game time, the rate to play clips at


def is_atari(env_id: str) -> bool:
    return env_id.startswith("ALE/")


def is_minatar(env_id: str) -> bool:
    return env_id.startswith("MinAtar/")


def segment_length(env_id: str, length: int = 0) -> int:
    """``length``, or when it is 0 the steps of a labelled segment on ``env_id``: 25 on Atari
    and MinAtar (Christiano et al.'s 1–2 s clips), else 50."""
    if length:
        return length
    return 25 if is_atari(env_id) or is_minatar(env_id) else 50


class PongFeatures:
    """Pong's RAM as 6 numbers in about [-1, 1]: both paddles, the ball and its motion."""

    def __init__(self) -> None:
        self.last: np.ndarray | None = None  # the ball's (x, y) one step ago

    def clear(self) -> None:
        self.last = None

    def __call__(self, ram: np.ndarray) -> np.ndarray:
        ram = ram.astype(np.float32)
        ball = np.array([ram[PONG_RAM["ball_x"]], ram[PONG_RAM["ball_y"]]], dtype=np.float32)
        moved = np.zeros(2, np.float32)  # no motion while the ball is off the table (x = 0)
        if self.last is not None and ball[0] > 0 and self.last[0] > 0:
            moved = np.clip((ball - self.last) / 16.0, -1.0, 1.0)
        self.last = ball
        places = [ram[PONG_RAM[k]] for k in ("player_y", "enemy_y", "ball_x", "ball_y")]
        return np.concatenate([np.asarray(places, np.float32) / 103.0 - 1.0, moved])

    def state(self) -> Any:
        return None if self.last is None else self.last.copy()

    def set_state(self, state: Any) -> None:
        self.last = None if state is None else state.copy()


class PixelFeatures:
    """The last 4 grey frames, cropped to the table, halved to 80×80, flattened in [0, 1]."""

    def __init__(self) -> None:
        self.frames: deque[np.ndarray] = deque(maxlen=PIXEL_STACK)

    def clear(self) -> None:
        self.frames.clear()

    def __call__(self, grey: np.ndarray) -> np.ndarray:
        frame = grey[34:194:2, ::2].astype(np.float32) / 255.0
        if not self.frames:
            self.frames.extend([frame] * PIXEL_STACK)
        self.frames.append(frame)
        return np.stack(self.frames).reshape(-1)

    def state(self) -> Any:
        return [f.copy() for f in self.frames]

    def set_state(self, state: Any) -> None:
        self.frames = deque((f.copy() for f in state), maxlen=PIXEL_STACK)


class Flat:
    """Any array observation flattened to float32 (CartPole's 4 numbers, a MinAtar grid)."""

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(obs, dtype=np.float32).reshape(-1)

    def clear(self) -> None:
        pass

    def state(self) -> Any:
        return None

    def set_state(self, state: Any) -> None:
        pass


def feature_wrapper(gym: Any, env: Any, features: Any, obs_dim: int) -> Any:
    """``env`` with observations mapped by ``features`` (reset clears its memory)."""

    class FeatureObservation(gym.ObservationWrapper):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.features = features
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)

        def reset(self, **kwargs: Any) -> Any:
            self.features.clear()
            return super().reset(**kwargs)

        def observation(self, observation: np.ndarray) -> np.ndarray:
            return self.features(observation)

        def own_state(self) -> Any:
            return self.features.state()

        def set_own_state(self, state: Any) -> None:
            self.features.set_state(state)

    return FeatureObservation(env)


def sticky_wrapper(gym: Any, env: Any, p: float, frames: int = ATARI_FRAMESKIP) -> Any:
    """ALE's sticky actions (Machado et al. 2018) over an env of single frames: ``frames``
    frames per agent step, each one repeating the previous frame's action with probability
    ``p``.  Done here rather than by ALE because ALE's ``cloneState`` leaves the previous
    action out, so a restored game would not replay; this wrapper's state holds it."""

    class StickyFrames(gym.Wrapper):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.rng, self.applied = np.random.default_rng(), 0

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            if seed is not None:
                self.rng = np.random.default_rng(seed)
            self.applied = 0  # NOOP, as ALE's reset
            return self.env.reset(seed=seed, options=options)

        def step(self, action: int) -> Any:
            total = 0.0
            for _ in range(frames):
                if self.rng.random() >= p:
                    self.applied = int(action)
                obs, reward, terminated, truncated, info = self.env.step(self.applied)
                total += float(reward)
                if terminated or truncated:
                    break
            return obs, total, terminated, truncated, info

        def own_state(self) -> Any:
            return {"rng": copy.deepcopy(self.rng.bit_generator.state), "applied": self.applied}

        def set_own_state(self, state: Any) -> None:
            self.rng.bit_generator.state = copy.deepcopy(state["rng"])
            self.applied = state["applied"]

    return StickyFrames(env)


def _base_env(gym: Any, env_id: str, sticky: float | None, render: bool, features: str) -> Any:
    kwargs: dict[str, Any] = {"disable_env_checker": True}
    if render:
        kwargs["render_mode"] = "rgb_array"
    if is_atari(env_id):
        gym.register_envs(require("ale_py"))
        kwargs["obs_type"] = "grayscale" if features == "pixels" else "ram"
        kwargs["repeat_action_probability"] = 0.0  # sticky actions: sticky_wrapper
        kwargs["frameskip"] = 1 if sticky else ATARI_FRAMESKIP
    elif is_minatar(env_id):
        require("minatar.gym").register_envs()
        if sticky is not None:
            kwargs["sticky_action_prob"] = sticky
    elif sticky:
        raise ConfigError(f"sticky: {env_id} has no sticky actions (only Atari and MinAtar)")
    if features == "pixels" and not is_atari(env_id):
        raise ConfigError(f"features: pixels is for Atari games, not {env_id}")
    try:
        return gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(f"env: cannot make {env_id!r} ({exc})") from None


def make_env(
    env_id: str,
    seed: int,
    sticky: float | None = None,
    render: bool = False,
    features: Features = "auto",
) -> Any:
    """The env with its feature wrapper, reset once with ``seed`` (its next ``reset()``
    continues that seed's random stream).  ``sticky``: the probability of repeating the last
    action (Atari: default 0, the fast route; ale-py's v5 default is 0.25; MinAtar: its own
    default); ``render``: ``render()`` returns RGB frames."""
    if features not in ("auto", "pixels"):
        raise ConfigError(f"features: {features!r} is not one of auto, pixels")
    if sticky is not None and not 0.0 <= sticky < 1.0:
        raise ConfigError(f"sticky: must be in [0, 1), got {sticky}")
    gym = require("gymnasium")
    env = _base_env(gym, env_id, sticky, render, features)
    if is_atari(env_id) and sticky:
        env = sticky_wrapper(gym, env, sticky)
    if features == "pixels":
        mapped, obs_dim = PixelFeatures(), PIXEL_STACK * PIXEL_SIDE * PIXEL_SIDE
    elif is_atari(env_id):
        if "Pong" not in env_id:
            raise ConfigError(
                f"features: auto (RAM features) is for Pong only; for {env_id} use pixels"
            )
        mapped, obs_dim = PongFeatures(), 6
    else:
        mapped, obs_dim = Flat(), int(np.prod(env.observation_space.shape))
    env = feature_wrapper(gym, env, mapped, obs_dim)
    env.reset(seed=seed)
    env.action_space.seed(seed)
    return env


def spec_of(env: Any, features: str = "auto") -> EnvSpec:
    """The :class:`EnvSpec` of an env from :func:`make_env` (or a vector env of them)."""
    single = getattr(env, "envs", [env])[0]
    env_id = single.spec.id if single.spec is not None else type(single.unwrapped).__name__
    fps = float(single.unwrapped.metadata.get("render_fps") or 30)
    if is_atari(env_id):
        fps = ATARI_FPS
    return EnvSpec(
        env_id=env_id,
        features=features,
        obs_dim=int(single.observation_space.shape[0]),
        n_actions=int(single.action_space.n),
        fps=fps,
    )


def make_vector_env(
    env_id: str,
    n_envs: int,
    seed: int,
    sticky: float | None = None,
    features: Features = "auto",
) -> Any:
    """``n_envs`` copies in a gymnasium ``SyncVectorEnv`` that resets a finished copy in the
    same step (the step's observation is the new episode's first; the last one is in
    ``info["final_obs"]``); copy ``i`` is seeded with ``seed + i``."""
    gym = require("gymnasium")
    if n_envs < 1:
        raise ConfigError(f"n_envs: must be ≥ 1, got {n_envs}")
    makers = [
        (lambda i=i: make_env(env_id, seed + i, sticky=sticky, features=features))
        for i in range(n_envs)
    ]
    same_step = gym.vector.AutoresetMode.SAME_STEP
    return gym.vector.SyncVectorEnv(makers, autoreset_mode=same_step, copy=True)


# --------------------------------------------------------------------------- saved states


def _layers(env: Any) -> list[Any]:
    """The wrappers from the outside in, then the unwrapped env."""
    layers = [env]
    while hasattr(layers[-1], "env"):
        layers.append(layers[-1].env)
    return layers


def _rng_state(env: Any) -> Any:
    rng = getattr(env, "_np_random", None)
    return None if rng is None else copy.deepcopy(rng.bit_generator.state)


def _core_state(core: Any) -> dict[str, Any]:
    if hasattr(core, "ale"):
        return {"ale": core.ale.cloneState(include_rng=True)}
    if hasattr(core, "game") and is_minatar(getattr(core.spec, "id", "") or ""):
        return {"game": copy.deepcopy(core.game)}
    if hasattr(core, "state") and hasattr(core, "steps_beyond_terminated"):  # classic control
        return {
            "state": copy.deepcopy(core.state),
            "steps_beyond_terminated": core.steps_beyond_terminated,
        }
    raise ConfigError(f"env: saving the state of {type(core).__name__} is not supported")


def save_state(env: Any) -> dict[str, Any]:
    """Everything the env's future depends on, as picklable values (a checkpoint keeps it)."""
    layers = _layers(env)
    core = layers[-1]
    wrappers = []
    for layer in layers[:-1]:
        wrappers.append(
            {
                "elapsed": getattr(layer, "_elapsed_steps", None),
                "has_reset": getattr(layer, "_has_reset", None),
                "own": layer.own_state() if hasattr(layer, "own_state") else None,
            }
        )
    return {"core": _core_state(core), "rng": _rng_state(core), "wrappers": wrappers}


def restore_state(env: Any, state: dict[str, Any]) -> None:
    """Put ``env`` (made with the same arguments as the saved one) in the saved state."""
    layers = _layers(env)
    core = layers[-1]
    if len(layers) - 1 != len(state["wrappers"]):
        raise ValueError("the saved state is of an env with other wrappers")
    for layer, saved in zip(layers[:-1], state["wrappers"], strict=True):
        if saved["elapsed"] is not None:
            layer._elapsed_steps = saved["elapsed"]
        if saved["has_reset"] is not None:
            layer._has_reset = saved["has_reset"]
        if hasattr(layer, "set_own_state"):
            layer.set_own_state(saved["own"])
    saved_core = state["core"]
    if "ale" in saved_core:
        core.ale.restoreState(saved_core["ale"])
    elif "game" in saved_core:
        core.game = copy.deepcopy(saved_core["game"])
    else:
        core.state = copy.deepcopy(saved_core["state"])
        core.steps_beyond_terminated = saved_core["steps_beyond_terminated"]
    if state["rng"] is not None:
        core.np_random.bit_generator.state = copy.deepcopy(state["rng"])

"""The games an acting policy plays, as feature vectors, and their states saved and restored.

    env = make_env("CartPole-v1", seed=0)                    # 4 features, 2 actions
    env = make_env("ALE/Pong-v5", seed=0, sticky=0.25)       # 6 RAM features, 6 actions
    envs = make_vector_env("ALE/Pong-v5", n_envs=8, seed=0)  # SyncVectorEnv, same-step reset
    saved = save_state(env); ...; restore_state(env, saved)  # replays bit for bit

1. ``make_env`` builds any gymnasium env with discrete actions with a feature wrapper
   (``features``: ``auto`` picks 6 Pong RAM features, a one-hot of a Discrete observation, or
   any array flattened; ``pixels`` gives 4 stacked 80×80 grey Atari frames, for a GPU) and
   seeds it with one reset;
2. :class:`EnvSpec` says what a policy needs (obs_dim, n_actions) and the clip rate (``fps``);
3. ``save_state`` copies everything a replay depends on: the game's own state where it has
   one (ALE ``cloneState``, MinAtar's game, classic control's ``state``), else the seed or RNG
   of the last reset and the actions since (:func:`replay_wrapper`), plus the env's numpy RNG,
   the time limit's step count and the wrappers' memory; ``restore_state`` puts it back into
   this env or any other env made with the same arguments.  :func:`check_restorable` stops
   before training when a replay of ``env_id`` is not exact (the NLHF route's continuations).
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


class OneHot(Flat):
    """A Discrete observation (FrozenLake's square, Taxi's state) as a one-hot vector."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __call__(self, obs: Any) -> np.ndarray:
        return np.eye(self.n, dtype=np.float32)[int(obs)]


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


def replay_wrapper(gym: Any, env: Any) -> Any:
    """``env`` whose state is the seed (or the RNG state) of its last reset and the actions
    since: restoring resets with them and plays the actions again, which is exact when the
    game's future depends on nothing but its RNG and the actions (:func:`check_restorable`)."""

    class Replay(gym.Wrapper):
        def __init__(self, inner: Any) -> None:
            super().__init__(inner)
            self.start: dict[str, Any] = {}
            self.actions: list[int] = []

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            rng = None if seed is not None else _rng_state(self.env.unwrapped)
            self.start = {"seed": seed, "rng": rng, "options": copy.deepcopy(options)}
            self.actions = []
            return self.env.reset(seed=seed, options=options)

        def step(self, action: Any) -> Any:
            self.actions.append(int(action))
            return self.env.step(action)

        def own_state(self) -> Any:
            return {**self.start, "actions": list(self.actions)}

        def set_own_state(self, state: Any) -> None:
            if state["rng"] is not None:
                self.env.unwrapped.np_random.bit_generator.state = copy.deepcopy(state["rng"])
            self.reset(seed=state["seed"], options=copy.deepcopy(state["options"]))
            for action in state["actions"]:
                self.step(action)

    return Replay(env)


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
        env = gym.make(env_id, **kwargs)
    except gym.error.Error as exc:
        raise ConfigError(f"env: cannot make {env_id!r} ({exc})") from None
    if not isinstance(env.action_space, gym.spaces.Discrete):
        raise ConfigError(f"env: {env_id}'s actions are {env.action_space}, not Discrete")
    if env.observation_space.shape is None:
        raise ConfigError(f"env: {env_id}'s observations are {env.observation_space}, no array")
    return env


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
    elif isinstance(env.observation_space, gym.spaces.Discrete):
        mapped, obs_dim = OneHot(int(env.observation_space.n)), int(env.observation_space.n)
    else:
        mapped, obs_dim = Flat(), int(np.prod(env.observation_space.shape))
    env = feature_wrapper(gym, env, mapped, obs_dim)
    if _own_state(env.unwrapped) is None:
        env = replay_wrapper(gym, env)
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


def _own_state(core: Any) -> dict[str, Any] | None:
    """The game's own state (None: it has none we know, so a replay restores it)."""
    if hasattr(core, "ale"):
        return {"ale": core.ale.cloneState(include_rng=True)}
    if hasattr(core, "game") and is_minatar(getattr(core.spec, "id", "") or ""):
        return {"game": copy.deepcopy(core.game)}
    if type(core).__module__.startswith("gymnasium.envs.classic_control"):
        # ``state`` (set by the first reset) and the RNG are all a classic-control step reads
        keep = ("state", "steps_beyond_terminated")
        return {k: copy.deepcopy(getattr(core, k)) for k in keep if hasattr(core, k)}
    return None


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
    return {"core": _own_state(core) or {}, "rng": _rng_state(core), "wrappers": wrappers}


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
    else:  # classic control's attributes, or nothing: the replay wrapper restored it
        for key, value in saved_core.items():
            setattr(core, key, copy.deepcopy(value))
    if state["rng"] is not None:
        core.np_random.bit_generator.state = copy.deepcopy(state["rng"])


def _play(env: Any, actions: np.ndarray) -> list[tuple[bytes, float, bool]]:
    out = []
    for action in actions.tolist():
        obs, reward, terminated, truncated, _ = env.step(action)
        out.append((np.asarray(obs).tobytes(), float(reward), bool(terminated or truncated)))
        if terminated or truncated:
            out.append((np.asarray(env.reset()[0]).tobytes(), 0.0, False))
    return out


def check_restorable(
    env_id: str, sticky: float | None = None, features: Features = "auto", steps: int = 300
) -> None:
    """Stop with a config error when ``env_id`` has no state of its own and a replay of its
    seed and actions does not play a saved state on exactly as the original went on (what a
    continuation from a saved state needs): ``steps`` random steps, a save, ``steps`` more,
    then the same steps from the saved state in another copy."""
    env = make_env(env_id, 0, sticky=sticky, features=features)
    if _own_state(env.unwrapped) is not None:
        env.close()
        return
    other = make_env(env_id, 1, sticky=sticky, features=features)
    rng = np.random.default_rng(0)
    _play(env, rng.integers(env.action_space.n, size=steps))
    saved = save_state(env)
    actions = rng.integers(env.action_space.n, size=steps)
    first = _play(env, actions)
    restore_state(other, saved)
    again = _play(other, actions)
    env.close()
    other.close()
    if first != again:
        raise ConfigError(
            f"env: {env_id} has no state to save and a replay of its seed and actions does "
            "not repeat its game, so no state can be continued twice (the NLHF route and the "
            "head-to-head need that; the RLHF route does not)"
        )

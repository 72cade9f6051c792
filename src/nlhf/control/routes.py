"""The two preference routes end to end: labels on a schedule, a judge refitted on them, a policy.

    algorithm, last = train(RLHFConfig(env="CartPole-v1", labeler="oracle"))   # r̂ + PPO
    algorithm, last = train(NLHFConfig(env="CartPole-v1", labeler="noisy"))    # P̂ + Nash-MD-PG

Both routes run on the one training core; each core step is the trainer's own update followed
by :meth:`Labelling.update`:

1. segments: windows of ``segment`` steps of the step's rollout (PPO: every ``stride`` steps of
   each copy; Nash-MD-PG: each continuation from its branch point); an episode that ends inside
   a window (terminated, not truncated) is continued in its end state with action 0 and
   reward 0, so the oracle compares how long each segment survives and what it earned;
2. labels: when ``labels_due`` (``initial`` from the initial policy, then more as the agent
   steps pass, ``budget`` in all) exceeds those asked for by ``chunk``, pairs of segments go to
   the labeler and the answers into the :class:`~nlhf.control.labels.LabelBuffer`;
3. refit: the route's judge is fitted again (warm start) on the whole buffer: RLHF's
   Bradley–Terry reward model, normalized to std ``reward_std`` on the rollout and shifted so
   that an end state scores 0; NLHF's antisymmetric preference model, used as ``prefer``.

The buffer, the judge's weights, the labelling generator and the counters are checkpointed with
the trainer's state, so a resumed run labels and trains exactly as an uninterrupted one.
"""

from __future__ import annotations

import copy
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from nlhf.config import ConfigError, option
from nlhf.control import nash, ppo
from nlhf.control.envs import is_atari, is_minatar
from nlhf.control.labelers import CANT_TELL, FIRST, SECOND, TIE, Pairs, make_labeler
from nlhf.control.labels import C_SMALL, LabelBuffer, labels_due
from nlhf.control.preference_model import SegmentPreferenceModel
from nlhf.control.reward_model import FitConfig, SegmentRewardModel, fit
from nlhf.control.rollout import Rollout, Runner, build_trainer, finite, policy_actor
from nlhf.control.segments import Segment, sample_pairs

LabelerName = Literal[
    "oracle", "noisy", "mistake", "skip", "myopic", "equal", "population", "human"
]
"""The synthetic labelers of :mod:`nlhf.control.labelers`, or people through a labeling app."""


@dataclass
class LabelFields:
    """Who labels, how many labels and when, and how the judge is fitted to them."""

    labeler: LabelerName = option(
        "oracle",
        "oracle (higher true segment return, an end penalized by the lost steps), a B-Pref "
        "teacher (noisy, mistake, skip, myopic, equal), population (CartPole annotator groups "
        "whose majority can cycle) or human (GIF clips through a labeling database)",
    )
    labeler_options: list[str] = option(
        [],
        "key=value options of the labeler: a teacher's beta, gamma, mistake, skip, equal, "
        "scale; population's population, temperature",
    )
    budget: int = option(1000, "labels in all over the run (Christiano et al.: 700–5,500)")
    initial: int = option(200, "labels from the initial policy, before the first update")
    initial_play: int = option(
        0,
        "agent steps of the initial policy's play the initial labels are drawn from (0: one "
        "rollout; on Pong one rollout is the opening serve of every copy, mostly ties)",
    )
    label_c: float = option(
        C_SMALL, "c of the labelling rate ∝ c/(T + c) at agent step T (Christiano et al.)"
    )
    chunk: int = option(50, "ask for labels once this many are due (fewer refits)")
    capacity: int = option(3000, "labelled pairs kept, oldest dropped (Christiano et al.: 3,000)")
    segment: int = option(
        0,
        "RLHF: steps per labelled segment (0: 25 for Atari and MinAtar, else 50; NLHF labels "
        "its continuations of Nash's length)",
    )
    stride: int = option(5, "the RLHF route starts a segment every this many rollout steps")
    members: int = option(1, "ensemble members of the reward or preference model")
    judge_hidden: int = option(64, "width of the judge's two hidden layers")
    judge_actions: Literal["auto", "yes", "no"] = option(
        "auto",
        "whether the judge sees each step's action beside its observation (auto: no on Atari "
        "and MinAtar, as Christiano et al.'s Atari reward network; yes elsewhere, as their "
        "MuJoCo one)",
    )
    fit_epochs: int = option(20, "epochs of each refit, warm-started from the last fit")
    fit_lr: float = option(1e-3, "AdamW learning rate of the judge's fit")
    reward_std: float = option(
        1.0, "RLHF: std of the normalized r̂ over the rollout's steps (Christiano et al.: 1)"
    )
    db: str = option("", "labeler=human: the labeling database (`nlhf label serve --db`)")
    instruction: str = option(
        "Which clip shows better play?", "labeler=human: the question shown above the clips"
    )
    human_timeout: float = option(
        3600.0, "labeler=human: seconds to wait for each batch of labels (late ones are dropped)"
    )
    human_poll: float = option(5.0, "labeler=human: seconds between polls of the database")

    def __post_init__(self) -> None:
        super().__post_init__()  # the trainer's Config after this mixin in the MRO
        for name in ("budget", "initial", "initial_play"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be ≥ 0, got {getattr(self, name)}")
        for name in ("chunk", "capacity", "stride", "members", "judge_hidden", "fit_epochs"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be ≥ 1, got {getattr(self, name)}")
        if self.segment < 0 or not (self.label_c > 0 and self.fit_lr > 0 and self.reward_std > 0):
            raise ConfigError("segment must be ≥ 0; label_c, fit_lr and reward_std > 0")
        if self.labeler == "human" and not self.db:
            raise ConfigError("labeler=human needs db (the labeling database to send clips to)")
        make_synthetic_labeler(self)  # an unknown option is an error before any training

    def label_length(self) -> int:
        """Steps per labelled segment of the RLHF route (NLHF labels its continuations)."""
        if self.segment:
            return self.segment
        return 25 if is_atari(self.env) or is_minatar(self.env) else 50

    def judge_action_count(self, n_actions: int) -> int:
        """The judge's action inputs: ``n_actions`` (one-hot) or 0 (observations only)."""
        if self.judge_actions == "auto":
            return 0 if is_atari(self.env) or is_minatar(self.env) else n_actions
        return n_actions if self.judge_actions == "yes" else 0


def parse_options(items: list[str]) -> dict[str, Any]:
    """``["mistake=0.2", "population=cartpole"]`` → {"mistake": 0.2, "population": "cartpole"}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"labeler_options: {item!r} is not key=value")
        try:
            out[key] = None if raw == "None" else float(raw)
        except ValueError:
            out[key] = raw
    return out


def make_synthetic_labeler(fields: LabelFields) -> Any:
    """The labeler of ``fields`` unless it is human (then None)."""
    if fields.labeler == "human":
        return None
    return make_labeler(fields.labeler, **parse_options(fields.labeler_options))


# --------------------------------------------------------------------------- segments


def episode_truncated(rollout: Rollout, max_steps: int | None) -> dict[tuple[int, int], bool]:
    """(t, n) of each done step → whether that episode was cut by the time limit."""
    lengths = {(e.env, e.id): e.length for e in rollout.finished}
    out = {}
    for t, n in torch.nonzero(rollout.dones).tolist():
        length = lengths[(n, int(rollout.episodes[t, n]))]
        out[(t, n)] = max_steps is not None and length >= max_steps
    return out


def windows(
    rollout: Rollout, length: int, stride: int, max_steps: int | None
) -> tuple[list[Segment], list[bool]]:
    """Segments of ``length`` steps starting every ``stride`` steps of each copy, and whether
    each ends its episode.  A segment in which its episode terminates goes on
    in the end state (action 0, reward 0); one cut by a time limit or by the rollout's end is
    left out."""
    steps = rollout.actions.shape[0]
    truncated = episode_truncated(rollout, max_steps)
    out, ended = [], []
    for n in range(rollout.actions.shape[1]):
        done = rollout.dones[:, n].numpy()
        for t0 in range(0, steps, stride):
            stop = min(t0 + length, steps)
            ends = np.flatnonzero(done[t0:stop])
            if len(ends) == 0 and stop < t0 + length:
                continue  # the rollout ends first: its future is unknown
            obs = rollout.obs[t0:stop, n].numpy().copy()
            actions = rollout.actions[t0:stop, n].numpy().copy()
            rewards = rollout.rewards[t0:stop, n].numpy().copy()
            if len(ends):
                t = t0 + int(ends[0])
                if truncated[(t, n)]:
                    continue
                keep = t - t0 + 1
                pad = length - keep
                final = rollout.final_obs[(t, n)].numpy()
                obs = np.concatenate([obs[:keep], np.repeat(final[None], pad, 0)])
                actions = np.concatenate([actions[:keep], np.zeros(pad, np.int64)])
                rewards = np.concatenate([rewards[:keep], np.zeros(pad, np.float32)])
            episode = int(rollout.episodes[t0, n])
            out.append(Segment(obs, actions, rewards, episode=episode, start=t0))
            ended.append(bool(len(ends)))
    return out, ended


# --------------------------------------------------------------------------- people


class HumanLabeler:
    """People answer pairs as GIF clips in a labeling database (``nlhf label serve``)."""

    def __init__(self, fields: LabelFields, env_id: str, run_id: str) -> None:
        from nlhf.label.store import LabelStore

        self.store = LabelStore(fields.db)
        self.fields, self.env_id, self.run_id = fields, env_id, run_id
        self.renderer = SegmentRenderer(env_id)

    def label(self, pairs: Pairs, rng: np.random.Generator) -> np.ndarray:
        """Requests one clip task per pair and waits; an unanswered or unclear pair is NaN."""
        from nlhf.label import clips

        gifs = [(self.renderer.gif(a), self.renderer.gif(b)) for a, b in pairs]
        asked = [i for i, (a, b) in enumerate(gifs) if a != b]  # equal clips: nothing to tell
        ids = clips.request(
            self.store, [gifs[i] for i in asked], self.fields.instruction, self.run_id
        )
        answers = clips.wait(  # a pair asked twice is one task
            self.store,
            list(dict.fromkeys(ids)),
            timeout=self.fields.human_timeout,
            poll_seconds=self.fields.human_poll,
        )
        value = {"a": FIRST, "b": SECOND, "tie": TIE}
        labels = np.full(len(pairs), CANT_TELL)
        for i, task in zip(asked, ids, strict=True):
            labels[i] = value.get(answers.get(task, "unclear"), CANT_TELL)
        return labels

    def prob(self, pairs: Pairs) -> np.ndarray:
        raise ConfigError("labeler=human has no preference function to evaluate with")


class SegmentRenderer:
    """RGB frames of a segment drawn from its observations: CartPole only, whose observation is
    its physics state [x, ẋ, θ, θ̇] (drawn here with numpy, so pygame is not needed)."""

    def __init__(self, env_id: str) -> None:
        if not env_id.startswith("CartPole"):
            raise ConfigError(
                f"labeler=human: clips of {env_id} cannot be drawn from its features "
                "(only CartPole, whose observation is its state)"
            )
        self.fps = 50.0  # CartPole's render_fps

    def frames(self, segment: Segment) -> list[np.ndarray]:
        return [cartpole_frame(obs) for obs in np.asarray(segment.obs, np.float64)]

    def gif(self, segment: Segment) -> bytes:
        from nlhf.label.clips import gif_bytes

        return gif_bytes(segment.frames or self.frames(segment), fps=self.fps)


def cartpole_frame(state: np.ndarray, width: int = 240, height: int = 160) -> np.ndarray:
    """[height, width, 3] uint8: the cart (black) at x on a track of ±2.4 and the pole (brown)
    at angle θ, as gymnasium's own renderer lays them out."""
    frame = np.full((height, width, 3), 255, np.uint8)
    scale = width / 4.8
    track = int(height * 0.75)
    frame[track, :] = 0
    cx = int(width / 2 + float(state[0]) * scale)
    frame[track - 8 : track + 2, max(cx - 15, 0) : max(min(cx + 15, width), 0)] = 0
    pole = scale * 1.0  # the pole's drawn length: 2 × its half-length 0.5
    for f in np.linspace(0.0, 1.0, 80):
        px = int(cx + f * pole * math.sin(float(state[2])))
        py = int(track - 8 - f * pole * math.cos(float(state[2])))
        if 0 <= py < height - 2 and 0 <= px < width - 2:
            frame[py : py + 3, px : px + 3] = (202, 152, 101)
    return frame


# --------------------------------------------------------------------------- the labelling loop


class Labelling:
    """The labels of one run and the judge fitted to them (steps 1–3 of the module doc)."""

    def __init__(self, fields: Any, judge: torch.nn.Module, horizon: float, max_steps: int | None):
        self.fields, self.judge, self.horizon, self.max_steps = fields, judge, horizon, max_steps
        self.labeler = make_synthetic_labeler(fields)
        if self.labeler is None:
            self.labeler = HumanLabeler(fields, fields.env, run_id=str(Path(fields.out)))
        self.buffer = LabelBuffer(fields.capacity)
        self.rng = np.random.default_rng(fields.seed + 7919)
        self.asked = 0  # labels asked for so far (answered or not)
        self.fits = 0
        self.ends: deque[np.ndarray] = deque(maxlen=1000)  # end states seen, for the r̂ anchor
        self.started = False
        self.last: dict[str, float] = {}

    def due(self, agent_steps: float) -> int:
        f = self.fields
        return labels_due(agent_steps, f.budget, f.initial, f.label_c, self.horizon)

    def offer(
        self,
        rollouts: list[Rollout],
        agent_steps: float,
        length: int | None = None,
        stride: int | None = None,
    ) -> bool:
        """:meth:`update` with the windows of ``length`` steps every ``stride`` steps of each
        copy of each rollout (None: the whole rollout is one window) and their end states."""
        segments, ends = [], []
        for rollout in rollouts:
            steps = rollout.actions.shape[0]
            cut = windows(rollout, length or steps, stride or steps, self.max_steps)
            segments += cut[0]
            ends += _ends(rollout, self.max_steps)
        return self.update(segments, ends, agent_steps)

    def update(self, segments: list[Segment], ends: list[np.ndarray], agent_steps: float) -> bool:
        """Label and refit when enough labels are due; True when the judge changed."""
        self.started = True
        self.ends.extend(ends)
        due = self.due(agent_steps)
        wanted = due - self.asked
        if wanted <= 0 or (wanted < self.fields.chunk and due < self.fields.budget):
            return False
        if len(segments) < 2:
            return False
        t0 = time.perf_counter()
        pairs = sample_pairs(segments, wanted, self.rng)
        labels = self.labeler.label(pairs, self.rng)
        self.asked += wanted
        added = self.buffer.add(pairs, labels)
        t1 = time.perf_counter()
        if not len(self.buffer):
            return False
        f = self.fields
        a, b, y = self.buffer.batches()
        config = FitConfig(epochs=f.fit_epochs, lr=f.fit_lr, seed=f.seed + self.fits)
        result = fit(self.judge, a, b, y, config)
        self.fits += 1
        self.last = {
            "label_seconds": t1 - t0,
            "fit_seconds": time.perf_counter() - t1,
            "judge_train_accuracy": result.train_accuracy,
            "judge_val_accuracy": result.val_accuracy,
            "labels_added": float(added),
            "ties": float(np.mean(labels[~np.isnan(labels)] == TIE)) if added else 0.0,
        }
        return True

    def metrics(self) -> dict[str, float]:
        """``labels`` (kept so far, "can't tell" dropped), ``labels_asked``, ``fits`` and the
        last fit's accuracies (NaN ones left out)."""
        out = {"labels": float(self.buffer.added), "labels_asked": float(self.asked)}
        out["fits"] = float(self.fits)
        out.update({k: v for k, v in self.last.items() if math.isfinite(v)})
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "buffer": self.buffer.state_dict(),
            "judge": {k: v.clone() for k, v in self.judge.state_dict().items()},
            "rng": self.rng.bit_generator.state,
            "asked": self.asked,
            "fits": self.fits,
            "ends": list(self.ends),
            "started": self.started,
            "last": dict(self.last),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.judge.load_state_dict(state["judge"])
        self.rng.bit_generator.state = state["rng"]
        self.asked, self.fits = int(state["asked"]), int(state["fits"])
        self.ends.clear()
        self.ends.extend(state["ends"])
        self.started, self.last = bool(state["started"]), dict(state["last"])


def initial_rollouts(collect: Callable[[], Rollout], play: int) -> list[Rollout]:
    """Rollouts of the initial policy from ``collect()`` until they hold ``play`` agent steps
    (at least one rollout)."""
    out = [collect()]
    while sum(r.actions.numel() for r in out) < play:
        out.append(collect())
    return out


def _max_steps(runner: Runner) -> int | None:
    spec = runner.envs.envs[0].spec
    return None if spec is None else spec.max_episode_steps


def _ends(rollout: Rollout, max_steps: int | None) -> list[np.ndarray]:
    """The observations that terminated (not truncated) episodes ended in."""
    truncated = episode_truncated(rollout, max_steps)
    return [rollout.final_obs[k].numpy() for k, cut in truncated.items() if not cut]


# --------------------------------------------------------------------------- RLHF: r̂ + PPO


@dataclass
class RLHFConfig(LabelFields, ppo.Config):
    """RLHF on an acting policy: a Bradley–Terry reward model from segment labels, PPO on r̂."""

    out: str = option("runs/control-rlhf", "output folder: metrics.jsonl, checkpoints/, policy/")
    reward_norm: Literal["standard", "scale", "none"] = option(
        "none",
        "PPO's running normalization of r̂ on top of the route's own (none: r̂ as the route "
        "normalized it, an end state at 0, so that staying alive is worth what r̂ says)",
    )


class RLHF(ppo.PPO):
    """PPO on the normalized r̂ of a reward model refitted whenever labels arrive."""

    config: RLHFConfig

    def __init__(self, trainer: Any, config: RLHFConfig) -> None:
        super().__init__(trainer, config, reward_fn=self.learned_reward)
        spec = self.runner.spec
        torch.manual_seed(config.seed + 1)
        actions = config.judge_action_count(spec.n_actions)
        model = SegmentRewardModel(spec.obs_dim, actions, config.judge_hidden, config.members)
        horizon = config.steps * config.n_envs * config.n_steps
        self.max_steps = _max_steps(self.runner)
        self.labelling = Labelling(config, model, horizon, self.max_steps)
        self.reward = copy.deepcopy(model)  # replaced by the normalized fit before step 1
        self.rollout: Rollout | None = None

    def learned_reward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.reward.step_rewards(obs, actions)

    def rewards(self, rollout: Rollout) -> tuple[torch.Tensor, dict[str, float]]:
        self.rollout = rollout
        return super().rewards(rollout)

    def label(self, rollouts: list[Rollout], agent_steps: float) -> None:
        length, stride = self.config.label_length(), self.config.stride
        if self.labelling.offer(rollouts, agent_steps, length, stride):
            self.reward = self.normalized(rollouts[-1])

    @torch.no_grad()
    def normalized(self, rollout: Rollout) -> SegmentRewardModel:
        """The reward model with std ``reward_std`` over the rollout's steps and the mean r̂ of
        the end states seen (action 0, as a segment goes on after its end) at 0; without any
        end state the mean over the rollout is 0."""
        obs = rollout.obs.reshape(-1, rollout.obs.shape[-1])
        actions = rollout.actions.reshape(-1)
        out = self.labelling.judge.normalized(obs, actions, self.config.reward_std)
        if self.labelling.ends:
            ends = torch.as_tensor(np.stack(list(self.labelling.ends)), dtype=torch.float32)
            zero = torch.zeros(len(ends), dtype=torch.long)
            for m in range(len(out.members)):
                out.shift[m] = out.member_step_rewards(m, ends, zero).mean()
        return out

    def before_training(self) -> None:
        if not self.labelling.started:  # a fresh run: the initial labels and the first fit
            actor, cfg = policy_actor(self.policy), self.config

            def collect() -> Rollout:
                return self.runner.collect(actor, cfg.n_steps, self.policy.device)

            self.label(initial_rollouts(collect, cfg.initial_play), 0.0)

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        metrics = super().update(chunks, step)
        self.label([self.rollout], metrics["agent_steps"])
        return finite({**metrics, **self.labelling.metrics()})

    def state_dict(self) -> dict[str, Any]:
        return {
            **super().state_dict(),
            "labelling": self.labelling.state_dict(),
            "reward": {k: v.clone() for k, v in self.reward.state_dict().items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.labelling.load_state_dict(state["labelling"])
        self.reward.load_state_dict(state["reward"])


# --------------------------------------------------------------------------- NLHF: P̂ + Nash-MD-PG


@dataclass
class NLHFConfig(LabelFields, nash.Config):
    """NLHF on an acting policy: an antisymmetric preference model from segment labels judges
    Nash-MD-PG's paired continuations."""

    out: str = option("runs/control-nlhf", "output folder: metrics.jsonl, checkpoints/, policy/")


class NLHF(nash.NashMDPG):
    """Nash-MD-PG whose ``prefer`` is a preference model refitted whenever labels arrive."""

    config: NLHFConfig

    def __init__(self, trainer: Any, config: NLHFConfig) -> None:
        super().__init__(trainer, config, prefer=self.judged)
        spec = self.runner.spec
        torch.manual_seed(config.seed + 1)
        actions = config.judge_action_count(spec.n_actions)
        model = SegmentPreferenceModel(spec.obs_dim, actions, config.judge_hidden, config.members)
        horizon = config.steps * config.states * self.group * config.segment_length()
        self.max_steps = _max_steps(self.runner)
        self.labelling = Labelling(config, model, horizon, self.max_steps)
        self.rollout: Rollout | None = None

    def judged(self, a: nash.Continuations, b: nash.Continuations) -> torch.Tensor:
        return self.labelling.judge.prob(a, b)

    def judge(self, rollout: Rollout) -> tuple[nash.Segments, dict[str, float]]:
        self.rollout = rollout
        return super().judge(rollout)

    def label(self, rollouts: list[Rollout], agent_steps: float) -> None:
        self.labelling.offer(rollouts, agent_steps)  # each continuation is one segment

    def before_training(self) -> None:
        if not self.labelling.started:  # the drivers play on between the branches

            def collect() -> Rollout:
                self.branch()
                return self.runner.collect(
                    self.act, self.config.segment_length(), self.policy.device
                )

            self.label(initial_rollouts(collect, self.config.initial_play), 0.0)

    def update(self, chunks: list[Any], step: int) -> dict[str, float]:
        metrics = super().update(chunks, step)
        self.label([self.rollout], metrics["agent_steps"])
        return finite({**metrics, **self.labelling.metrics()})

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "labelling": self.labelling.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.labelling.load_state_dict(state["labelling"])


# --------------------------------------------------------------------------- by name


def build(config: RLHFConfig | NLHFConfig, policy: Any = None) -> tuple[Any, Any]:
    """(trainer, algorithm) of the route ``config`` belongs to."""
    algorithm_class, critic = (RLHF, True) if isinstance(config, RLHFConfig) else (NLHF, False)
    trainer = build_trainer(config, policy, critic=critic)
    return trainer, algorithm_class(trainer, config)


def train(config: RLHFConfig | NLHFConfig, policy: Any = None) -> tuple[Any, dict[str, float]]:
    """Train the route to ``config.steps`` (resuming from ``<out>/checkpoints``); the policy is
    saved to ``<out>/policy``.  Returns the algorithm and the last step's metrics."""
    trainer, algorithm = build(config, policy)
    name = "control-rlhf" if isinstance(config, RLHFConfig) else "control-nlhf"
    last = trainer.run(algorithm, name)
    algorithm.runner.close()
    return algorithm, last

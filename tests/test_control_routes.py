"""The preference routes (nlhf.control.routes) and their labelling (nlhf.control.labelling):
segments continue in the end state and skip a time limit; each route lifts CartPole above its
initial policy from oracle labels in seconds; people answer through the labeling database; a
SIGKILLed run resumes bit for bit."""

import threading

import numpy as np
import pytest
import torch

pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")

import control_train
from nlhf.config import ConfigError, build_config
from nlhf.control import routes
from nlhf.control.labelling import windows
from nlhf.control.rollout import ControlRollout, Episode
from online_harness import assert_identical, metrics, saved_tensors

FAST = dict(progress=False, tensorboard=False, checkpoint_every=1000)


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_windows_continue_an_ended_episode_and_skip_a_time_limit():
    # copy 0 terminates at t=1 (episode 0, length 2); copy 1 is cut by a limit of 3 at t=2
    dones = torch.tensor([[False, False], [True, False], [False, True], [False, False]])
    episodes = torch.tensor([[0, 1], [0, 1], [2, 1], [2, 3]])
    obs = torch.arange(16, dtype=torch.float32).reshape(4, 2, 2)
    rollout = ControlRollout(
        obs=obs, actions=torch.ones(4, 2, dtype=torch.long), logprobs=torch.zeros(4, 2),
        values=torch.zeros(4, 2), rewards=torch.ones(4, 2), dones=dones, episodes=episodes,
        next_obs=torch.zeros(2, 2), finished=[Episode(0, 0, 2.0, 2), Episode(1, 1, 3.0, 3)],
        final_obs={(1, 0): torch.tensor([-1.0, -2.0]), (2, 1): torch.tensor([-3.0, -4.0])},
    )  # fmt: skip
    segments, ended = windows(rollout, 3, 1, max_steps=3)
    # copy 0: start 0 ends at t=1 → padded; start 1 too; starts 2, 3 run past the rollout
    # copy 1: starts 0–2 meet the time limit, start 3 runs past the end
    assert [(s.episode, s.start) for s in segments] == [(0, 0), (0, 1)] and ended == [True, True]
    first = segments[0]
    np.testing.assert_array_equal(first.rewards, [1, 1, 0])
    np.testing.assert_array_equal(first.actions, [1, 1, 0])
    np.testing.assert_array_equal(first.obs, [[0, 1], [4, 5], [-1, -2]])
    assert segments[1].true_return == 1.0  # one living step, then the end state


def test_config_checks_labeling_fields_before_training():
    with pytest.raises(ValueError, match="chunk"):
        routes.RLHFConfig(chunk=0)
    with pytest.raises(ConfigError, match="needs db"):
        routes.NLHFConfig(labeler="human")
    with pytest.raises(Exception, match="unknown option 'nope'"):
        routes.RLHFConfig(labeler="noisy", labeler_options=["nope=1"])


@pytest.mark.parametrize("route", [routes.RLHFConfig, routes.NLHFConfig], ids=["rlhf", "nlhf"])
def test_the_initial_labels_come_from_initial_play_steps_of_the_initial_policy(tmp_path, route):
    cfg = route(out=str(tmp_path), steps=1, budget=60, initial=60, initial_play=3000, **FAST)
    _, built = routes.build(cfg)
    runner = built.algorithm.runner
    collect, calls = runner.collect, []

    def counted(*args, **kwargs):
        rollout = collect(*args, **kwargs)
        calls.append(rollout.actions.numel())
        return rollout

    runner.collect = counted
    built.before_training()
    assert sum(calls[:-1]) < 3000 <= sum(calls)  # rollouts until 3,000 agent steps, no more
    assert len(calls) >= 2 and built.labelling.buffer.added == 60
    runner.close()


@pytest.mark.parametrize("route", [routes.RLHFConfig, routes.NLHFConfig], ids=["rlhf", "nlhf"])
def test_the_route_builds_its_judge_with_or_without_the_actions(tmp_path, route):
    seen = {}
    for choice in ("auto", "no"):
        cfg = route(judge_actions=choice, out=str(tmp_path / choice), steps=1, **FAST)
        _, built = routes.build(cfg)
        seen[choice] = built.labelling.judge.n_actions
        built.algorithm.runner.close()
    assert seen == {"auto": 2, "no": 0}  # CartPole's two actions, one-hot, or none


def test_on_atari_and_minatar_the_judge_sees_observations_only_unless_asked():
    """On Atari a judge that sees actions gives PPO a per-action bias to lock onto (FIRE half
    of the time after 250k agent steps of Pong), so there it sees observations only."""
    for env in ("ALE/Pong-v5", "MinAtar/Breakout-v1"):
        assert routes.RLHFConfig(env=env).judge_action_count(6) == 0
        assert routes.NLHFConfig(env=env, judge_actions="yes").judge_action_count(6) == 6
    assert routes.RLHFConfig(env="CartPole-v1").judge_action_count(2) == 2
    with pytest.raises(ConfigError, match="judge_actions"):
        build_config(routes.RLHFConfig, {"judge_actions": "maybe"})


def test_a_judge_without_actions_scores_every_action_alike():
    from nlhf.control.reward_model import SegmentRewardModel

    torch.manual_seed(0)
    model = SegmentRewardModel(obs_dim=6, n_actions=0)
    obs = torch.randn(5, 6)
    rewards = [model.step_rewards(obs, torch.full((5,), a)) for a in range(6)]
    assert all(torch.equal(rewards[0], r) for r in rewards[1:])
    assert rewards[0].std() > 0  # it still reads the observations


SPO = dict(update="spo", lr=2.5e-4, schedule="linear", beta=0.0)


@pytest.mark.parametrize(
    ("config", "steps", "update"),
    [(routes.RLHFConfig, 24, {}), (routes.NLHFConfig, 15, {}), (routes.NLHFConfig, 30, SPO)],
    ids=["rlhf", "nlhf", "nlhf-spo"],
)
def test_each_route_lifts_cartpole_above_the_initial_policy(tmp_path, config, steps, update):
    cfg = config(out=str(tmp_path), steps=steps, budget=300, initial=100, **FAST, **update)
    algorithm, last = routes.train(cfg)
    rows = metrics(tmp_path)
    assert rows[0]["episode_return"] < 30  # the near-uniform initial policy: about 20
    returns = [r["episode_return"] for r in rows]
    assert sum(returns[-4:]) / 4 > 45, returns  # the last steps' mean: one step's return swings
    assert last["labels"] == algorithm.labelling.buffer.added >= 100
    assert last["judge_train_accuracy"] > 0.7


@pytest.mark.parametrize(
    ("route", "overrides"),
    [
        ("rlhf", ()),
        ("nlhf", ()),
        ("nlhf", ("update=spo", "beta=0.125", "n_steps=48", "segment=10")),
    ],
    ids=["rlhf", "nlhf", "nlhf-spo"],
)
def test_sigkill_and_resume_matches_an_uninterrupted_run(tmp_path, route, overrides):
    """The SPO case has opponent copies: segments carry over rollouts (48 steps, 10 per
    segment) and the mixture plays beside π."""
    full, resumed = control_train.kill_and_resume(route, tmp_path, *overrides)
    weights = [saved_tensors(f / "policy" / "model.safetensors") for f in (full, resumed)]
    assert_identical(*weights)

    def curve(folder):
        return [(r["step"], r["loss"], r["labels"], r["fits"]) for r in metrics(folder)]

    assert curve(full) == curve(resumed) and curve(full)[-1][2] > 10  # labels came later too


def test_human_labels_arrive_through_the_labeling_database(tmp_path):
    from nlhf.label.store import LabelStore

    db = str(tmp_path / "labels.sqlite")
    cfg = routes.NLHFConfig(
        out=str(tmp_path / "run"), steps=1, update="nash-md-pg", states=1, samples=2,
        opponents=1, length=8, beta=0.125,
        budget=4, initial=3, chunk=1, fit_epochs=1, labeler="human", db=db, human_poll=0.05,
        human_timeout=60, **FAST,
    )  # fmt: skip
    stop, answered = threading.Event(), []

    def person():  # answers every task it gets: the first clip is better
        store = LabelStore(db)
        me = store.labeler_for_name("ann")
        while not stop.is_set():
            job = store.next_assignment(me.id, k=1)
            if job is None:
                stop.wait(0.02)
                continue
            store.submit(me.id, job.id, "right" if job.swapped else "left", k=1)
            answered.append(job.id)
        store.close()

    LabelStore(db).close()  # the schema exists before the person looks
    worker = threading.Thread(target=person)
    worker.start()
    try:
        algorithm, last = routes.train(cfg)
    finally:
        stop.set()
        worker.join()
    labels = algorithm.labelling.buffer.arrays["labels"]
    assert len(labels) == last["labels"] == 4 and 1 <= len(answered) <= 4  # a pair may repeat
    assert (labels == 1.0).all()


@pytest.mark.slow
def test_both_routes_solve_cartpole_within_their_step_budgets(tmp_path):
    """The issue's target, a mean return ≥ 475 (of the last 20 training episodes) from oracle
    labels, counted in core steps rather than minutes, so that the machine's load cannot
    decide it: within 600 steps for RLHF (seeds 0–3 get there in 190–350) and 2,400 for NLHF
    (about 1,700: some 3 minutes on one free core; the time is a benchmark's to measure).
    The label schedule is that of a 3-minute run (``steps`` only sets its horizon; the
    10-minute limit is a guard).  PPO's learning rate is held constant: under a time limit
    its linear decay follows the clock, and a loaded machine would decide the run after all.
    The run stops at the target (``target_return``), and the saved policy, played afresh for
    50 episodes, is far above the initial policy's ≈ 22.  (Left to train on, the NLHF route
    did not hold 500: one run reached it and fell to 103.)"""
    from nlhf.control.rollout import episode_returns

    for config, within, extra in (
        (routes.RLHFConfig, 600, {"schedule": "constant"}),
        (routes.NLHFConfig, 2400, {}),
    ):
        out = tmp_path / config.__name__
        cfg = config(
            out=str(out), steps=100_000, time_limit=10.0, target_return=475, **FAST, **extra
        )
        algorithm, _ = routes.train(cfg)
        best = max(r.get("episode_return", 0.0) for r in metrics(out))
        final = np.mean(episode_returns(algorithm.policy, "CartPole-v1", 50, seed=1))
        print(
            f"{config.__name__}: window mean {best:.1f} at step {len(metrics(out))}, "
            f"{sum(r['step_seconds'] for r in metrics(out)):.0f} s; final 50-episode {final:.1f}"
        )
        assert algorithm.finished and best >= 475, best
        assert len(metrics(out)) <= within, len(metrics(out))
        assert final > 200, final

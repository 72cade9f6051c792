"""The T-REX example (examples/trex.py): the Atari Grand Challenge loader on a small fixture in
the dataset's own layout (CSV rows and PIL-written PNG screens), its one-line errors, and T-REX
snippet pairs from ranked replays."""

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from nlhf.control.segments import stack

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from trex import (
    AGCError,
    Demonstration,
    agc_stats,
    by_checkpoint,
    from_replays,
    load_agc,
    snippet_pairs,
)

GAME = "spaceinvaders"
HEADER = "frame,reward,score,terminal,action"


def replay_text(rewards, action=1):
    rows, score = [], 0
    for t, r in enumerate(rewards):
        score += r
        terminal = "True" if t == len(rewards) - 1 else " 0"
        rows.append(f"{t}, {r},{score},{terminal},{action}")
    return "\n".join(["{'id': 1, 'user': 'anon'}", HEADER, *rows]) + "\n"


@pytest.fixture
def agc(tmp_path):
    """Three replays (ids 2, 10, 7): scores 15, 5, 30 over 6, 8 and 10 frames; screens for 2."""
    trajectories = tmp_path / "trajectories" / GAME
    trajectories.mkdir(parents=True)
    replays = {
        2: [0, 5, 0, 10, 0, 0],
        10: [0, 0, 5, 0, 0, 0, 0, 0],
        7: [10, 0, 10, 0, 10] + [0] * 5,
    }
    for replay_id, rewards in replays.items():
        (trajectories / f"{replay_id}.txt").write_text(replay_text(rewards, replay_id % 6))
    screens = tmp_path / "screens" / GAME / "2"
    screens.mkdir(parents=True)
    for n in range(6):
        pixels = np.full((21, 16, 3), 40 * n, np.uint8)
        pixels[0, 0] = (255, 0, n)
        Image.fromarray(pixels).save(screens / f"{n}.png")
    return tmp_path


def test_the_fixture_loads_with_correct_stats_and_screens(agc):
    replays = load_agc(agc, GAME)
    assert [r.id for r in replays] == [2, 7, 10]
    assert [r.score for r in replays] == [15, 30, 5]
    assert [len(r) for r in replays] == [6, 10, 8]
    assert agc_stats(replays) == {
        "replays": 3,
        "frames": 24,
        "min_score": 5.0,
        "max_score": 30.0,
        "mean_score": pytest.approx(50 / 3),
        "std_score": pytest.approx(np.std([15, 30, 5])),
    }
    first = replays[0]
    assert first.terminals.tolist() == [False] * 5 + [True]
    assert first.actions.tolist() == [2] * 6 and first.rewards.dtype == np.float32
    assert first.metadata.startswith("{'id'")
    screen = first.screen(3)
    assert screen.shape == (21, 16, 3) and screen.dtype == np.uint8
    assert screen[5, 5].tolist() == [120] * 3 and screen[0, 0].tolist() == [255, 0, 3]
    assert replays[1].screens is None
    with pytest.raises(AGCError, match="no screens folder"):
        replays[1].screen(0)


def test_a_corrupt_row_names_the_file_and_the_line(agc):
    path = agc / "trajectories" / GAME / "7.txt"
    lines = path.read_text().splitlines()
    lines[4] = "2,10,x20,0,1"  # the third row, line 5 of the file
    path.write_text("\n".join(lines))
    with pytest.raises(AGCError, match=r"7\.txt, line 5: score 'x20' is not an integer"):
        load_agc(agc, GAME)
    lines[4] = "2,10,20,0"
    path.write_text("\n".join(lines))
    with pytest.raises(AGCError, match=r"7\.txt, line 5: 4 fields, expected 5"):
        load_agc(agc, GAME)


def test_a_wrong_header_or_folder_is_a_one_line_error(agc):
    path = agc / "trajectories" / GAME / "2.txt"
    path.write_text(path.read_text().replace(HEADER, "frame,reward,score,action"))
    with pytest.raises(AGCError, match=r"2\.txt, line 2: header"):
        load_agc(agc, GAME)
    with pytest.raises(AGCError, match="trajectories/qbert: no such folder"):
        load_agc(agc, "qbert")


def test_trex_snippets_prefer_the_better_replay_and_start_no_earlier(agc):
    replays = load_agc(agc, GAME)
    # features: the replay's id in every step, and the step index, to read back where from
    demos = from_replays(replays, lambda r: np.stack([np.full(len(r), r.id), np.arange(len(r))], 1))
    rng = np.random.default_rng(0)
    pairs, labels = snippet_pairs(demos, 600, 4, rng)
    score = {r.id: r.score for r in replays}
    for (a, b), y in zip(pairs, labels, strict=True):
        ia, ib = int(a.obs[0, 0]), int(b.obs[0, 0])
        assert ia != ib and a.length == b.length == 4
        better, worse = (a, b) if y == 1.0 else (b, a)
        assert score[int(better.obs[0, 0])] > score[int(worse.obs[0, 0])]
        assert better.start >= worse.start and better.start == int(better.obs[0, 1])
        assert better.true_return == float(
            replays[[r.id for r in replays].index(int(better.obs[0, 0]))]
            .rewards[better.start : better.start + 4]
            .sum()
        )
    assert 0.4 < labels.mean() < 0.6  # the better snippet is first or second by a coin flip
    a = stack([x for x, _ in pairs])
    assert a.obs.shape == (600, 4, 2)


def test_checkpoint_order_ranks_later_trajectories_higher():
    early = (np.zeros((6, 1)), np.zeros(6))
    late = (np.ones((6, 1)), np.ones(6))
    demos = by_checkpoint([early, late])
    pairs, labels = snippet_pairs(demos, 50, 3, np.random.default_rng(1))
    for (a, b), y in zip(pairs, labels, strict=True):
        assert (a.obs[0, 0] > b.obs[0, 0]) == (y == 1.0)
    with pytest.raises(ValueError, match="at least two ranks"):
        snippet_pairs([Demonstration(np.zeros((9, 1)), np.zeros(9), 1.0)] * 2, 5, 3, None)

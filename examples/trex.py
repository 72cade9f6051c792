"""T-REX preference pairs from ranked demonstrations (Brown et al. 2019, arXiv:1904.06387), and
the Atari Grand Challenge replays (Kurin et al. 2017, arXiv:1705.10998) to rank: an example on
top of ``nlhf.control``, kept out of the package because no command uses it yet.

    sys.path.insert(0, "examples"); import trex
    replays = trex.load_agc("data/atari_v1", "spaceinvaders")          # sorted by replay id
    demos = trex.from_replays(replays, observe)                        # ranked by final score
    demos = trex.by_checkpoint(trajectories)                           # or by learner progress
    pairs, labels = trex.snippet_pairs(demos, n=5000, length=50, rng=rng)
    fit(model, stack([a for a, _ in pairs]), stack([b for _, b in pairs]), labels)

The replays' layout (yobibyte/atarigrandchallenge ``agc/dataset.py``): ``trajectories/<game>/
<id>.txt`` holds one replay (line 1 metadata, line 2 ``frame,reward,score,terminal,action``,
then a row per frame); ``screens/<game>/<id>/<n>.png`` is the screen of row n.  The data is not
on PyPI: download it and point ``root`` at it; a bad row raises :class:`AGCError` naming the
file and line.  :func:`snippet_pairs` draws two demonstrations of different rank, then a
snippet of ``length`` steps of each, the better one's start no earlier than the worse one's
(T-REX's rule); the better snippet comes first or second by a coin flip (label 1 or 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nlhf.control.segments import Segment
from nlhf.errors import UserError

HEADER = ("frame", "reward", "score", "terminal", "action")
TERMINAL = {"0": 0, "1": 1, "false": 0, "true": 1}


class AGCError(UserError, ValueError):
    """A missing folder or a row of an AGC replay that cannot be read; names file and line."""


@dataclass
class Replay:
    """One human replay: its rows as arrays, and where its screens are."""

    game: str
    id: int
    metadata: str
    frames: np.ndarray  # [T] int64 frame numbers
    rewards: np.ndarray  # [T] float32
    scores: np.ndarray  # [T] int64 running score
    terminals: np.ndarray  # [T] bool
    actions: np.ndarray  # [T] int64 (Atari action ids)
    screens: Path | None = None  # screens/<game>/<id>/, when present

    def __len__(self) -> int:
        return len(self.frames)

    @property
    def score(self) -> int:
        return int(self.scores[-1]) if len(self.scores) else 0

    def screen(self, n: int) -> np.ndarray:
        """The screen of row ``n`` as an RGB uint8 array."""
        from PIL import Image

        if self.screens is None:
            raise AGCError(f"{self.game} replay {self.id}: no screens folder")
        path = self.screens / f"{n}.png"
        if not path.is_file():
            raise AGCError(f"{path}: no such screen")
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB"))


def _row(text: str, path: Path, line: int) -> tuple[int, int, int, int, int]:
    cells = text.replace(" ", "").split(",")
    if len(cells) != len(HEADER):
        raise AGCError(f"{path}, line {line}: {len(cells)} fields, expected {len(HEADER)}")
    values = []
    for name, cell in zip(HEADER, cells, strict=True):
        if name == "terminal" and cell.lower() in TERMINAL:
            values.append(TERMINAL[cell.lower()])
            continue
        try:
            values.append(int(cell))
        except ValueError:
            raise AGCError(f"{path}, line {line}: {name} {cell!r} is not an integer") from None
    return tuple(values)  # type: ignore[return-value]


def read_replay(path: Path, game: str, screens: Path | None = None) -> Replay:
    """One ``trajectories/<game>/<id>.txt`` file."""
    try:
        replay_id = int(path.stem)
    except ValueError:
        raise AGCError(f"{path}: a replay file is named <id>.txt with an integer id") from None
    lines = path.read_text(encoding="utf-8").splitlines()
    if len(lines) < 2:
        raise AGCError(f"{path}: needs a metadata line and a header line")
    header = tuple(lines[1].replace(" ", "").lower().split(","))
    if header != HEADER:
        raise AGCError(f"{path}, line 2: header {lines[1]!r}, expected {','.join(HEADER)}")
    rows = [_row(t, path, i) for i, t in enumerate(lines[2:], start=3) if t.strip()]
    columns = np.array(rows, dtype=np.int64).reshape(-1, len(HEADER)).T
    folder = None if screens is None else screens / str(replay_id)
    return Replay(
        game=game,
        id=replay_id,
        metadata=lines[0],
        frames=columns[0],
        rewards=columns[1].astype(np.float32),
        scores=columns[2],
        terminals=columns[3].astype(bool),
        actions=columns[4],
        screens=folder if folder is not None and folder.is_dir() else None,
    )


def load_agc(root: str | Path, game: str) -> list[Replay]:
    """Every replay of ``game`` under ``root`` (sorted by id)."""
    root = Path(root)
    folder = root / "trajectories" / game
    if not folder.is_dir():
        raise AGCError(f"{folder}: no such folder (root must hold trajectories/{game}/)")
    screens = root / "screens" / game
    paths = sorted(folder.glob("*.txt"))
    if not paths:
        raise AGCError(f"{folder}: no replay files (<id>.txt)")
    replays = [read_replay(p, game, screens if screens.is_dir() else None) for p in paths]
    return sorted(replays, key=lambda r: r.id)


def agc_stats(replays: list[Replay]) -> dict[str, float]:
    """Replays, frames and the min / max / mean / std of the final scores (as agc/dataset.py)."""
    scores = np.array([r.score for r in replays], dtype=np.float64)
    return {
        "replays": len(replays),
        "frames": int(sum(len(r) for r in replays)),
        "min_score": float(scores.min()),
        "max_score": float(scores.max()),
        "mean_score": float(scores.mean()),
        "std_score": float(scores.std()),
    }


@dataclass
class Demonstration:
    """One trajectory and its rank (higher is better)."""

    obs: np.ndarray  # [T, obs_dim] float32
    actions: np.ndarray  # [T] int64
    rank: float
    rewards: np.ndarray | None = None  # [T] true rewards, for evaluation only
    episode: int = 0

    def __len__(self) -> int:
        return len(self.actions)

    def snippet(self, start: int, length: int) -> Segment:
        window = slice(start, start + length)
        rewards = np.zeros(len(self), np.float32) if self.rewards is None else self.rewards
        return Segment(
            np.asarray(self.obs[window], np.float32),
            np.asarray(self.actions[window], np.int64),
            np.asarray(rewards[window], np.float32),
            episode=self.episode,
            start=start,
        )


def by_checkpoint(trajectories: Sequence[tuple[np.ndarray, np.ndarray]]) -> list[Demonstration]:
    """(obs, actions) trajectories in the order their checkpoints were saved: later is better."""
    return [
        Demonstration(np.asarray(obs, np.float32), np.asarray(actions, np.int64), float(i), None, i)
        for i, (obs, actions) in enumerate(trajectories)
    ]


def from_replays(
    replays: Sequence[Replay], observe: Callable[[Replay], np.ndarray]
) -> list[Demonstration]:
    """AGC replays ranked by final score; ``observe(replay)`` gives its [T, obs_dim] features
    (e.g. downsampled screens)."""
    return [
        Demonstration(
            np.asarray(observe(r), np.float32), r.actions, float(r.score), r.rewards, r.id
        )
        for r in replays
    ]


def snippet_pairs(
    demos: Sequence[Demonstration], n: int, length: int, rng: np.random.Generator
) -> tuple[list[tuple[Segment, Segment]], np.ndarray]:
    """``n`` (pair, label) rows: label 1.0 when the first snippet is from the better-ranked
    demonstration, 0.0 when the second is."""
    usable = [d for d in demos if len(d) >= length]
    ranks = np.array([d.rank for d in usable])
    if len(np.unique(ranks)) < 2:
        raise ValueError(
            f"need demonstrations of at least two ranks with ≥ {length} steps; "
            f"{len(usable)} of {len(demos)} are long enough"
        )
    pairs, labels = [], np.empty(n, dtype=np.float32)
    for row in range(n):
        i = int(rng.integers(len(usable)))
        others = np.flatnonzero(ranks != ranks[i])
        j = int(others[rng.integers(len(others))])
        worse, better = sorted((usable[i], usable[j]), key=lambda d: d.rank)
        shared = min(len(worse), len(better)) - length
        worse_start = int(rng.integers(shared + 1))
        better_start = int(rng.integers(worse_start, len(better) - length + 1))
        low, high = worse.snippet(worse_start, length), better.snippet(better_start, length)
        first = bool(rng.random() < 0.5)
        pairs.append((high, low) if first else (low, high))
        labels[row] = 1.0 if first else 0.0
    return pairs, labels

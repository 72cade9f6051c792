"""Loader for the Atari Grand Challenge replays (Kurin et al. 2017, arXiv:1705.10998).

    replays = load_agc("data/atari_v1", "spaceinvaders")     # sorted by replay id
    stats = agc_stats(replays)                               # replays, frames, scores
    frame = replays[0].screen(0)                             # [H, W, 3] uint8 (PIL)

The dataset's layout (yobibyte/atarigrandchallenge, ``agc/dataset.py``):
``trajectories/<game>/<id>.txt`` holds one replay, line 1 metadata, line 2 the header
``frame,reward,score,terminal,action``, then one row per frame (spaces are ignored and a
terminal may read 0/1 or False/True); ``screens/<game>/<id>/<n>.png`` is the screen of row n
(numbered from 0).  A replay's score is its last row's.  The games are Space Invaders,
Q*bert, Ms. Pac-Man, Video Pinball and Montezuma's Revenge (no Pong); the frames come from a
JavaScript emulator and do not line up with ALE's.  The data is not on PyPI; download it
yourself and point ``root`` at the folder holding ``trajectories/`` and ``screens/``.  A bad
row raises :class:`AGCError` naming the file and the line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

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

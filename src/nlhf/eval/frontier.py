"""``nlhf eval --frontier``: methods compared at matched KL, as the field compares them.

    nlhf eval --frontier --policies ppo=runs/ppo,nash-md=runs/nash-md --judges vader
    nlhf eval --frontier --policies ppo=runs/ppo-s0,ppo=runs/ppo-s1,nash=runs/nash-s0 \\
        --targets 0.5,1,2,4,8 --bon 1,2,4,8,16 --out runs/frontier

Each ``METHOD=RUN`` is a training ``--out`` folder: its final ``policy/`` and every checkpoint
kept in ``checkpoints/`` (``keep_checkpoints``) become points; a method named twice has one
run per seed.  Every point samples the same held-out prompts and becomes (exact KL to the
reference, P(point ≻ reference), judge score).  Per method: the upper envelope of its points
(the best win rate reached at KL ≤ k), averaged over its runs, with a percentile bootstrap
band over runs and prompts; best-of-n of the reference (a score judge picks the best of n
reference samples) is the reference curve at KL = log n − (n−1)/n.  At each target KL every
run's point nearest the target (within a factor of 2) plays the others; verdicts name the KL
each side actually had, and where one frontier lies above another (DPO §6.1; Tang et al.
2024).  Writes ``frontier.json``, ``frontier.md`` and ``frontier.png`` into ``--out``.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from nlhf.eval.entrants import adapter_base, parse_entrants
from nlhf.eval.judging import _sigmoid, is_score_judge, judge_tournament
from nlhf.eval.report import format_interval, markdown_table
from nlhf.eval.rollouts import Sampling, sample_entrants
from nlhf.files import atomic_write_json, atomic_write_text, temp_dir_beside
from nlhf.models.lm import load_causal_lm, load_tokenizer
from nlhf.reporting import draw_lines, figure, save_png, verdict

CHECKPOINTS = "checkpoints"
PREFIX = "step-"
FACTOR = 2.0
"""A point counts as at a target KL when its KL lies within this factor of it."""


# --------------------------------------------------------------------------- pure parts


def bon_kl(n: int) -> float:
    """KL of best-of-n of the reference to the reference: log n − (n−1)/n (analytic)."""
    return math.log(n) - (n - 1) / n


def upper_envelope(kl: np.ndarray, win: np.ndarray) -> np.ndarray:
    """Indices of the points no other point beats at a KL as low or lower, by KL."""
    kl, win = np.asarray(kl, float), np.asarray(win, float)
    order = np.lexsort((-win, kl))
    kept, best = [], -np.inf
    for i in order:
        if win[i] > best:
            kept.append(int(i))
            best = win[i]
    return np.array(kept, dtype=int)


def envelope_at(kl: np.ndarray, win: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """The envelope read at each grid KL: the best win rate of a point with KL ≤ g; NaN below
    the lowest KL and beyond the highest (a frontier says nothing where it has no point)."""
    kl, win = np.asarray(kl, float), np.asarray(win, float)
    out = np.full(len(grid), np.nan)
    for g, value in enumerate(grid):
        if kl.min() <= value <= kl.max():
            out[g] = win[kl <= value].max()
    return out


def nearest(kl: Sequence[float], target: float, factor: float = FACTOR) -> int | None:
    """The index of the KL nearest ``target`` on a log scale; None when none lies within
    ``factor`` of it."""
    if not len(kl):
        return None
    distance = np.abs(np.log(np.maximum(np.asarray(kl, float), 1e-12)) - math.log(target))
    best = int(np.argmin(distance))
    return best if distance[best] <= math.log(factor) else None


def regions(grid: np.ndarray, mask: np.ndarray) -> list[tuple[float, float]]:
    """The (first, last) grid values of each run of True in ``mask``."""
    out, start = [], None
    for g, on in enumerate(mask):
        if on and start is None:
            start = g
        if start is not None and (not on or g == len(mask) - 1):
            end = g if on else g - 1
            out.append((float(grid[start]), float(grid[end])))
            start = None
    return out


@dataclass
class Point:
    """One checkpoint of one run: per-prompt exact KL, P(point ≻ reference) and score."""

    method: str
    run: int
    step: int
    name: str
    kl: np.ndarray
    win: np.ndarray
    score: np.ndarray | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "run": self.run,
            "step": self.step,
            "name": self.name,
            "kl": float(self.kl.mean()),
            "win_rate": float(self.win.mean()),
            "score": None if self.score is None else float(self.score.mean()),
        }


def bootstrap_envelopes(
    points: list[Point], grid: np.ndarray, resamples: int = 1000, seed: int = 0
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each method's envelope on ``grid`` (the mean over its runs of each run's envelope) and
    ``resamples`` bootstrap copies (prompts resampled once per copy for every method alike,
    a method's runs resampled with replacement): ``(estimate, copies)`` by method."""
    methods = list(dict.fromkeys(p.method for p in points))
    n = len(points[0].kl)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n, size=(resamples, n))

    def runs_of(method: str) -> list[list[Point]]:
        runs: dict[int, list[Point]] = {}
        for p in points:
            if p.method == method:
                runs.setdefault(p.run, []).append(p)
        return list(runs.values())

    def curve(run: list[Point], rows: np.ndarray | slice) -> np.ndarray:
        kl = np.array([p.kl[rows].mean() for p in run])
        win = np.array([p.win[rows].mean() for p in run])
        return envelope_at(kl, win, grid)

    estimate, copies = {}, {}
    for method in methods:
        runs = runs_of(method)
        estimate[method] = np.mean([curve(run, slice(None)) for run in runs], axis=0)
        chosen = rng.integers(0, len(runs), size=(resamples, len(runs)))
        copies[method] = np.array(
            [
                np.mean([curve(runs[r], picks[b]) for r in chosen[b]], axis=0)
                for b in range(resamples)
            ]
        )
    return estimate, copies


def bon_curve(reference_scores: np.ndarray, pool_scores: np.ndarray, n: int, scale: float):
    """Per prompt, P(best of n pool samples ≻ a reference sample) under a score judge whose
    preference is sigmoid(scale·(s − s′)); ``pool_scores`` (prompts, m ≥ n), the best of n
    drawn without replacement, averaged exactly over the draws by its order statistics."""
    m = pool_scores.shape[1]
    if n > m:
        raise ValueError(f"best-of-{n} needs at least {n} pool samples, got {m}")
    ranked = np.sort(pool_scores, axis=1)
    # P(the best of n is the i-th smallest) = C(i−1, n−1) / C(m, n), i = 1..m
    weights = np.array([math.comb(i - 1, n - 1) for i in range(1, m + 1)]) / math.comb(m, n)
    wins = _sigmoid(scale * (ranked[:, :, None] - reference_scores[:, None, :])).mean(axis=2)
    return wins @ weights


def pair_interval(
    prefs: np.ndarray, level: float = 0.95, resamples: int = 2000, seed: int = 0
) -> dict[str, float]:
    """P(A ≻ B) from ``prefs`` (runs of A, runs of B, prompts) of per-prompt P: the mean,
    and a percentile bootstrap over A's runs, B's runs and prompts."""
    ra, rb, n = prefs.shape
    rng = np.random.default_rng(seed)
    boot = np.empty(resamples)
    for b in range(resamples):
        i, j, x = rng.integers(0, ra, ra), rng.integers(0, rb, rb), rng.integers(0, n, n)
        boot[b] = prefs[np.ix_(i, j, x)].mean()
    low, high = np.quantile(boot, [0.5 - level / 2, 0.5 + level / 2])
    return {"mean": float(prefs.mean()), "low": float(low), "high": float(high), "n": n}


# --------------------------------------------------------------------------- checkpoints


def run_points(run: Path) -> list[tuple[int, Path | None]]:
    """(step, checkpoint file) of every kept checkpoint of a training ``--out`` folder, then
    (last step, None) for its final ``policy/``."""
    if not (run / "policy").is_dir():
        raise FileNotFoundError(f"{run}: no policy/ folder (is it a training --out folder?)")
    found = []
    folder = run / CHECKPOINTS
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name.startswith(PREFIX) and (path / "state.pt").exists():
            found.append((int(path.name[len(PREFIX) :]), path / "state.pt"))
    found.sort()
    last = _last_step(run)
    return [*found, (max(last, found[-1][0] + 1) if found else last, None)]


def _last_step(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        return 0
    lines = [line for line in metrics.read_text().splitlines() if line.strip()]
    return int(json.loads(lines[-1]).get("step", 0)) if lines else 0


def materialize(policy: Path, state: Path, folder: Path, reference: str = "") -> Path:
    """Write the policy of a checkpoint (``state.pt``'s trainable weights into the run's
    final ``policy/``, adapter or full model) as a policy folder, atomically; kept when
    already there.  ``reference``: the base of an adapter whose config names none."""
    if folder.exists():
        return folder
    saved = torch.load(state, map_location="cpu", weights_only=False)["trainable"]
    tmp = temp_dir_beside(folder)
    try:
        if (policy / "adapter_config.json").exists():
            from peft import PeftModel  # noqa: PLC0415 - peft is slow to import; adapters only

            base, _ = load_causal_lm(adapter_base(policy) or reference, "float32")
            model = PeftModel.from_pretrained(base, str(policy), is_trainable=True)
        else:
            model, _ = load_causal_lm(str(policy), "float32")
        params = dict(model.named_parameters())
        missing = sorted(set(saved) - set(params))
        if missing:
            raise ValueError(f"{state}: weights {missing[:2]} do not fit {policy}")
        with torch.no_grad():
            for name, value in saved.items():
                params[name].copy_(value.to(params[name].dtype))
        model.save_pretrained(tmp)
        load_tokenizer(str(policy)).save_pretrained(tmp)
        tmp.replace(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


# --------------------------------------------------------------------------- the command


@dataclass
class Frontier:
    """What ``--frontier`` measured; :meth:`as_dict` is ``frontier.json``."""

    judge: str
    points: list[Point]
    grid: np.ndarray
    envelopes: dict[str, dict[str, list[float]]]
    bon: list[dict[str, float]]
    matched: list[dict[str, Any]]
    dominance: list[dict[str, Any]]
    settings: dict[str, Any]

    def as_dict(self) -> dict[str, Any]:
        return {
            "judge": self.judge,
            "points": [p.as_dict() for p in self.points],
            "grid": self.grid.tolist(),
            "envelopes": self.envelopes,
            "best_of_n": self.bon,
            "matched": self.matched,
            "dominance": self.dominance,
            "settings": self.settings,
        }


def parse_runs(specs: Sequence[str]) -> list[tuple[str, int, Path]]:
    """(method, run, folder) of each ``METHOD=FOLDER`` spec: a method named again is its
    next run (a seed); ``METHOD#RUN=FOLDER`` puts several folders into one run (a sweep of
    the method's strength, one seed), whose points share one envelope.  A folder without a
    name is its own method."""
    out, counts = [], {}
    for spec in specs:
        method, sep, folder = spec.partition("=")
        if not sep:
            method, folder = Path(spec).name, spec
        method, mark, run = method.partition("#")
        if mark:
            if not run.isdigit():
                raise ValueError(f"{spec}: the run after # must be a number")
            number = int(run)
        else:
            number = counts.get(method, 0)
        counts[method] = max(counts.get(method, 0), number + 1)
        out.append((method, number, Path(folder)))
    return out


def run_frontier(
    runs: Sequence[str],
    prompts: Sequence[str],
    judge: Any,
    judge_name: str,
    *,
    reference: str = "",
    sampling: Sampling | None = None,
    targets: Sequence[float] = (0.5, 1.0, 2.0, 4.0, 8.0),
    bon: Sequence[int] = (1, 2, 4, 8, 16),
    level: float = 0.95,
    resamples: int = 1000,
    progress: bool = True,
    out: str | Path | None = None,
) -> Frontier:
    """Every checkpoint of every run as a point, envelopes, best-of-n, matched-KL verdicts."""
    sampling = sampling or Sampling()
    prompts = list(prompts)
    parsed = parse_runs(runs)
    work = Path(out) if out is not None else Path(tempfile.mkdtemp(prefix="nlhf-frontier-"))
    found, folders = [], {}
    for method, r, folder in parsed:
        k = folders[method, r] = folders.get((method, r), -1) + 1
        for step, state in run_points(folder):
            name = f"{method}-r{r}-s{step}" if k == 0 else f"{method}-r{r}-f{k}-s{step}"
            found.append((method, r, step, name, folder / "policy", state))
    specs, where = ["reference"], []
    for method, r, step, name, path, state in tqdm(
        found, desc="checkpoints", unit="point", disable=not progress
    ):
        if state is not None:
            path = materialize(path, state, work / "points" / name, reference)
        specs.append(f"{name}={path}")
        where.append((method, r, step, name))
    entrants, ref_path = parse_entrants(specs, reference)
    completions = sample_entrants(entrants, ref_path, prompts, sampling, progress)
    wins, scores = _judge_points(judge, judge_name, prompts, completions, sampling)
    points = [
        Point(method, r, step, name, _per_prompt(completions[i + 1].kl), wins[i], scores[i])
        for i, (method, r, step, name) in enumerate(where)
    ]
    top = max(max(p.kl.mean() for p in points), max(targets), bon_kl(max(bon)) if bon else 0)
    kls = [p.kl.mean() for p in points if p.kl.mean() > 0]
    grid = np.unique(np.concatenate([np.geomspace(0.05, max(top, 0.1), 80), kls]))
    estimate, copies = bootstrap_envelopes(points, grid, resamples, sampling.seed)
    q = (0.5 - level / 2, 0.5 + level / 2)
    envelopes = {
        m: {
            "mean": _listed(estimate[m]),
            "low": _listed(_quantile(copies[m], q[0])),
            "high": _listed(_quantile(copies[m], q[1])),
        }
        for m in estimate
    }
    bon_points = (
        _best_of_n(
            judge,
            judge_name,
            prompts,
            entrants[0],
            ref_path,
            sampling,
            bon,
            completions[0],
            level,
            progress,
        )
        if bon and is_score_judge(judge)
        else []
    )
    matched = _matched(judge, judge_name, prompts, completions, points, targets, level, sampling)
    dominance = _dominance(grid, copies, level)
    result = Frontier(
        judge_name,
        points,
        grid,
        envelopes,
        bon_points,
        matched,
        dominance,
        {
            "reference": ref_path,
            "targets": list(targets),
            "best_of_n": list(bon),
            "level": level,
            "resamples": resamples,
            "n_prompts": len(prompts),
            "runs": [f"{m}={f}" for m, _, f in parsed],
            **vars(sampling),
        },
    )
    if out is not None:
        write_frontier(result, Path(out))
    return result


def _quantile(copies: np.ndarray, q: float) -> np.ndarray:
    """Per grid column, the q-quantile of the copies that reach it; NaN where none does."""
    out = np.full(copies.shape[1], np.nan)
    reached = ~np.isnan(copies).all(axis=0)
    if reached.any():
        out[reached] = np.nanquantile(copies[:, reached], q, axis=0)
    return out


def _listed(x: np.ndarray) -> list[float | None]:
    return [None if not np.isfinite(v) else float(v) for v in x]


def _per_prompt(values: np.ndarray | None) -> np.ndarray:
    if values is None:
        raise ValueError("the KL to the reference is not measurable (another vocabulary?)")
    return np.asarray(values, float).mean(axis=1)


def _judge_points(judge, name, prompts, completions, sampling):
    """Per point, per prompt P(point ≻ reference) and the mean score (score judges)."""
    if is_score_judge(judge):
        verdict = judge_tournament(judge, name, prompts, completions)
        wins = [1.0 - verdict.prefs[(0, i)].mean(axis=1) for i in range(1, len(completions))]
        scores = [s.mean(axis=1) for s in verdict.scores[1:]]
        return wins, scores
    wins = []
    for c in completions[1:]:
        verdict = judge_tournament(judge, name, prompts, [completions[0], c])
        wins.append(1.0 - verdict.prefs[(0, 1)].mean(axis=1))
    return wins, [None] * len(wins)


def _best_of_n(
    judge, name, prompts, ref_entrant, ref_path, sampling, bon, ref_comp, level, progress
):
    """Best-of-n of the reference against the reference, from a separate pool of reference
    samples (another seed, so a pick is never the sample it is compared with)."""
    pool_settings = replace(sampling, samples_per_prompt=max(bon), seed=sampling.seed + 1)
    pool = sample_entrants([ref_entrant], ref_path, prompts, pool_settings, progress)[0]
    (ref_scores,) = judge_tournament(judge, name, prompts, [ref_comp]).scores
    (pool_scores,) = judge_tournament(judge, name, prompts, [pool]).scores
    out = []
    for n in bon:
        per_prompt = bon_curve(ref_scores, pool_scores, n, judge.scale)
        est = pair_interval(per_prompt[None, None, :], level)
        out.append({"n": n, "kl": bon_kl(n), "win_rate": est})
    return out


def _matched(judge, name, prompts, completions, points, targets, level, sampling):
    """At each target, every run's point nearest it (within FACTOR); each pair of methods
    that both have one: P(A ≻ B) over their runs' pairs, bootstrap over runs and prompts."""
    methods = list(dict.fromkeys(p.method for p in points))
    out = []
    for target in targets:
        chosen: dict[str, list[int]] = {}
        for method in methods:
            for run in sorted({p.run for p in points if p.method == method}):
                index = [i for i, p in enumerate(points) if p.method == method and p.run == run]
                pick = nearest([points[i].kl.mean() for i in index], target)
                if pick is not None:
                    chosen.setdefault(method, []).append(index[pick])
        row = {
            "target": target,
            "points": {m: [points[i].name for i in v] for m, v in chosen.items()},
            "kl": {m: [float(points[i].kl.mean()) for i in v] for m, v in chosen.items()},
            "pairs": [],
        }
        flat = [i for v in chosen.values() for i in v]
        if len(chosen) >= 2:
            verdict = judge_tournament(judge, name, prompts, [completions[i + 1] for i in flat])
            position = {i: k for k, i in enumerate(flat)}
            present = list(chosen)
            for a_i, a in enumerate(present):
                for b in present[a_i + 1 :]:
                    prefs = np.array(
                        [
                            [_pref(verdict, position[i], position[j]) for j in chosen[b]]
                            for i in chosen[a]
                        ]
                    )
                    row["pairs"].append({"row": a, "col": b, **pair_interval(prefs, level)})
        out.append(row)
    return out


def _pref(verdict, a: int, b: int) -> np.ndarray:
    """Per prompt P(a ≻ b) from a verdict that holds the pairs a < b."""
    if a < b:
        return verdict.prefs[(a, b)].mean(axis=1)
    return 1.0 - verdict.prefs[(b, a)].mean(axis=1)


def _dominance(grid: np.ndarray, copies: dict[str, np.ndarray], level: float):
    """For each pair of methods, the KL ranges where one envelope lies above the other with
    the whole ``level`` bootstrap interval of the difference on one side of 0."""
    methods, out = list(copies), []
    q = (0.5 - level / 2, 0.5 + level / 2)
    for i, a in enumerate(methods):
        for b in methods[i + 1 :]:
            diff = copies[b] - copies[a]
            both = ~np.isnan(diff).any(axis=0)
            low = np.where(both, np.quantile(np.nan_to_num(diff), q[0], axis=0), np.nan)
            high = np.where(both, np.quantile(np.nan_to_num(diff), q[1], axis=0), np.nan)
            out.append(
                {
                    "a": a,
                    "b": b,
                    "b_above": regions(grid, both & (low > 0)),
                    "a_above": regions(grid, both & (high < 0)),
                    "compared": regions(grid, both),
                }
            )
    return out


# --------------------------------------------------------------------------- report


def verdicts(result: Frontier) -> list[str]:
    """One line per matched target and pair of methods, naming the KL each side had, then
    where one method's frontier lies above another's."""
    return verdict_lines(result.matched, result.dominance)


def verdict_lines(matched: list[dict[str, Any]], dominance: list[dict[str, Any]]) -> list[str]:
    """:func:`verdicts` from ``frontier.json``'s ``matched`` and ``dominance``."""
    lines = []
    for row in matched:
        for pair in row["pairs"]:
            a, b = pair["row"], pair["col"]
            kls = ", ".join(f"{m} {' / '.join(f'{k:.2f}' for k in row['kl'][m])}" for m in (a, b))
            lines.append(f"- at {row['target']:g} nats ({kls}): " + verdict(pair, a, b))
        if not row["pairs"]:
            have = ", ".join(row["kl"]) or "no method"
            lines.append(
                f"- at {row['target']:g} nats: only {have} has a point within a factor "
                f"{FACTOR:g} of it; no head-to-head"
            )
    for d in dominance:
        a, b = d["a"], d["b"]
        said = [f"{b}'s frontier is above {a}'s {_span(r)}" for r in d["b_above"]]
        said += [f"{a}'s frontier is above {b}'s {_span(r)}" for r in d["a_above"]]
        span = ", ".join(_range(lo, hi) for lo, hi in d["compared"])
        if said:
            lines.append(f"- frontiers ({span} nats, where both reach): " + "; ".join(said))
        elif span:
            lines.append(
                f"- frontiers of {a} and {b}: neither lies above the other with its interval "
                f"clear of 0 anywhere over {span} nats"
            )
        else:  # every bootstrap copy must reach a KL for the difference to be read there
            lines.append(
                f"- frontiers of {a} and {b}: not compared, no KL is reached by both in every "
                "bootstrap copy"
            )
    return lines


def _span(region: tuple[float, float]) -> str:
    low, high = (f"{x:.2g}" for x in region)
    return f"at {low} nats" if low == high else f"from {low} to {high} nats"


def _range(low: float, high: float) -> str:
    """``low–high`` to two significant digits, one number when they print the same."""
    low_text, high_text = f"{low:.2g}", f"{high:.2g}"
    return low_text if low_text == high_text else f"{low_text}–{high_text}"


def markdown(result: Frontier) -> str:
    s = result.settings
    pct = round(100 * s["level"])
    rows = [
        [
            p.name,
            p.method,
            str(p.run),
            str(p.step),
            f"{p.kl.mean():.2f}",
            f"{p.win.mean():.3f}",
            "–" if p.score is None else f"{p.score.mean():.3f}",
        ]
        for p in result.points
    ]
    bon_rows = [
        [str(b["n"]), f"{b['kl']:.2f}", format_interval(b["win_rate"], 3)] for b in result.bon
    ]
    return "\n".join(
        [
            "# Frontier",
            "",
            f"{len(result.points)} checkpoints of {len(s['runs'])} runs, {s['n_prompts']} held-out "
            f"prompts × {s['samples_per_prompt']} samples; judge `{result.judge}`. KL: exact "
            "KL(π‖μ) of each point's own samples (over the vocabulary at every position, summed "
            f"along the completion). Intervals: {pct}% percentile bootstrap over runs and prompts.",
            "",
            "## Verdicts at matched KL",
            "",
            *verdicts(result),
            "",
            "![frontier](frontier.png)",
            "",
            "## Points",
            "",
            *markdown_table(
                ["point", "method", "run", "step", "KL", "P(≻ reference)", "score"], rows, "lllrrrr"
            ),
            *(
                [
                    "",
                    "## Best-of-n of the reference",
                    "",
                    "KL = log n − (n−1)/n; the best of n reference samples by the judge's score.",
                    "",
                    *markdown_table(["n", "KL", "P(≻ reference)"], bon_rows),
                ]
                if bon_rows
                else []
            ),
            "",
        ]
    )


def plot(result: Frontier, path: Path) -> Path:
    """Win rate against the reference vs KL: every run's points, each method's envelope with
    its band, best-of-n."""
    fig, (ax,) = figure(1, (7, 4.5))
    grid = result.grid
    for k, (method, env) in enumerate(result.envelopes.items()):
        color = f"C{k}"
        mine = [p for p in result.points if p.method == method]
        for run in sorted({p.run for p in mine}):
            xs = [p.kl.mean() for p in mine if p.run == run]
            ys = [p.win.mean() for p in mine if p.run == run]
            ax.scatter(xs, ys, s=14, color=color, marker="os^vD"[run % 5], alpha=0.6)
        mean = np.array([np.nan if v is None else v for v in env["mean"]])
        low = np.array([np.nan if v is None else v for v in env["low"]])
        high = np.array([np.nan if v is None else v for v in env["high"]])
        ax.plot(grid, mean, color=color, label=method)
        ax.fill_between(grid, low, high, color=color, alpha=0.15)
    if result.bon:
        ax.plot(
            [b["kl"] for b in result.bon],
            [b["win_rate"]["mean"] for b in result.bon],
            "k--",
            marker=".",
            label="best-of-n of μ",
        )
    ax.axhline(0.5, color="grey", lw=0.8)
    ax.set_xscale("log")
    ax.set_ylabel(f"P(policy ≻ reference), judge {result.judge}")
    draw_lines(ax, {}, "frontier: win rate against KL", "exact KL(π‖μ) (nats)")
    return save_png(fig, path)


def write_frontier(result: Frontier, folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return {
        "json": atomic_write_json(folder / "frontier.json", result.as_dict()),
        "md": atomic_write_text(folder / "frontier.md", markdown(result)),
        "png": plot(result, folder / "frontier.png"),
    }

"""``nlhf train dno``: Direct Nash Optimization (Rosset et al. 2024), its practical form.

    nlhf train dno                                       # SmolLM2 + LoRA, IMDB prompts, VADER
    nlhf train dno --judge runs/pm/model samples=5 min_margin=0.25 replay=0.3
    nlhf train dno iteration_steps=16 iteration_epochs=2     # batched-iterative, as published

Each step (fully online; batched-iterative: :mod:`nlhf.train.iterative`), for every prompt x:

1. K completions ~ π_t (the policy at the start of the step) from one decode loop;
2. every pair judged; r_t(y_i) = P̂(y_i ≻ π_t), the leave-one-out win rate; the pair
   (y+, y−) = (argmax r_t, argmin r_t) is kept when r_t(y+) − r_t(y−) ≥ ``min_margin``
   (DNO keeps only large-margin pairs);
3. DPO's loss against π_t, −log σ(η·(log π/π_t(y+) − log π/π_t(y−))), on the kept pairs plus
   pairs replayed from earlier steps, ``replay`` of them per fresh pair at most, every pair
   against the π_t of this step (as in the paper's Eq. 13); the replay buffer is part of the
   checkpoint.  Online, π_t is the policy itself at the start of the step, so the margin starts
   at 0 and the step is DPO's gradient there; batched-iterative, π_t stays fixed over the
   iteration's steps (its log-prob gaps are taken once, as the iteration is prepared), which
   is where DNO departs from a pairwise policy gradient.

Parameters and metrics: docs/trainers.md.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from nlhf.config import option
from nlhf.losses import leave_one_out_win_rates
from nlhf.models.text import tokenize_prompts
from nlhf.train.core import NonFiniteError
from nlhf.train.groups import pairwise_matrix, sample_group
from nlhf.train.iterative import IterationFields, IterativeAlgorithm, Prepared
from nlhf.train.online import OnlineConfig, PromptBatch, train_and_report


@dataclass
class Config(OnlineConfig, IterationFields):
    """DNO: K samples, the best and worst by leave-one-out win rate when their margin is large,
    DPO against the policy of the step, with replay of earlier steps' pairs."""

    out: str = option("runs/dno", "output folder: metrics.jsonl, checkpoints/, policy/")
    samples: int = option(4, "K: completions per prompt, all pairs judged (the paper: 5)")
    eta: float = option(0.1, "η: DPO's inverse temperature against π_t (the paper: 0.05–0.1)")
    min_margin: float = option(
        0.25, "keep (y+, y−) when their win rates differ by at least this (0: every pair)"
    )
    replay: float = option(
        0.3, "replayed pairs from earlier steps per fresh pair, at most (the paper: 30% of t−1)"
    )
    buffer: int = option(256, "pairs kept for replay, newest first")

    def check(self) -> None:
        self.at_least(2, "samples")
        if self.eta <= 0:
            raise ValueError(f"eta must be > 0, got {self.eta}")
        if not 0 <= self.min_margin < 1:
            raise ValueError(f"min_margin must be in [0, 1), got {self.min_margin}")
        self.at_least(0, "replay", "buffer")


def large_margin_pairs(win: torch.Tensor, min_margin: float) -> tuple[torch.Tensor, ...]:
    """(best, worst, kept) per prompt from (B, K) win rates: the indices of the highest and
    lowest, and whether they differ by at least ``min_margin`` (and at all)."""
    best, worst = win.argmax(-1), win.argmin(-1)
    gap = win.max(-1).values - win.min(-1).values
    return best, worst, (gap >= min_margin) & (gap > 0)


def padded(rows: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, ...]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.bool)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r, dtype=torch.long), True
    return ids.to(device), mask.to(device)


class DNO(IterativeAlgorithm):
    """The algorithm: all-pairs win rates, large-margin pairs, DPO against π_t, replay."""

    config: Config
    step_rules = ("plain", "optimistic")  # not extragradient: the replay buffer grows every loss

    def __init__(self, trainer: Any, config: Config) -> None:
        super().__init__(trainer, config)
        self.buffer: deque[dict[str, Any]] = deque(maxlen=config.buffer)

    def prepare(self, batch: PromptBatch, step: int) -> dict[str, Any]:
        cfg, policy = self.config, self.trainer.policy
        n, k = len(batch.rows), cfg.samples
        t0 = time.perf_counter()
        # 1. K completions per prompt from one decode loop
        # (fully online, μ's logits stay for this step's exact KL; the prepared batches of an
        # iteration keep none)
        group = sample_group(policy, cfg, batch, step, k, keep_logits=not cfg.iteration_steps)
        out = group.out
        t1 = time.perf_counter()
        # 2. win rates and the large-margin pairs
        win = leave_one_out_win_rates(
            pairwise_matrix(self.trainer.judge, list(batch.texts), group.texts, k)
        )
        best, worst, kept = large_margin_pairs(win, cfg.min_margin)
        t2 = time.perf_counter()
        rows = torch.arange(n)
        pos, neg = (best * n + rows)[kept], (worst * n + rows)[kept]
        fresh = [
            {
                "prompt": batch.texts[int(b)],
                "chosen": out.tokens[p][out.mask[p]].tolist(),
                "rejected": out.tokens[q][out.mask[q]].tolist(),
            }
            for b, p, q in zip(rows[kept], pos, neg, strict=True)
        ]
        replayed = self.draw_replay(len(fresh), step, batch.rows)
        self.buffer.extendleft(reversed(fresh))
        pairs = fresh + replayed
        anchor = None  # online: π_t is the policy at the start of the step itself
        if cfg.iteration_steps and pairs:  # batched: π_t is frozen for the iteration
            with torch.no_grad():
                anchor = self.logp_gaps(pairs)
        return {
            "group": group,
            "win": win,
            "kept": kept,
            "pos": pos,
            "neg": neg,
            "pairs": pairs,
            "replayed": len(replayed),
            "anchor": anchor,
            "seconds": (t1 - t0, t2 - t1),
        }

    def objective(self, prepared: Prepared) -> tuple[torch.Tensor, dict[str, float]]:
        cfg, policy, batch, data = self.config, self.trainer.policy, prepared.batch, prepared.data
        group = data["group"]
        out, ref_tokens = group.out, group.ref_tokens
        t2 = time.perf_counter()
        # 3. DPO against π_t on the fresh pairs and a seeded draw of replayed ones
        if data["pairs"]:
            gap = self.logp_gaps(data["pairs"])  # log π(y+) − log π(y−), with the gradient
            anchor = gap.detach() if data["anchor"] is None else data["anchor"]
            loss = -F.logsigmoid(cfg.eta * (gap - anchor)).mean()
        else:
            gap = torch.zeros(0)
            loss = policy.logprobs(batch.ids, batch.mask, out.tokens, out.mask).sum() * 0.0
        # forwards every process runs, before a non-finite judgement stops the step: the
        # exact KL of every completion, π's logits without gradient against μ's
        kl = group.exact_kl(policy, batch)
        if not torch.isfinite(data["win"]).all():
            raise NonFiniteError("judge preference")
        t3 = time.perf_counter()
        pos, neg = data["pos"], data["neg"]
        with torch.no_grad():
            sampled = (out.policy_logprobs - ref_tokens).sum(-1)
            lengths = out.lengths.float()
        sample_seconds, judge_seconds = data["seconds"]
        return loss, {
            "kept_fraction": float(data["kept"].float().mean()),
            "replayed": float(data["replayed"]),
            "logp_gap": float(gap.detach().mean()) if len(gap) else 0.0,
            "kl": float(kl.mean()),
            "kl_sampled": float(sampled.mean()),
            "length": float(lengths.mean()),
            "length_chosen": float(lengths[pos].mean()) if len(pos) else 0.0,
            "length_rejected": float(lengths[neg].mean()) if len(neg) else 0.0,
            "sample_seconds": sample_seconds,
            "judge_seconds": judge_seconds,
            "forward_seconds": t3 - t2,
        }

    def draw_replay(self, fresh: int, step: int, rows: list[int]) -> list[dict[str, Any]]:
        """At most ``replay`` × max(fresh, 1) earlier pairs, drawn without replacement, seeded
        by the step and the chunk (the same draw after a resume)."""
        want = min(len(self.buffer), int(self.config.replay * max(fresh, 1)))
        if want == 0:
            return []
        g = torch.Generator().manual_seed(self.config.seed * 7919 + step * 131 + rows[0])
        picks = torch.randperm(len(self.buffer), generator=g)[:want].tolist()
        return [self.buffer[i] for i in picks]

    def logp_gaps(self, pairs: list[dict[str, Any]]) -> torch.Tensor:
        """log π(y+) − log π(y−) of each pair, from one gradient forward."""
        policy = self.trainer.policy
        device = policy.device
        ids, mask = tokenize_prompts(policy.tokenizer, [p["prompt"] for p in pairs], device)
        pad = policy.tokenizer.pad_token_id or 0
        tokens, tmask = padded(
            [p["chosen"] for p in pairs] + [p["rejected"] for p in pairs], pad, device
        )
        logps = policy.logprobs(ids, mask, tokens, tmask).sum(-1)
        m = len(pairs)
        return logps[:m] - logps[m:]

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "buffer": list(self.buffer)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.buffer = deque(state.get("buffer", []), maxlen=self.config.buffer)


def run(config: Config) -> int:
    return train_and_report(config, DNO, "dno")

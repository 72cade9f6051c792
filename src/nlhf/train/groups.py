"""K completions per prompt, and their pairwise judgements: what SPPO, INPO and DNO start from.

    group = sample_group(trainer.policy, config, batch, step, k)   # one decode loop
    matrix = pairwise_matrix(judge, batch.texts, group.texts, k)   # (B, K, K) P(y_i ≻ y_j)

Rows are sample-major, as :func:`nlhf.models.sample` lays them out: completion i of prompt b
is row ``i·B + b``.  Each row has its own generator, seeded by (seed, step, prompt row,
sample), so a completion does not depend on how the prompts were batched.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations
from typing import Any

import torch

from nlhf.models import sample
from nlhf.models.sampling import row_generators
from nlhf.models.text import decode_completions


@dataclass
class CompletionGroup:
    """K completions of every prompt of a chunk: the sample (tokens, mask, lengths, log π of
    the policy that sampled them), per-token log π_ref, the decoded texts, and, when asked
    for, π_ref's logits (K·B, T, V) for the exact KL (:meth:`take_ref_logits`)."""

    out: Any
    ref_tokens: torch.Tensor
    texts: list[str]
    ref_logits: torch.Tensor | None = None

    def take_ref_logits(self, policy: Any, batch: Any) -> torch.Tensor:
        """π_ref's logits of the completions: the kept ones, handed over once (the group keeps
        no reference to them), else from a fresh no-gradient forward."""
        logits, self.ref_logits = self.ref_logits, None
        if logits is None:
            _, logits = policy.reference_logprobs_and_logits(
                batch.ids, batch.mask, self.out.tokens, self.out.mask
            )
        return logits

    @torch.no_grad()
    def exact_kl(self, policy: Any, batch: Any) -> torch.Tensor:
        """Each completion's exact KL(π‖μ) (K·B,): a no-gradient forward of π against μ's
        logits (:meth:`take_ref_logits`), for trainers whose gradient forward covers only
        some of the completions."""
        ref_logits = self.take_ref_logits(policy, batch)
        return policy.logprobs_and_kl(
            batch.ids, batch.mask, self.out.tokens, self.out.mask, ref_logits
        )[1]


def sample_group(
    policy: Any, config: Any, batch: Any, step: int, k: int, keep_logits: bool = False
) -> CompletionGroup:
    """K completions per prompt of ``batch`` from one decode loop, with their reference
    log-probs from one no-gradient forward (``config``: max_new_tokens, temperature, seed);
    ``keep_logits``: the group also keeps that forward's logits."""
    generators = [g for s in range(k) for g in row_generators(config.seed, step, batch.rows, s)]
    out = sample(
        policy,
        batch.ids,
        batch.mask,
        config.max_new_tokens,
        temperature=config.temperature,
        generator=generators,
        num_samples=k,
    )
    ref_tokens, ref_logits = policy.reference_logprobs_and_logits(
        batch.ids, batch.mask, out.tokens, out.mask
    )
    texts = decode_completions(policy.tokenizer, out.tokens, out.mask)
    return CompletionGroup(out, ref_tokens, texts, ref_logits if keep_logits else None)


def pairwise_matrix(judge: Any, prompts: list[str], texts: list[str], k: int) -> torch.Tensor:
    """(B, K, K) P(y_i ≻ y_j | x) for B prompts with K completions each (``texts``
    sample-major), every pair from one judge call."""
    n = len(prompts)
    pairs = list(combinations(range(k), 2))
    a = [texts[i * n + b] for i, _ in pairs for b in range(n)]
    c = [texts[j * n + b] for _, j in pairs for b in range(n)]
    p = judge(prompts * len(pairs), a, c).float().reshape(len(pairs), n)
    matrix = torch.full((n, k, k), 0.5)
    for index, (i, j) in enumerate(pairs):
        matrix[:, i, j], matrix[:, j, i] = p[index], 1.0 - p[index]
    return matrix

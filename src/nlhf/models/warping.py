"""Turning a next-token log-distribution into a sample: temperature, top-k, top-p, noise.

Pure tensor functions, used by the decode loop in :mod:`nlhf.models.sampling`:

    from nlhf.models.warping import SamplingSettings, warp, draw_noise, pick
    logp = warp(logp, SamplingSettings(temperature=0.7, top_k=50, top_p=0.95))
    tokens = pick(logp, draw_noise((rows, V), generator))

Sampling is the Gumbel-max trick: with independent ``G_v = −log(−log U_v)``, U_v uniform on
(0, 1), ``argmax_v log p_v + G_v`` is distributed as ``p``.  Drawing the noise
explicitly, instead of calling ``torch.multinomial``, makes a sample a deterministic function
of the noise, so a fixed generator reproduces it and one generator per prompt makes a row's
sample independent of the other rows in the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingSettings:
    """How a next-token distribution is reshaped before a token is drawn from it."""

    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None

    def __post_init__(self) -> None:
        if not self.temperature > 0.0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k is not None and self.top_k < 1:
            raise ValueError(f"top_k must be ≥ 1 or None, got {self.top_k}")
        if self.top_p is not None and not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1] or None, got {self.top_p}")

    @property
    def is_identity(self) -> bool:
        """True when :func:`warp` leaves a distribution unchanged."""
        return (
            self.temperature == 1.0
            and self.top_k is None
            and (self.top_p is None or self.top_p >= 1.0)
        )


def warp(logp: torch.Tensor, settings: SamplingSettings) -> torch.Tensor:
    """Apply temperature, then top-k, then top-p to log-probabilities over the last axis.

    Returns normalized fp32 log-probabilities; filtered tokens get -inf.  Top-p keeps the
    smallest set of most likely tokens whose probability reaches ``top_p`` (at least one).
    """
    logp = logp.float()
    if settings.is_identity:
        return logp
    if settings.temperature != 1.0:
        logp = torch.log_softmax(logp / settings.temperature, dim=-1)
    if settings.top_k is not None and settings.top_k < logp.shape[-1]:
        kth = torch.topk(logp, settings.top_k, dim=-1).values[..., -1:]
        logp = logp.masked_fill(logp < kth, float("-inf"))
    if settings.top_p is not None and settings.top_p < 1.0:
        sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
        probs = torch.softmax(sorted_logp, dim=-1)
        mass_before = torch.cumsum(probs, dim=-1) - probs
        drop_sorted = mass_before >= settings.top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logp = logp.masked_fill(drop, float("-inf"))
    return torch.log_softmax(logp, dim=-1)


def draw_noise(
    shape: tuple[int, int],
    generator: torch.Generator | Sequence[torch.Generator] | None,
    device: torch.device | str = "cpu",
) -> torch.Tensor:
    """Gumbel(0, 1) noise of ``shape`` (rows, V) for :func:`pick`, in fp32 on ``device``.

    ``generator`` is ``None`` (torch's global generator), one ``torch.Generator`` for the whole
    block, or a sequence of generators, one per row (each draws its own row, so a row's
    noise does not depend on the other rows).
    """
    rows, vocab = shape
    if generator is None or isinstance(generator, torch.Generator):
        gen_device = generator.device if generator is not None else torch.device(device)
        uniform = torch.rand(shape, generator=generator, device=gen_device)
    else:
        gens = list(generator)
        if len(gens) != rows:
            raise ValueError(f"{len(gens)} generators given for {rows} rows (one per row)")
        uniform = torch.cat(
            [torch.rand((1, vocab), generator=gen, device=gen.device) for gen in gens]
        )
    # u = 0 has probability ~2⁻²⁴ per draw: clamp it so that −log(−log u) stays finite.
    uniform = uniform.to(device).clamp_(min=torch.finfo(torch.float32).tiny)
    return uniform.log_().neg_().log_().neg_()


def pick(logp: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
    """The token ``argmax(logp + noise)`` per row: with Gumbel noise, a draw from softmax(logp)."""
    return torch.argmax(logp + noise, dim=-1)

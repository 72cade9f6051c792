"""Hypothesis strategies for preference games: random P (P + Pᵀ = 1), positive μ, τ, η."""

import numpy as np
from hypothesis import strategies as st

from nlhf.tabular.games import random_intransitive


@st.composite
def games(draw, min_n: int = 2, max_n: int = 8):
    """(P, mu): an intransitive preference matrix and a strictly positive reference policy."""
    n = draw(st.integers(min_n, max_n))
    seed = draw(st.integers(0, 2**31 - 1))
    scale = draw(st.sampled_from([0.3, 1.0, 3.0, 10.0]))
    P = random_intransitive(n, seed=seed, scale=scale)
    rng = np.random.default_rng(seed + 7)
    mu = rng.dirichlet(np.full(n, draw(st.sampled_from([0.5, 1.0, 5.0])))) + 1e-4
    return P, mu / mu.sum()


taus = st.sampled_from([0.01, 0.05, 0.1, 0.3, 1.0, 2.0])

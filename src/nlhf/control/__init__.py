"""Preference-based control: the RLHF and NLHF routes for agents that act in gymnasium games.

    pip install 'nlhf[control]'          # gymnasium + ale-py (GPL-2.0, ROMs bundled)
    nlhf control demo                    # both routes from the same labels on CartPole
    nlhf control train nlhf --env CartPole-v1 --labeler oracle

The pieces, each in its own module: environments and their features (``envs``), fixed-length
segments of trajectories (``segments``), labelers that compare two segments (``labelers``;
people: ``human``), reward and preference models over segments, acting policies, vectorized
rollouts, PPO and Nash-MD-PG on the one training core (``trainer``), the labelling schedule
(``labelling``) and the two routes that join them (``routes``).  The optional dependencies
are imported on first use only; ``require()`` names the extra to install when they are
missing.  Reference: ``docs/control.md``.
"""

from __future__ import annotations

import importlib

from nlhf.errors import UserError

EXTRA = "pip install 'nlhf[control]'"


class ControlMissing(UserError, ImportError):
    """gymnasium (or ale-py for Atari) is not installed."""


def require(module: str = "gymnasium"):
    """Import and return ``module`` (gymnasium, ale_py, minatar), or a one-line error saying
    which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        extra = "pip install minatar" if module.startswith("minatar") else EXTRA
        raise ControlMissing(f"{module} is not installed: {extra}") from exc

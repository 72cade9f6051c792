"""Shared test settings: deterministic hypothesis profile, CI-sized."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "nlhf",
    max_examples=60 if os.environ.get("CI") else 40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("nlhf")

"""Shared test settings: a deterministic hypothesis profile, an environment that does not depend
on where the suite was started, and a check that the suite leaves the system temp folder as it
found it.

- Hypothesis: profile ``nlhf`` (40 examples), ``nlhf-ci`` (60) when ``CI`` is set; the header
  of every run names the one in use, so a CI failure is reproduced with ``CI=1``.
- Launch variables (``WORLD_SIZE``, ``MASTER_ADDR``, ``ACCELERATE_*``, …) inherited from a
  torchrun or accelerate job are removed: with them an in-process trainer would wait for peer
  processes that never come.  The tests that launch several processes set their own.
- Temp folder: at the end of the session, every new entry in ``tempfile.gettempdir()`` fails
  the run, listed in the summary.  pytest's own ``pytest-of-<user>`` (the base of ``tmp_path``,
  which pytest prunes to its last 3 runs, and where launched children keep their temp files:
  ``tests/children.py``) is not counted.  Other programs writing there at the same time are
  counted too: on a shared machine start pytest with ``TMPDIR`` set to an empty folder of its
  own.  torch's compile cache, which every process importing ``torch._dynamo`` (transformers
  does) creates as ``$TMPDIR/torchinductor_<user>``, goes to ``<basetemp>/torchinductor``
  unless ``TORCHINDUCTOR_CACHE_DIR`` is set already.
"""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

for _name, _examples in (("nlhf", 40), ("nlhf-ci", 60)):
    settings.register_profile(
        _name,
        max_examples=_examples,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )
PROFILE = "nlhf-ci" if os.environ.get("CI") else "nlhf"
settings.load_profile(PROFILE)

LAUNCH_VARIABLES = (
    "WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
    "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
)  # fmt: skip
LAUNCH_PREFIXES = ("ACCELERATE_", "TORCHELASTIC_")

TEMP = Path(tempfile.gettempdir())  # read (and cached by tempfile) before any test runs
_before: set[str] = set()
_left: list[str] = []


def pytest_report_header(config):
    return f"hypothesis profile: {PROFILE} (CI={os.environ.get('CI', '')!r}); temp folder: {TEMP}"


def pytest_sessionstart(session):
    for name in [n for n in os.environ if n in LAUNCH_VARIABLES or n.startswith(LAUNCH_PREFIXES)]:
        del os.environ[name]
    _before.update(os.listdir(TEMP))
    factory = getattr(session.config, "_tmp_path_factory", None)  # pytest's, behind tmp_path
    if factory is not None and "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
        # read when torch._dynamo is first imported: after this, at collection or later
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(factory.getbasetemp() / "torchinductor")


def _pytest_own(config) -> set[str]:
    """The entry of the temp folder that holds pytest's ``tmp_path`` base: ``pytest-of-<user>``
    (or a ``--basetemp`` inside the temp folder)."""
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is None:
        return set()
    base, root = factory.getbasetemp().resolve(), TEMP.resolve()
    return {base.relative_to(root).parts[0]} if base.is_relative_to(root) else set()


def pytest_sessionfinish(session, exitstatus):
    left = set(os.listdir(TEMP)) - _before - _pytest_own(session.config)
    _left[:] = sorted(left)
    if _left and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _left:
        terminalreporter.section("left in the temp folder", sep="=", red=True, bold=True)
        terminalreporter.line(f"the tests left {len(_left)} new entries in {TEMP} (a failed run):")
        for name in _left:
            terminalreporter.line(f"  {TEMP / name}")
        terminalreporter.line(
            "a launched process keeps its temp files in its test's folder with "
            "env=children.env(tmp_path) (tests/children.py); an in-process test uses tmp_path"
        )

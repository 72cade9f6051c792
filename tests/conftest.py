"""Shared test settings: a deterministic hypothesis profile, an environment that does not depend
on where the suite was started, and a check that the suite leaves the system temp folder as it
found it.

- Hypothesis: profile ``nlhf`` (40 examples), ``nlhf-ci`` (60) when ``CI`` is set; the header
  of every run names the one in use, so a CI failure is reproduced with ``CI=1``.
- Launch variables (``WORLD_SIZE``, ``MASTER_ADDR``, ``ACCELERATE_*``, …) inherited from a
  torchrun or accelerate job are removed: with them an in-process trainer would wait for peer
  processes that never come.  The tests that launch several processes set their own.
- Temp folder: the session's ``TMPDIR`` (and ``tempfile.tempdir``) is ``<basetemp>/temp``,
  inside pytest's own base of ``tmp_path`` (which pytest prunes to its last 3 runs); launched
  children keep theirs in their test's folder (``tests/children.py``).  Whatever is still in
  ``<basetemp>/temp`` at the end was left by the suite, so the run fails and lists it;
  programs outside the suite writing to the system temp folder meanwhile do not count.
  torch's compile cache, which every process importing ``torch._dynamo`` (transformers does)
  creates as ``$TMPDIR/torchinductor_<user>``, goes to ``<basetemp>/torchinductor`` unless
  ``TORCHINDUCTOR_CACHE_DIR`` is set already.
- bf16: ``NLHF_CPU_BF16=0``, so ``dtype=auto`` and ``reference_dtype=auto`` mean float32 on
  every CPU (with or without AVX-512 BF16 or AMX) and the expected numbers hold anywhere; the
  bf16 paths are tested by name.
- Workers: under ``pytest -n N`` (pytest-xdist, as ``make test`` runs) each worker and what it
  launches use one torch/OpenMP thread, so N workers share the cores instead of fighting over
  them; a plain ``pytest`` keeps torch's default.  No test depends on which.
- Order: the modules with the most slow tests run first (a stable sort; a module's own order is
  kept).  ``make test`` hands whole modules to its two workers in this order
  (``--no-loadscope-reorder``), so no long module is left alone at the end.
"""

import os
import tempfile
from collections import Counter
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

_temp: list[Path] = []  # the session's temp folder (see the module docstring)
_left: list[str] = []


def pytest_report_header(config):
    return f"hypothesis profile: {PROFILE} (CI={os.environ.get('CI', '')!r})"


def pytest_sessionstart(session):
    for name in [n for n in os.environ if n in LAUNCH_VARIABLES or n.startswith(LAUNCH_PREFIXES)]:
        del os.environ[name]
    factory = getattr(session.config, "_tmp_path_factory", None)  # pytest's, behind tmp_path
    base = factory.getbasetemp() if factory is not None else Path(tempfile.mkdtemp())
    temp = base / "temp"
    temp.mkdir(parents=True, exist_ok=True)
    _temp[:] = [temp]
    # every temp file of the suite and of what it launches lands here, not in the system folder
    os.environ["TMPDIR"] = str(temp)
    tempfile.tempdir = str(temp)
    # read when torch._dynamo is first imported: after this, at collection or later
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(base / "torchinductor"))
    # dtype=auto means float32 on every CPU, so that no result depends on the machine's bf16
    os.environ["NLHF_CPU_BF16"] = "0"
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    def module(item):
        return item.nodeid.split("::")[0]

    slow = Counter(module(item) for item in items if item.get_closest_marker("slow"))
    items.sort(key=lambda item: -slow[module(item)])


def pytest_sessionfinish(session, exitstatus):
    _left[:] = sorted(os.listdir(_temp[0])) if _temp else []
    if _left and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if _left:
        terminalreporter.section("left in the temp folder", sep="=", red=True, bold=True)
        temp = _temp[0]
        terminalreporter.line(f"the tests left {len(_left)} entries in their temp folder {temp}:")
        for name in _left:
            terminalreporter.line(f"  {temp / name}")
        terminalreporter.line(
            "a launched process keeps its temp files in its test's folder with "
            "env=children.env(tmp_path) (tests/children.py); an in-process test uses tmp_path"
        )

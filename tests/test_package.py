"""The package as a newcomer gets it: a wheel built from the sources alone, installed into a
fresh virtualenv outside the repository, runs its commands and serves the labeling app.

The wheel is built with the test environment's setuptools (``--no-build-isolation``: no
network) from a copy of ``src/``, ``pyproject.toml`` and ``README.md``, then installed with
``--no-deps`` into a new virtualenv; its dependencies (torch and the rest) are this
environment's, reached through one ``.pth`` line, which adds them to ``sys.path`` after the
new site-packages without running this environment's editable install of nlhf.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a wheel build, a virtualenv and four commands: about 10 s


def run(*args: str | Path, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], str]:
    """(bin folder of the fresh virtualenv, its environment, the wheel build's output)."""
    tmp = tmp_path_factory.mktemp("package")
    source = tmp / "source"
    shutil.copytree(
        ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info")
    )
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env.update(NLHF_CACHE=str(tmp / "cache"), MPLBACKEND="Agg", PIP_DISABLE_PIP_VERSION_CHECK="1")
    pip = [sys.executable, "-m", "pip"]
    build = run(*pip, "wheel", "-v", "--no-deps", "--no-build-isolation", "-w", tmp / "dist",
                source, cwd=tmp, env=env)  # fmt: skip
    (wheel,) = (tmp / "dist").glob("nlhf-*.whl")
    venv = tmp / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env)
    python = venv / "bin" / "python"
    run(*pip, "--python", python, "install", "--no-deps", "--no-index", wheel, cwd=tmp, env=env)
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
               cwd=tmp, env=env).strip()  # fmt: skip
    (Path(site) / "outer-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv / "bin", env, build


def test_the_wheel_builds_without_a_warning(installed):
    _, _, build = installed
    assert not re.findall(r"\w+Warning\b.*", build)


def test_the_installed_command_runs_from_the_wheel_not_the_repository(installed, tmp_path):
    bin_, env, _ = installed
    where = run(bin_ / "python", "-c", "import nlhf; print(nlhf.__file__)", cwd=tmp_path, env=env)
    assert Path(where.strip()).is_relative_to(bin_.parent)
    assert run(bin_ / "nlhf", "--version", cwd=tmp_path, env=env).strip() == "nlhf 0.1.0"
    listing = run(bin_ / "nlhf", cwd=tmp_path, env=env)  # no arguments: the command list
    assert all(f"    {name}" in listing for name in ("demo", "train", "label", "tabular"))


def test_a_small_tabular_run(installed, tmp_path):
    bin_, env, _ = installed
    run(bin_ / "nlhf", "tabular", "--games", "cycle", "steps=200", "--out", "lab",
        cwd=tmp_path, env=env)  # fmt: skip
    assert "cycle" in (tmp_path / "lab" / "report.md").read_text()


def test_the_labeling_app_answers_its_login_page(installed, tmp_path):
    bin_, env, _ = installed
    (tmp_path / "tasks.jsonl").write_text(
        '{"prompt": "Say hi.", "response_a": "Hi!", "response_b": "Hello."}\n'
    )
    run(bin_ / "nlhf", "label", "add", "--db", "labels.sqlite", "--input", "tasks.jsonl",
        cwd=tmp_path, env=env)  # fmt: skip
    server = subprocess.Popen(
        [bin_ / "nlhf", "label", "serve", "--db", "labels.sqlite", "--port", "0"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        first = server.stdout.readline()  # "nlhf label: serving on http://127.0.0.1:PORT"
        url = re.search(r"http://127\.0\.0\.1:\d+", first)
        assert url, first
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url.group() + "/login", timeout=5) as response:
                    page = response.read().decode()
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None
                time.sleep(0.2)
        assert response.status == 200 and "<form" in page and "/static/app.css" in page
        with urllib.request.urlopen(url.group() + "/static/app.css", timeout=5) as response:
            assert response.status == 200 and response.read()
    finally:
        server.terminate()
        server.wait(timeout=30)

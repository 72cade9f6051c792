"""The documentation site (mkdocs.yml, docs/, scripts/docs_pages.py): it builds with
``--strict`` (no broken link or anchor, no page left out of the navigation), every command
has its generated reference page, and every ``nlhf …`` command shown in the docs and the
README names a command and options that exist.

    .venv/bin/python -m pytest -q tests/test_docs.py
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from nlhf.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))


def nav_pages(nav) -> set[str]:
    found = set()
    for item in nav:
        values = item.values() if isinstance(item, dict) else [item]
        for value in values:
            found |= nav_pages(value) if isinstance(value, list) else {value}
    return found


def test_every_page_of_docs_is_in_the_navigation():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert set(PAGES) <= nav_pages(config["nav"])


@pytest.mark.slow
def test_the_site_builds_strict_with_a_reference_page_per_command(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    assert "WARNING" not in built.stderr, built.stderr
    for name, command in COMMANDS.items():
        page = (site / "cli" / name / "index.html").read_text()
        for sub in getattr(command, "commands", {}):
            assert f"nlhf {name} {sub}" in page
    tabular = (site / "cli" / "tabular" / "index.html").read_text()
    assert "--games" in tabular and "--tau" in tabular
    assert (site / "api" / "tabular" / "index.html").read_text().count("solve_regularized_nash")


def shown_commands(text: str) -> list[str]:
    """Every one-line ``nlhf …`` command of a shell block, without its comment; lines with a
    placeholder (``[…]``, ``a|b``, ``...``, a continuation) are templates and left out."""
    lines = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("nlhf ") and not re.search(r"[\[|…\\]|\.\.\.", line):
                lines.append(line)
    return lines


def unknown_options(line: str) -> list[str]:
    tokens = shlex.split(line)[1:]
    try:
        args, extra = build_parser(tokens).parse_known_args(tokens)
    except SystemExit:
        return [f"{line}: not a command"]
    command = args._command
    fields = {f.name for f in dataclasses.fields(command.config_class(command.load()))}
    given = [*(getattr(args, "overrides", None) or []), *extra]
    return [f"{line}: {t}" for t in given if t.partition("=")[0].replace("-", "_") not in fields]


@pytest.mark.parametrize("page", ["README.md", *(f"docs/{p}" for p in PAGES)])
def test_the_commands_shown_name_real_options(page):
    wrong = [u for line in shown_commands((ROOT / page).read_text()) for u in unknown_options(line)]
    assert not wrong, "\n".join(wrong)

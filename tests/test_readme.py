"""README.md is a landing page: short, its Python example runs and prints what it shows, its
links lead somewhere, and its methods table names the file each command runs."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from nlhf.cli import COMMANDS

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_the_readme_is_short_with_short_sections_and_one_generated_block():
    assert len(README.splitlines()) <= 200
    sections = re.split(r"^## ", README, flags=re.M)[1:]
    assert sections and max(len(s.splitlines()) for s in sections) <= 35
    assert README.count("<!--") == 2


def test_the_python_example_prints_what_the_readme_shows():
    (code,) = re.findall(r"```python\n(.*?)```", README, re.S)
    shown = re.search(r"```python\n.*?```\s*prints\s*```text\n(.*?)```", README, re.S)
    assert shown and len(code.splitlines()) <= 12
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {})
    assert out.getvalue() == shown.group(1)


def anchors(page: Path) -> set[str]:
    """The anchors of a markdown page's headings, as GitHub and mkdocs make them."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_every_local_link_leads_to_a_file_and_heading():
    links = re.findall(r"\]\(([^)#]+)(?:#([^)]*))?\)", README)
    local = [(path, anchor) for path, anchor in links if not path.startswith("http")]
    assert len(local) > 20
    for path, anchor in local:
        assert (ROOT / path).is_file(), path
        assert not anchor or anchor in anchors(ROOT / path), f"{path}#{anchor}"


def test_the_methods_table_names_every_trainer_and_the_file_it_runs():
    rows = re.findall(r"^\| `(nlhf [^`]+)` \| .*? \| `([^`]+)` \|", README, re.M)
    assert {c for c, _ in rows} >= {f"nlhf train {name}" for name in COMMANDS["train"].commands}
    for command, path in rows:
        level, target = COMMANDS, None
        for word in command.split()[1:]:
            target = level[word]
            level = getattr(target, "commands", {})
        assert path == f"src/{target.module.replace('.', '/')}.py", command

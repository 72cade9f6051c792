"""The metrics a trainer documents, read from docs/trainers.md.

Each trainer has a section ``## nlhf train <name>`` whose ``### Logged metrics`` list items
each start with the backticked name of a metric (``- `win_rate`: mean P(y ≻ y′) …``).  Where
that section is missing, the names come from the "Logged metrics" paragraph of the trainer's
module docstring instead (every backticked name outside parentheses, which hold parameters).
"""

import importlib
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "trainers.md"
ITEM = re.compile(r"^\s*[-*]\s+((?:`[^`]+`(?:\s*(?:,|and|/)\s*)?)+)")
NAME = re.compile(r"`+([A-Za-z_][A-Za-z0-9_]*)`+")


def section(text: str, heading: str, level: int) -> str | None:
    """The body under the heading ``heading`` of ``level`` (#s), up to the next heading of
    that level or higher; None without one."""
    lines = text.splitlines()
    mark = "#" * level + " "
    for i, line in enumerate(lines):
        if line.strip() == mark + heading:
            end = next(
                (j for j in range(i + 1, len(lines)) if re.match(rf"#{{1,{level}}} ", lines[j])),
                len(lines),
            )
            return "\n".join(lines[i + 1 : end])
    return None


def metrics_in_markdown(text: str, name: str) -> set[str] | None:
    """The leading backticked names of the list items under ``## nlhf train <name>`` /
    ``### Logged metrics``; None where either heading is missing."""
    trainer = section(text, f"nlhf train {name}", 2)
    logged = section(trainer, "Logged metrics", 3) if trainer is not None else None
    if logged is None:
        return None
    names = set()
    for line in logged.splitlines():
        item = ITEM.match(line)
        if item:
            names.update(NAME.findall(item[1]))
    return names


def metrics_in_docstring(doc: str) -> set[str]:
    """The backticked names of the "Logged metrics" paragraph of a module docstring (with its
    bullet items), parenthesized remarks left out."""
    start = doc.find("Logged metrics")
    if start < 0:
        return set()
    paragraphs = re.split(r"\n\s*\n", doc[start:])
    text = paragraphs[0]
    for more in paragraphs[1:]:  # a list that follows the paragraph's colon
        if not more.lstrip().startswith("- "):
            break
        text += "\n" + more
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    return set(NAME.findall(text))


def logged_metrics(name: str, module: str) -> set[str]:
    """What ``nlhf train <name>`` documents it logs: docs/trainers.md, else the docstring of
    ``nlhf.train.<module>``.  Fails (never an empty set) when neither lists any."""
    names = metrics_in_markdown(DOC.read_text(encoding="utf-8"), name) if DOC.exists() else None
    where = f"{DOC} (## nlhf train {name} / ### Logged metrics)"
    if names is None:
        names = metrics_in_docstring(importlib.import_module(f"nlhf.train.{module}").__doc__ or "")
        where = f"the docstring of nlhf.train.{module}"
    assert names, f"no logged metrics documented in {where}"
    return names

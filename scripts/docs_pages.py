"""The generated pages of the documentation site: the CLI reference and the API reference.

    mkdocs build --strict            # (make docs) runs this file as a hook of mkdocs.yml

Nothing here is written into ``docs/``: the pages are made at every build, so they cannot
drift from the code.  ``cli/<command>.md`` has one page per entry of ``nlhf.cli.COMMANDS``
(a group's page holds all of its sub-commands), each option with its type, default and
help text read from the command's config dataclass, as ``--help`` prints them.
``api/<package>.md`` has one page per package of ``src/nlhf`` (the top-level modules share
``api/nlhf.md``), listing every module found on disk for mkdocstrings to render; a renamed
or new module appears without editing anything.  The hook also puts both sets of pages into
the navigation, under the ``CLI reference`` and ``API reference`` entries of mkdocs.yml.
"""

from __future__ import annotations

import dataclasses
import html
import inspect
import typing
from pathlib import Path

from mkdocs.structure.files import File

from nlhf.cli import COMMANDS
from nlhf.config import _type_label

SRC = Path(__file__).resolve().parents[1] / "src"


def _cell(text: str) -> str:
    return html.escape(" ".join(str(text).split()), quote=False).replace("|", "\\|")


def _default(field: dataclasses.Field) -> str:
    if field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    elif field.default is dataclasses.MISSING:
        return "required"
    else:
        value = field.default
    shown = ",".join(map(str, value)) if isinstance(value, list) else value
    return f"`{shown}`" if str(shown) else "`''`"


def command_section(name: str, command, level: str) -> list[str]:
    """One command: its help, its config's docstring and a table of its options."""
    config = command.config_class(command.load())
    doc = inspect.getdoc(config) or ""
    if doc.startswith(config.__name__ + "("):  # dataclass's own signature, not a docstring
        doc = ""
    hints = typing.get_type_hints(config)
    rows = [
        f"| `--{f.name.replace('_', '-')}` | `{_type_label(hints[f.name])}` | {_default(f)} "
        f"| {_cell(f.metadata['help'])} |"
        for f in dataclasses.fields(config)
        if f.init
    ]
    return [
        f"{level} {name}",
        "",
        _cell(command.help),
        "",
        *([doc, ""] if doc and doc != command.help else []),
        f"    {name} [--config FILE.yaml] [--option VALUE ...] [key=value ...]",
        "",
        "| option | type | default | help |",
        "|---|---|---|---|",
        *rows,
        "",
    ]


def sections(name: str, command, level: str) -> list[str]:
    """A command's section, or a group's heading and help, then its commands' sections."""
    if not hasattr(command, "commands"):
        return command_section(name, command, level)
    lines = [f"{level} {name}", "", _cell(command.help), ""]
    for sub, child in command.commands.items():
        lines += sections(f"{name} {sub}", child, level + "#")
    return lines


def cli_pages() -> dict[str, str]:
    """``cli/index.md`` (the command list) and one page per top-level command."""
    index = [
        "# Command line",
        "",
        "Every command is driven by one dataclass config: defaults, then a YAML file "
        "(`--config`), then `--option value` flags and `key=value` overrides. Lists are "
        "comma-separated. These pages are generated from the configs at every build.",
        "",
        "| command | what it does |",
        "|---|---|",
    ]
    pages = {}
    for name, command in COMMANDS.items():
        index.append(f"| [`nlhf {name}`]({name}.md) | {_cell(command.help)} |")
        pages[f"cli/{name}.md"] = "\n".join(sections(f"nlhf {name}", command, "#"))
    pages["cli/index.md"] = "\n".join(index) + "\n"
    return pages


def modules() -> dict[str, list[str]]:
    """Every module of ``src/nlhf`` by page: the top-level package's name or ``nlhf``."""
    pages: dict[str, list[str]] = {}
    for path in sorted((SRC / "nlhf").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts.pop()
        package = len(parts) > 2 or (SRC / "/".join(parts)).is_dir()
        page = parts[1] if package and len(parts) > 1 else "nlhf"
        pages.setdefault(page, []).append(".".join(parts))
    return dict(sorted(pages.items(), key=lambda item: (item[0] != "nlhf", item[0])))


def api_pages() -> dict[str, str]:
    index = ["# API reference", "", "Generated from the docstrings at every build.", ""]
    pages = {}
    for page, names in modules().items():
        title = "nlhf (top-level modules)" if page == "nlhf" else f"nlhf.{page}"
        index.append(f"- [{title}]({page}.md): " + ", ".join(f"`{n}`" for n in names))
        pages[f"api/{page}.md"] = "\n".join(
            [f"# {title}", "", *(f"::: {name}\n" for name in names)]
        )
    pages["api/index.md"] = "\n".join(index) + "\n"
    return pages


def on_config(config):
    """Fill the ``CLI reference`` and ``API reference`` entries of the navigation."""
    nav = {
        "CLI reference": ["cli/index.md", *(f"cli/{name}.md" for name in COMMANDS)],
        "API reference": ["api/index.md", *(f"api/{page}.md" for page in modules())],
    }
    for item in config.nav:
        if isinstance(item, dict):
            for key in item.keys() & nav.keys():
                item[key] = nav[key]
    return config


def on_files(files, config):
    for uri, text in {**cli_pages(), **api_pages()}.items():
        files.append(File.generated(config, uri, content=text))
    return files

"""The layer rules of docs/design.md, checked on every import of ``src/nlhf`` (function-local ones
included, relative ones resolved) by reading the source with ``ast``; nothing is imported.

    .venv/bin/python -m pytest -q tests/test_layers.py

A rule names a layer (a package or module of nlhf) and the modules it must never import;
a module may always import its own layer.  A failure lists each forbidden arrow as
``file:line: importer imports imported``.  Apart from the layers, no two modules may import
each other, directly or around a loop, when they are imported (imports in functions and
under ``if TYPE_CHECKING:`` left out): a cycle is broken by moving the shared piece down.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


@dataclass(frozen=True)
class Rule:
    layer: str
    forbidden: tuple[str, ...]
    why: str


BELOW_THE_COMMAND_LINE = (
    "losses",
    "tabular",
    "data",
    "models",
    "train",
    "control",
    "eval",
    "label",
    "judge",
    "experiment",
)

RULES = (
    Rule("nlhf.losses", ("nlhf",), "losses are pure tensor functions"),
    Rule("nlhf.tabular", ("torch", "nlhf.models", "nlhf.train"), "the tabular lab is numpy only"),
    Rule("nlhf.models", ("nlhf.train",), "models know nothing of training"),
    Rule("nlhf.data", ("nlhf.train", "nlhf.models"), "data knows no models and no training"),
    Rule("nlhf.eval", ("nlhf.train",), "evaluation never imports training"),
    Rule("nlhf.label", ("nlhf.train",), "labeling never imports training"),
    Rule("nlhf.judge", ("nlhf.train", "nlhf.label"), "judges stand apart from training, labels"),
    *(
        Rule(f"nlhf.{layer}", ("nlhf.experiment", "nlhf.demo"), "experiments sit on top")
        for layer in ("losses", "tabular", "data", "models", "train", "control", "eval", "label")
    ),
    *(
        Rule(f"nlhf.{layer}", ("nlhf.cli",), "only the command line imports the command line")
        for layer in BELOW_THE_COMMAND_LINE
    ),
)


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def module_name(path: Path, src: Path) -> str:
    parts = list(path.relative_to(src).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(path: Path, module: str) -> list[tuple[int, str, tuple[str, ...]]]:
    """(line, module, names) of every import statement in the file: ``import a, b`` gives
    ("", (a, b)), ``from X import y, z`` gives (X, (X.y, X.z)) since y may be a submodule;
    relative imports are resolved against ``module``'s package."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [names_of(node, package) for node in ast.walk(tree) if is_import(node)]


def is_import(node: ast.AST) -> bool:
    return isinstance(node, ast.Import | ast.ImportFrom)


def names_of(node: ast.Import | ast.ImportFrom, package: str) -> tuple[int, str, tuple[str, ...]]:
    if isinstance(node, ast.Import):
        return node.lineno, "", tuple(alias.name for alias in node.names)
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        anchor = parts[: len(parts) - (node.level - 1)]
        base = ".".join([*anchor, *([node.module] if node.module else [])])
    return node.lineno, base, tuple(f"{base}.{a.name}" for a in node.names)


def violations(src: Path, rules: tuple[Rule, ...] = RULES) -> list[str]:
    """Every forbidden arrow under ``src/nlhf``, as ``file:line: importer imports name (why)``;
    ``src`` is the folder that holds the ``nlhf`` package."""
    broken = []
    for path in sorted((src / "nlhf").rglob("*.py")):
        module = module_name(path, src)
        statements = imported_names(path, module)
        for rule in rules:
            if not within(module, rule.layer):
                continue

            def forbidden(name: str, rule: Rule = rule) -> bool:
                return not within(name, rule.layer) and any(within(name, f) for f in rule.forbidden)

            for line, base, names in statements:
                bad = [base] if base and forbidden(base) else [n for n in names if forbidden(n)]
                where = f"{path.relative_to(src.parent)}:{line}"
                broken += [f"{where}: {module} imports {name} ({rule.why})" for name in bad]
    return sorted(set(broken))


def runtime_imports(src: Path) -> dict[str, set[str]]:
    """Each module of ``src/nlhf`` → the modules of nlhf that importing it imports: statements
    at module level (in ``if``, ``try`` and ``with`` blocks too, not under ``if TYPE_CHECKING:``);
    ``from package import name`` points at the module ``package.name`` where there is one."""
    paths = {module_name(path, src): path for path in (src / "nlhf").rglob("*.py")}
    graph = {}
    for module, path in paths.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        graph[module] = set()
        todo = list(ast.parse(path.read_text(encoding="utf-8")).body)
        while todo:
            node = todo.pop()
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                todo += node.orelse
            elif isinstance(node, ast.If | ast.With):
                todo += [*node.body, *getattr(node, "orelse", [])]
            elif isinstance(node, ast.Try):
                todo += [*node.body, *node.orelse, *node.finalbody]
                todo += [statement for handler in node.handlers for statement in handler.body]
            elif is_import(node):
                _, base, names = names_of(node, package)
                targets = [name if name in paths else base for name in names] if base else names
                graph[module] |= {name for name in targets if name in paths} - {module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of ``graph`` with more than one module, sorted."""
    reach = {}
    for start in graph:
        reach[start], todo = set(), [start]
        while todo:
            new = graph[todo.pop()] - reach[start]
            reach[start] |= new
            todo += new
    found = {tuple(sorted(m for m in reach[s] if s in reach[m])) for s in graph if s in reach[s]}
    return sorted(found)


def test_no_two_modules_import_each_other_when_imported():
    cycles = import_cycles(runtime_imports(SRC))
    assert not cycles, "\n".join(" -> ".join(cycle) for cycle in cycles)


def test_the_cycle_scan_sees_module_level_imports_only(tmp_path):
    src = write(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from nlhf import b, d\nfrom nlhf.e import late\n",
            "b.py": "try:\n    import nlhf.c\nexcept ImportError:\n    pass\n",
            "c.py": "from .a import x\n",  # a -> b -> c -> a
            "d.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from nlhf import a\n",
            "e.py": "def late():\n    import nlhf.a\n",
        },
    )
    assert import_cycles(runtime_imports(src)) == [("nlhf.a", "nlhf.b", "nlhf.c")]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: f"{r.layer}-{'-'.join(r.forbidden)}")
def test_no_forbidden_import(rule):
    broken = violations(SRC, (rule,))
    assert not broken, "\n".join(broken)


def test_the_scan_sees_the_package():
    modules = {module_name(p, SRC) for p in (SRC / "nlhf").rglob("*.py")}
    assert {"nlhf.losses", "nlhf.models.sampling", "nlhf.eval.cli"} <= modules
    bases = {base for _, base, _ in imported_names(SRC / "nlhf/models/sampling.py", "")}
    assert "nlhf.models.lm" in bases


def write(root: Path, files: dict[str, str]) -> Path:
    """A package tree ``root/src/nlhf/...``; returns ``root/src``."""
    for name, text in files.items():
        path = root / "src" / "nlhf" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "src"


def test_the_checker_reports_forbidden_imports(tmp_path):
    src = write(
        tmp_path,
        {
            "__init__.py": "",
            "cli.py": "import nlhf.train.online\n",  # the command line may import anything
            "losses.py": "import torch\n\n\ndef f():\n    import nlhf.models.lm\n",
            "tabular/__init__.py": "",
            "tabular/games.py": "import numpy\nfrom torch import nn\n",
            "models/__init__.py": "",
            "models/policy.py": "from nlhf.data import prompts\nfrom . import text\n",
            "models/text.py": "",
            "data/__init__.py": "",
            "data/prompts.py": "from ..models import text\nfrom . import chat\n",
            "data/chat.py": "",
            "eval/__init__.py": "from nlhf import cli\n",
            "eval/rollouts.py": (
                "def sample():\n    from nlhf.train.online import row_generators\n"
            ),
            "label/sub/__init__.py": "",
            "label/sub/gen.py": "from ... import train, data\n",
        },
    )
    found = [line.split(" (")[0] for line in violations(src)]
    assert found == [
        "src/nlhf/data/prompts.py:1: nlhf.data.prompts imports nlhf.models",
        "src/nlhf/eval/__init__.py:1: nlhf.eval imports nlhf.cli",
        "src/nlhf/eval/rollouts.py:2: nlhf.eval.rollouts imports nlhf.train.online",
        "src/nlhf/label/sub/gen.py:1: nlhf.label.sub.gen imports nlhf.train",
        "src/nlhf/losses.py:5: nlhf.losses imports nlhf.models.lm",
        "src/nlhf/tabular/games.py:2: nlhf.tabular.games imports torch",
    ]

"""A run folder of resumable stages, shared by ``nlhf demo`` and ``nlhf experiment``.

    log = StageLog(root / "stages.json", "demo")
    log.run("judges", lambda: train_judges(...))      # skipped when an earlier run finished it
    start_or_resume(options, root / "config.yaml", "demo")
    command = command_line(["nlhf", "demo"], config, Config(), FREE_ON_RESUME)

A new run writes its resolved options to ``config.yaml``; the same command again resumes it
(finished stages skipped) and refuses options that differ from those it started with, except
the ones ``free`` names (``out``, ``progress``).  ``command_line`` is the shortest command that
runs or resumes a resolved config: the options that differ from the preset and the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from nlhf.config import ConfigError, load_yaml
from nlhf.files import atomic_write_json, atomic_write_text

FREE_ON_RESUME = frozenset({"out", "progress"})
"""Options that may change between an interrupted run and its resumption."""


class StageLog:
    """The finished stages of a run (``stages.json``)."""

    def __init__(self, path: Path, tag: str) -> None:
        self.path, self.tag = path, tag
        self.done: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def run(self, name: str, work: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        """Run ``work`` unless ``name`` is recorded as finished; record it and its seconds."""
        if name in self.done:
            print(f"[{self.tag}] {name}: done in an earlier run, skipped")
            return self.done[name]
        print(f"[{self.tag}] {name} …")
        start = time.perf_counter()
        info = work() or {}
        self.done[name] = {"seconds": time.perf_counter() - start, **info}
        atomic_write_json(self.path, self.done)
        return self.done[name]


def start_or_resume(
    options: dict[str, Any], saved: Path, tag: str, free: Iterable[str] = FREE_ON_RESUME
) -> None:
    """Write ``options`` to ``saved`` for a new run; check them against it for a resumed run."""
    import yaml

    free = set(free)
    if saved.exists():
        before = load_yaml(saved)
        changed = [
            f"{key}: {before.get(key)!r} then, {options[key]!r} now"
            for key in options
            if key not in free and before.get(key) != options[key]
        ]
        if changed:
            raise ConfigError(
                f"{saved}: this run was started with other options; resume it with the same "
                f"ones or choose another --out ({'; '.join(changed)})"
            )
        print(f"[{tag}] resuming {saved.parent}")
        return
    saved.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, yaml.safe_dump(options, sort_keys=False, allow_unicode=True))


def check_models(config: Any) -> None:
    """Stop before the first stage when ``config.policy`` or ``config.encoder`` is a path that
    does not exist (the embedded keywords are located when a stage needs them)."""
    from nlhf.assets import KEYWORDS, resolve_model

    for value, role in ((config.policy, "policy"), (config.encoder, "encoder")):
        if value.strip().lower() not in KEYWORDS[role]:
            resolve_model(value, role)


def command_line(
    prefix: list[str], config: Any, defaults: Any, free: Iterable[str] = FREE_ON_RESUME
) -> str:
    """The shortest command that runs (or resumes) the resolved ``config``: the options that
    differ from its preset (``config.preset``) and from ``defaults`` (resolved the same way)."""
    free = set(free)
    preset = dataclasses.asdict(config.preset)
    args = list(prefix)
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        default = preset.get(field.name, getattr(defaults, field.name))
        if field.name in free or value == default:
            continue
        if isinstance(value, bool):
            args.append(f"--{'' if value else 'no-'}{field.name.replace('_', '-')}")
        else:
            args.append(f"{field.name}={value}")
    return shlex.join([*args, "--out", config.out])

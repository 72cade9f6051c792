"""A command made of resumable stages and a report: the layer under ``nlhf demo`` and
``nlhf experiment``.

    RUN = Run(("nlhf", "demo"), Config, RunFolder, stages, report)
    RUN.run(config)           # resolve the options, start or resume, every stage, report.md

An experiment is its options (a dataclass with :class:`Presets`: its :func:`preset_option`s
left at ``None`` take the value of the preset ``--quick`` picks), its :class:`RunFolder`, its
stages (name → work, in order) and its report (:class:`nlhf.reporting.Report`, built from the
folder).  A new run writes its resolved options to ``config.yaml``; the same command resumes
it: stages recorded in ``stages.json`` (after their own outputs, so "recorded" implies
"complete") are skipped, and options that differ from those it started with are refused,
except ``out`` and ``progress``.  Ctrl-C stops it with the command that continues it.  The
stages that language-model runs share are in :mod:`nlhf.lm_stages`.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml

from nlhf.assets import KEYWORDS, resolve_model
from nlhf.config import Checked, ConfigError, load_yaml, to_dict
from nlhf.files import atomic_write_json, atomic_write_text, check_folder_option
from nlhf.machine import machine
from nlhf.models.policy import resolve_dtype

FREE_ON_RESUME = frozenset({"out", "progress"})
"""Options that may change between an interrupted run and its resumption."""

Stages = dict[str, Callable[[], dict[str, Any] | None]]
"""A run's stages in order: name → work, whose dict is recorded beside its seconds."""


def preset_option(help: str, **values: Any) -> Any:
    """A run's option that its preset sets: left at ``None`` it takes ``values[preset]`` (the
    values are listed in its help: ``preset_option("steps", default=34, quick=8)``)."""
    shown = "; ".join(f"{name} {value:g}" for name, value in values.items())
    return dataclasses.field(
        default=None, metadata={"help": f"{help} ({shown})", "presets": values}
    )


class Presets(Checked):
    """Config mixin of a run: each :func:`preset_option` left at ``None`` takes the value of
    the preset that ``quick`` picks; the run folder ``out`` must be a folder."""

    out: str
    quick: bool

    @property
    def preset(self) -> dict[str, Any]:
        name = "quick" if self.quick else "default"
        return {
            f.name: f.metadata["presets"][name]
            for f in dataclasses.fields(self)
            if "presets" in f.metadata
        }

    def check(self) -> None:
        for name in self.preset:
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        if self.out:
            check_folder_option("out", self.out)


def resolved(config: Any) -> Any:
    """``config`` with every option left at ``None`` set to the preset's value and the
    ``auto`` dtype decided: what the stages read and the report prints."""
    chosen = {k: v for k, v in config.preset.items() if getattr(config, k) is None}
    return dataclasses.replace(config, dtype=resolve_dtype(config.dtype), **chosen)


@dataclass(frozen=True)
class RunFolder:
    """Where the files every run has live; an experiment's subclass adds its own."""

    root: Path

    config = property(lambda self: self.root / "config.yaml")
    stages = property(lambda self: self.root / "stages.json")
    report = property(lambda self: self.root / "report.md")
    train_prompts = property(lambda self: self.root / "data" / "train_prompts.jsonl")
    eval_prompts = property(lambda self: self.root / "data" / "eval_prompts.jsonl")
    tournament = property(lambda self: self.root / "tournament")

    def judge(self, kind: str) -> Path:
        return self.root / "judges" / kind

    def policy(self, name: str) -> Path:
        return self.root / "policies" / name

    def finished(self) -> dict[str, dict[str, Any]]:
        """The stages recorded as finished, each with its seconds and what it returned."""
        return json.loads(self.stages.read_text()) if self.stages.exists() else {}


class StageLog:
    """The finished stages of a run (``stages.json``): each with its seconds, the machine's
    speed measured before it (:func:`nlhf.machine.machine`) and what it returned."""

    def __init__(self, path: Path, tag: str) -> None:
        self.path, self.tag = path, tag
        self.done: dict[str, dict[str, Any]] = json.loads(path.read_text()) if path.exists() else {}

    def run(self, name: str, work: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
        """Run ``work`` unless ``name`` is recorded as finished; record it and its seconds."""
        if name in self.done:
            print(f"[{self.tag}] {name}: done in an earlier run, skipped")
            return self.done[name]
        print(f"[{self.tag}] {name} …")
        speed = machine()  # the machine's pace at the stage's start, for the report
        start = time.perf_counter()
        info = work() or {}
        self.done[name] = {"seconds": time.perf_counter() - start, **speed, **info}
        atomic_write_json(self.path, self.done)
        return self.done[name]


def start_or_resume(
    options: dict[str, Any], saved: Path, tag: str, defaults: dict[str, Any] | None = None
) -> None:
    """Write ``options`` to ``saved`` for a new run; check them against it for a resumed run.
    An option that ``saved`` lacks (one added since the run started) counts as unchanged
    while it holds its value in ``defaults``."""
    if saved.exists():
        before = load_yaml(saved)
        defaults = defaults or {}
        then = {key: before.get(key, defaults.get(key)) for key in options}
        changed = [
            f"{key}: {then[key]!r} then, {options[key]!r} now"
            for key in options
            if key not in FREE_ON_RESUME and then[key] != options[key]
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
    for value, role in ((config.policy, "policy"), (config.encoder, "encoder")):
        if value.strip().lower() not in KEYWORDS[role]:
            resolve_model(value, role)


@dataclass(frozen=True)
class Run:
    """A command of resumable stages: ``nlhf <command>`` logs as ``[command[1]]`` and starts
    in ``runs/<last word of the command>-<date>-<time>`` when ``--out`` is not given."""

    command: tuple[str, ...]
    config: type
    folder: type[RunFolder]
    stages: Callable[[Any, Any], Stages]
    """The stages of a resolved config and its folder."""
    report: Callable[[Any, Any], Any]
    """The :class:`nlhf.reporting.Report` of a finished run."""
    options: Callable[[Any], dict[str, Any]] = to_dict
    """What ``config.yaml`` holds."""

    @property
    def tag(self) -> str:
        return self.command[1]

    def run(self, config: Any) -> int:
        out = config.out or time.strftime(f"runs/{self.command[-1]}-%Y%m%d-%H%M%S")
        config = resolved(dataclasses.replace(config, out=out))
        layout = self.folder(Path(config.out))
        check_models(config)  # before the judges train, not when the policy loads
        fresh = resolved(dataclasses.replace(self.config(), quick=config.quick, out=out))
        start_or_resume(self.options(config), layout.config, self.tag, self.options(fresh))
        resume = self.command_line(config)
        torch.manual_seed(config.seed)
        log = StageLog(layout.stages, self.tag)
        try:
            for name, work in self.stages(config, layout).items():
                log.run(name, work)
        except KeyboardInterrupt:
            print(f"\n[{self.tag}] interrupted; continue where it stopped with:\n  {resume}")
            return 130
        text = self.report(config, layout).markdown(resume, layout)
        print(f"[{self.tag}] report: {atomic_write_text(layout.report, text)}")
        return 0

    def command_line(self, config: Any) -> str:
        """The shortest command that runs (or resumes) the resolved ``config``: the options
        that differ from its preset and from the defaults."""
        defaults = resolved(self.config())
        args = list(self.command)
        for field in dataclasses.fields(config):
            value = getattr(config, field.name)
            default = config.preset.get(field.name, getattr(defaults, field.name))
            if field.name in FREE_ON_RESUME or value == default:
                continue
            if isinstance(value, bool):
                args.append(f"--{'' if value else 'no-'}{field.name.replace('_', '-')}")
            elif isinstance(value, list):  # as the command line takes it: comma-separated
                args.append(f"{field.name}={','.join(map(str, value))}")
            else:
                args.append(f"{field.name}={value}")
        return shlex.join([*args, "--out", config.out])

    def saved_config(self, layout: RunFolder) -> Any:
        """The resolved options a run folder was started with."""
        names = {f.name for f in dataclasses.fields(self.config)}
        return self.config(**{k: v for k, v in load_yaml(layout.config).items() if k in names})

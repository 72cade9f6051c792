"""``nlhf experiment population``: the command (see :mod:`nlhf.experiment` for what it does).

    nlhf experiment population [--quick] [--out DIR] [key=value ...]

Starting writes the resolved options and the population's definition to ``DIR/config.yaml``;
running again with the same ``--out`` resumes (finished stages are skipped, trainers continue
from their checkpoints) and refuses options that differ from the ones the run started with.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from pathlib import Path
from typing import Any

from nlhf.config import ConfigError, load_yaml, to_dict
from nlhf.experiment.config import Config, Layout, resolved
from nlhf.models.policy import resolve_dtype

__all__ = ["Config", "run"]

FREE_ON_RESUME = {"out", "progress"}
"""Options that may change between an interrupted run and its resumption."""


def default_out() -> str:
    return time.strftime("runs/population-%Y%m%d-%H%M%S")


def saved_options(config: Config) -> dict[str, Any]:
    """What ``config.yaml`` holds: the options, and the population they name spelled out."""
    from nlhf.experiment.stages import load_population

    return {**to_dict(config), "population_definition": load_population(config).definition}


def start_or_resume(config: Config, layout: Layout) -> None:
    """Write ``config.yaml`` for a new run; check it against the saved one for a resumed run."""
    import yaml

    from nlhf.files import atomic_write_text

    now = saved_options(config)
    if layout.config.exists():
        before = load_yaml(layout.config)
        changed = [
            f"{key}: {before.get(key)!r} then, {now[key]!r} now"
            for key in now
            if key not in FREE_ON_RESUME and before.get(key) != now[key]
        ]
        if changed:
            raise ConfigError(
                f"{layout.config}: this run was started with other options; resume it with the "
                f"same ones or choose another --out ({'; '.join(changed)})"
            )
        print(f"[experiment] resuming {layout.root}")
        return
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(layout.config, yaml.safe_dump(now, sort_keys=False, allow_unicode=True))


def check_models(config: Config) -> None:
    """Stop before the first stage when ``policy`` or ``encoder`` is a missing path."""
    from nlhf.assets import KEYWORDS, resolve_model

    for value, role in ((config.policy, "policy"), (config.encoder, "encoder")):
        if value.strip().lower() not in KEYWORDS[role]:
            resolve_model(value, role)


def command_line(config: Config) -> str:
    """The shortest command that runs (or resumes) this resolved config."""
    preset = dataclasses.asdict(config.preset)
    defaults = dataclasses.replace(Config(), dtype=resolve_dtype("auto"))
    args = ["nlhf", "experiment", "population"]
    for field in dataclasses.fields(Config):
        value = getattr(config, field.name)
        if field.name in FREE_ON_RESUME or value == preset.get(
            field.name, getattr(defaults, field.name)
        ):
            continue
        if isinstance(value, bool):
            args.append(f"--{'' if value else 'no-'}{field.name.replace('_', '-')}")
        else:
            args.append(f"{field.name}={value}")
    return shlex.join([*args, "--out", config.out])


def run(config: Config) -> int:
    import torch

    from nlhf.experiment.report import write_report
    from nlhf.experiment.stages import run_all

    config = resolved(dataclasses.replace(config, out=config.out or default_out()))
    layout = Layout(Path(config.out))
    check_models(config)
    start_or_resume(config, layout)
    resume = command_line(config)
    torch.manual_seed(config.seed)
    try:
        run_all(config, layout)
    except KeyboardInterrupt:
        print(f"\n[experiment] interrupted; continue where it stopped with:\n  {resume}")
        return 130
    print(f"[experiment] report: {write_report(config, layout, resume)}")
    return 0

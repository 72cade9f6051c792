"""``nlhf demo``: the command (see :mod:`nlhf.demo` for what it does).

    nlhf demo [--quick] [--all-methods] [--out DIR] [key=value ...]

Starting writes the resolved options to ``DIR/config.yaml``; running again with the same
``--out`` resumes (finished stages are skipped, trainers continue from their checkpoints) and
refuses options that differ from the ones the run started with.
"""

from __future__ import annotations

import dataclasses
import shlex
import time
from pathlib import Path

from nlhf.config import ConfigError, load_yaml, to_dict
from nlhf.demo.config import Config, resolved
from nlhf.demo.plan import Layout
from nlhf.models.policy import resolve_dtype

__all__ = ["Config", "run"]

# options that may change between an interrupted run and its resumption
FREE_ON_RESUME = {"out", "progress"}


def default_out() -> str:
    return time.strftime("runs/demo-%Y%m%d-%H%M%S")


def start_or_resume(config: Config, layout: Layout) -> None:
    """Write ``config.yaml`` for a new run; check it against the saved one for a resumed run."""
    import yaml

    from nlhf.files import atomic_write_text

    saved = layout.config
    if saved.exists():
        before = load_yaml(saved)
        now = to_dict(config)
        changed = [
            f"{key}: {before.get(key)!r} then, {now[key]!r} now"
            for key in now
            if key not in FREE_ON_RESUME and before.get(key) != now[key]
        ]
        if changed:
            raise ConfigError(
                f"{saved}: this run was started with other options; resume it with the same "
                f"ones or choose another --out ({'; '.join(changed)})"
            )
        print(f"[demo] resuming {layout.root}")
        return
    layout.root.mkdir(parents=True, exist_ok=True)
    atomic_write_text(saved, yaml.safe_dump(to_dict(config), sort_keys=False))


def check_models(config: Config) -> None:
    """Stop before the first stage when ``policy`` or ``encoder`` is a path that does not
    exist (the policy is first loaded only after the judges have trained); the embedded
    keywords are located when a stage needs them."""
    from nlhf.assets import KEYWORDS, resolve_model

    for value, role in ((config.policy, "policy"), (config.encoder, "encoder")):
        if value.strip().lower() not in KEYWORDS[role]:
            resolve_model(value, role)


def command_line(config: Config) -> str:
    """The shortest command that runs (or resumes) this resolved config."""
    preset = dataclasses.asdict(config.preset)
    defaults = dataclasses.replace(Config(), dtype=resolve_dtype("auto"))  # as resolved
    args = ["nlhf", "demo"]
    for field in dataclasses.fields(Config):
        value = getattr(config, field.name)
        default = preset.get(field.name, getattr(defaults, field.name))
        if field.name in FREE_ON_RESUME or value == default:
            continue
        if isinstance(value, bool):
            args.append(f"--{'' if value else 'no-'}{field.name.replace('_', '-')}")
        else:
            args.append(f"{field.name}={value}")
    return shlex.join([*args, "--out", config.out])


def run(config: Config) -> int:
    from nlhf.demo.report import write_report
    from nlhf.demo.stages import run_all

    config = resolved(dataclasses.replace(config, out=config.out or default_out()))
    layout = Layout(Path(config.out))
    check_models(config)
    start_or_resume(config, layout)
    resume = command_line(config)
    try:
        run_all(config, layout)
    except KeyboardInterrupt:
        print(f"\n[demo] interrupted; continue where it stopped with:\n  {resume}")
        return 130
    report = write_report(config, layout, resume)
    print(f"[demo] report: {report}")
    return 0

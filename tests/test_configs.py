"""Every example YAML under ``configs/`` builds the config of its command, so the files
cannot drift from the options they set."""

from pathlib import Path

import pytest

from nlhf.cli import COMMANDS, CommandGroup, build_parser, main
from nlhf.config import config_from_args

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
TRAIN = set(COMMANDS["train"].commands)  # every trainer; the other files name a top command


def command(path: Path) -> list[str]:
    return ["train", path.stem] if path.stem in TRAIN else [path.stem]


def test_every_trainer_has_an_example():
    assert TRAIN <= {p.stem for p in CONFIGS}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_example_config_builds(path):
    argv = [*command(path), "--config", str(path)]
    args = build_parser(argv).parse_args(argv)
    module = args._command.load()
    config = config_from_args(args._command.config_class(module), args)
    assert type(config).__module__ == module.__name__
    header = path.read_text().splitlines()[0]
    assert header.startswith(f"# nlhf {' '.join(command(path))} --config configs/{path.name}")


def leaves(commands=COMMANDS, path=()):
    """(command words, Command) of every leaf command, groups walked."""
    for name, command in commands.items():
        if isinstance(command, CommandGroup):
            yield from leaves(command.commands, (*path, name))
        else:
            yield (*path, name), command


BAD = {
    "JudgeFields": "judge_batch_size=0",
    "PolicyFields": "lora_r=-1",
    "PromptFields": "prompt_words=0",
    "TrainFields": "lr=0",
    "DataFields": "held_out=1.5",
    "IterationFields": "iteration_epochs=0",
    "Sampling": "samples_per_prompt=0",
    "ControlFields": "hidden=0",
    "LabelFields": "budget=-1",
    "Presets": "batch_size=0",
}
"""One out-of-range value for each field group (mixin) a config can include."""


def bad_values():
    """One (command, bad value) case for every field group of every command's config."""
    return [
        pytest.param(words, BAD[mixin.__name__], id=f"{' '.join(words)}-{mixin.__name__}")
        for words, command in leaves()
        for mixin in command.config_class(command.load()).__mro__
        if mixin.__name__ in BAD
    ]


@pytest.mark.parametrize(("words", "value"), bad_values())
def test_every_field_group_of_every_command_refuses_an_out_of_range_value(
    words, value, tmp_path, monkeypatch, capsys
):
    monkeypatch.chdir(tmp_path)  # where the default output folders would go
    assert main([*words, value]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and value.partition("=")[0] in lines[0], lines
    assert not any(tmp_path.iterdir())


def test_every_field_group_is_in_some_command():
    assert {case.id.rpartition("-")[2] for case in bad_values()} == set(BAD)

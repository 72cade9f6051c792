"""Every example YAML under ``configs/`` builds the config of its command, so the files
cannot drift from the options they set."""

import dataclasses
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


def mixins() -> dict[str, tuple[type, str]]:
    """Each field group a config can include: its class and one out-of-range value."""
    from nlhf.control.rollout import ControlFields
    from nlhf.control.routes import LabelFields
    from nlhf.data.prompts import PromptFields
    from nlhf.eval.rollouts import Sampling
    from nlhf.models.judges.load import JudgeFields
    from nlhf.train.core import TrainFields
    from nlhf.train.iterative import IterationFields
    from nlhf.train.pairs import DataFields
    from nlhf.train.policy_fields import PolicyFields

    return {
        "judge": (JudgeFields, "judge_batch_size=0"),
        "policy": (PolicyFields, "lora_r=-1"),
        "prompts": (PromptFields, "prompt_words=0"),
        "train loop": (TrainFields, "lr=0"),
        "data": (DataFields, "held_out=1.5"),
        "iterations": (IterationFields, "iteration_epochs=0"),
        "sampling": (Sampling, "samples_per_prompt=0"),
        "control": (ControlFields, "hidden=0"),
        "labels": (LabelFields, "budget=-1"),
    }


def bad_values():
    """One (command, bad value) case for every field group of every command's config."""
    cases = []
    for words, command in leaves():
        config_class = command.config_class(command.load())
        for group, (mixin, value) in mixins().items():
            if issubclass(config_class, mixin):
                cases.append(pytest.param(words, value, id=f"{' '.join(words)}-{group}"))
    return cases


@pytest.mark.parametrize(("words", "value"), bad_values())
def test_every_field_group_of_every_command_refuses_an_out_of_range_value(
    words, value, tmp_path, capsys
):
    out = tmp_path / "out"
    config_class = dict(leaves())[words].config_class(dict(leaves())[words].load())
    has_out = "out" in {f.name for f in dataclasses.fields(config_class)}
    code = main([*words, value, *([f"out={out}"] if has_out else [])])
    lines = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(lines) == 1 and value.partition("=")[0] in lines[0], lines
    assert not out.exists()


def test_every_field_group_is_in_some_command():
    covered = {
        group
        for _, command in leaves()
        for group, (mixin, _) in mixins().items()
        if issubclass(command.config_class(command.load()), mixin)
    }
    assert covered == set(mixins())

"""Dataclass configs: YAML files, flags and key=value overrides, with errors that say where."""

import dataclasses
import itertools
import typing
from dataclasses import dataclass
from typing import Literal

import pytest

from nlhf.cli import build_parser, main
from nlhf.config import Checked, ConfigError, build_config, option


@dataclass
class Toy(Checked):
    """A toy config."""

    rate: float = option(0.5, "a float")
    steps: int = option(10, "an int")
    names: list[str] = option(["a", "b"], "a list")
    mode: Literal["x", "y"] = option("x", "a choice")
    flag: bool = option(False, "a switch")
    limit: int | None = option(None, "optional int")

    def check(self):
        if self.rate < 0:
            raise ValueError(f"rate must be ≥ 0, got {self.rate}")


def test_conversions():
    cfg = build_config(
        Toy,
        {
            "rate": "0.25",
            "steps": "3",
            "names": "p,q",
            "mode": "y",
            "flag": "true",
            "limit": "none",
        },
    )
    assert cfg == Toy(rate=0.25, steps=3, names=["p", "q"], mode="y", flag=True, limit=None)
    assert build_config(Toy, {"names": ["r"], "limit": 4}).limit == 4


def test_a_repeated_list_flag_keeps_every_item():
    import argparse

    from nlhf.config import add_config_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Toy)
    args = parser.parse_args(["--names", "p", "--names", "q,r", "--steps", "3", "--steps", "4"])
    assert config_from_args(Toy, args) == Toy(names=["p", "q", "r"], steps=4)
    assert config_from_args(Toy, parser.parse_args([])).names == ["a", "b"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"steps": "ten"}, r"steps: 'ten' is not a valid int"),
        ({"steps": 2.5}, r"steps: 2.5 is not an integer"),
        ({"mode": "z"}, r"mode: 'z' is not one of x, y"),
        ({"flag": "maybe"}, r"flag: 'maybe' is not a boolean"),
        ({"nope": 1}, r"unknown field 'nope' for Toy"),
        ({"rate": -1}, r"rate must be ≥ 0"),
        ({"rate": "nan"}, r"cfg.yaml: rate: 'nan' is not a finite number"),
        ({"rate": float("inf")}, r"cfg.yaml: rate: inf is not a finite number"),
        ({"mode": ["x"]}, r"cfg.yaml: mode: expected \{x,y\}, got a list"),
        ({"rate": {"a": 1}}, r"cfg.yaml: rate: expected float, got a dict"),
        ({"steps": True}, r"cfg.yaml: steps: expected int, got a bool True"),
        ({"names": [[1]]}, r"cfg.yaml: names: expected str, got a list \[1\]"),
        ({"flag": None}, r"cfg.yaml: flag: expected bool, got null"),
    ],
)
def test_errors_name_the_field(values, message):
    with pytest.raises(ConfigError, match=message):
        build_config(Toy, values, {k: "cfg.yaml" for k in values})


def _leaf_paths(commands, prefix=()):
    from nlhf.cli import CommandGroup

    for name, cmd in commands.items():
        if isinstance(cmd, CommandGroup):
            yield from _leaf_paths(cmd.commands, (*prefix, name))
        else:
            yield (*prefix, name)


def test_every_option_of_every_command_has_help(capsys):
    from nlhf.cli import COMMANDS

    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    top = capsys.readouterr().out
    assert all(name in top for name in COMMANDS)
    paths = list(_leaf_paths(COMMANDS))
    assert ("tabular",) in paths and ("train", "reward-model") in paths
    for path in paths:
        parser = build_parser(list(path))
        for depth, name in enumerate(path):
            action = next(a for a in parser._actions if a.dest == f"command_{depth}")
            parser = action.choices[name]
        options = [a for a in parser._actions if a.option_strings and a.dest != "help"]
        assert len(options) > 2, path
        for action in options:
            assert action.help and len(action.help) > 10, (path, action.dest)


def test_precedence_defaults_yaml_flags_overrides(tmp_path):
    from nlhf.tabular.cli import Config

    cfg_file = tmp_path / "lab.yaml"
    cfg_file.write_text("tau: 0.3\nsteps: 7\ngames: [cycle]\n")
    parser = build_parser(["tabular"])
    args = parser.parse_args(["tabular", "--config", str(cfg_file), "--steps", "9", "tau=0.2"])
    from nlhf.config import config_from_args

    cfg = config_from_args(Config, args)
    assert (cfg.tau, cfg.steps, cfg.games, cfg.n) == (0.2, 9, ["cycle"], Config().n)


def test_bad_yaml_key_names_the_file(tmp_path, capsys):
    cfg_file = tmp_path / "bad.yaml"
    cfg_file.write_text("tau: 0.3\nstepz: 7\n")
    assert main(["tabular", "--config", str(cfg_file)]) == 2
    err = capsys.readouterr().err
    assert str(cfg_file) in err and "unknown field 'stepz'" in err


def test_invalid_combination_is_reported(capsys):
    assert main(["tabular", "schedule=constant", "eta=20", "tau=0.1"]) == 2
    assert "eta·tau must be ≤ 1" in capsys.readouterr().err


def test_overrides_may_follow_later_flags(capsys):
    # two groups of key=value around a flag: both are applied (the second one sets an
    # invalid combination, so the run stops with its message before doing anything)
    assert main(["tabular", "schedule=constant", "--out", "unused", "eta=20", "tau=0.1"]) == 2
    assert "eta·tau must be ≤ 1" in capsys.readouterr().err


def test_unknown_flags_are_still_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["tabular", "tau=0.1", "--no-such-flag"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --no-such-flag" in capsys.readouterr().err


def _float_options():
    """(command words, field name) of every float option of every command."""
    from nlhf.cli import COMMANDS

    for path in _leaf_paths(COMMANDS):
        command = COMMANDS
        for word in path:
            command = command[word] if isinstance(command, dict) else command.commands[word]
        config_class = command.config_class(command.load())
        hints = typing.get_type_hints(config_class)
        for field in dataclasses.fields(config_class):
            if float in {hints[field.name], *typing.get_args(hints[field.name])}:
                yield path, field.name


def test_every_float_option_of_every_command_refuses_a_number_that_is_not_finite(capsys):
    options = list(_float_options())
    assert (("train", "nash-md"), "judge_length_penalty") in options
    for (path, name), value in zip(options, itertools.cycle(["nan", "inf", "-inf", "1e999"])):
        assert main([*path, f"{name}={value}"]) == 2, (path, name)
        (line,) = capsys.readouterr().err.splitlines()
        assert line.endswith(f"{name}: {value!r} is not a finite number"), line


def test_a_yaml_value_of_the_wrong_type_is_refused_naming_the_file_and_key(tmp_path, capsys):
    config = tmp_path / "lab.yaml"
    for text in ("out: [1, 2]\n", "tau: {a: 1}\n", "games: [[cycle]]\n", "out:\n"):
        config.write_text(text)
        assert main(["tabular", "--config", str(config)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert [line.partition(": error: ")[2] for line in lines] == [
        f"{config}: out: expected str, got a list [1, 2]",
        f"{config}: tau: expected float, got a dict {{'a': 1}}",
        f"{config}: games: expected str, got a list ['cycle']",
        f"{config}: out: expected str, got null",
    ]

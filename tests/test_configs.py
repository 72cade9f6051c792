"""Every example YAML under ``configs/`` builds the config of its command, so the files
cannot drift from the options they set."""

from pathlib import Path

import pytest

from nlhf.cli import COMMANDS, build_parser
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

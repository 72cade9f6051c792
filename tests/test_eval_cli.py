"""``nlhf eval``: the config (help on every field, validation) and a run with VADER."""

import argparse
import json

import pytest
import torch

from eval_tiny import build_folders
from nlhf.config import ConfigError, add_config_arguments, config_from_args
from nlhf.eval.cli import Config, run


def parse(argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, Config)  # raises if a field has no help text
    return config_from_args(Config, parser.parse_args(argv))


def test_config_from_flags_and_validation():
    config = parse(["--policies", "reference,x=runs/a", "samples_per_prompt=2", "--top-p", "0.9"])
    assert config.policies == ["reference", "x=runs/a"] and config.samples_per_prompt == 2
    assert config.top_p == 0.9 and config.judges == ["vader"]
    with pytest.raises(ConfigError, match="at least 2"):
        parse(["--policies", "reference"])
    with pytest.raises(ConfigError, match="samples_per_prompt must be ≥ 1"):
        parse(["--policies", "a,b", "samples_per_prompt=0"])
    with pytest.raises(ConfigError, match="pairing"):
        parse(["--policies", "a,b", "pairing=some"])


def test_frontier_flags_take_runs_targets_and_best_of_n():
    config = parse(["--frontier", "--policies", "ppo=runs/p", "--targets", "1,2", "--bon", "1,4"])
    assert config.frontier and config.policies == ["ppo=runs/p"]
    assert config.targets == [1.0, 2.0] and config.bon == [1, 4]
    with pytest.raises(ConfigError, match="targets must be > 0"):
        parse(["--frontier", "--policies", "a=x", "--targets", "0,1"])
    with pytest.raises(ConfigError, match="at least one run"):
        parse(["--frontier"])


def test_prompt_options_are_the_shared_ones():
    from nlhf.data.prompts import PromptFields

    assert issubclass(Config, PromptFields)
    config = parse(["--policies", "a,b", "--prompt-words", "5", "prompts=hh", "chat_template=true"])
    assert (config.prompts, config.prompt_words, config.chat_template) == ("hh", 5, True)


def test_run_with_vader_on_tiny_models(tmp_path, capsys):
    torch.set_num_threads(1)
    folders = build_folders(tmp_path / "policies")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(
        "".join(json.dumps({"prompt": p}) + "\n" for p in ["good", "bad", "the film", "x"])
    )
    out = tmp_path / "out"
    config = Config(
        policies=["reference", f"lora={folders['ad1']}"],
        judges=["vader"],
        prompts=str(prompts),
        num_prompts=3,
        samples_per_prompt=2,
        max_new_tokens=6,
        out=str(out),
        progress=False,
    )
    assert run(config) == 0
    data = json.loads((out / "tournament.json").read_text())
    assert data["n_prompts"] == 3 and data["settings"]["samples_per_prompt"] == 2
    assert data["judges"]["vader"]["kind"] == "score"
    assert set(data["policies"][0]["scores"]) == {"vader"}
    assert (out / "heatmap.png").stat().st_size > 1000
    printed = capsys.readouterr().out
    assert "P(row ≻ column), judge vader, 3 prompts × 2 samples" in printed
    assert "tournament.md" in printed
    with pytest.raises(ValueError, match="has 4 prompts; num_prompts asks 9"):
        run(
            Config(
                policies=config.policies,
                prompts=str(prompts),
                num_prompts=9,
                progress=False,
                out=str(out),
            )
        )

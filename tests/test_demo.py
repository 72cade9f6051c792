"""``nlhf demo``: presets, the per-stage plan, resuming, the report's verdicts (fast tests);
the interrupted-and-resumed pipeline on tiny models; ``--quick`` on tiny models (one run that
the slow tests share).  The embedded SmolLM2 itself is loaded and run by
tests/test_assets_real.py; what the full demo finds on it is in the README."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import children
from nlhf.config import ConfigError, to_dict
from nlhf.demo.config import Config
from nlhf.demo.plan import imdb_judge_configs, methods, tournament_entrants, tournament_judges
from nlhf.demo.report import pairs
from nlhf.demo.run import RUN
from nlhf.reporting import compare, verdict, verdict_lines
from nlhf.resumable import RunFolder, resolved, start_or_resume

ROOT = Path(__file__).resolve().parents[1]


def test_presets_fill_only_what_the_user_left_open():
    quick = resolved(Config(quick=True, steps=12))
    assert quick.steps == 12 and quick.ppo_steps == Config(quick=True).preset["ppo_steps"]
    assert quick.batch_size == Config(quick=True).preset["batch_size"] and quick.minutes == 0
    default = resolved(Config())
    assert default.eval_prompts == Config().preset["eval_prompts"] == 64
    assert default.samples_per_prompt >= 4  # several samples per prompt: tight intervals


def test_each_preset_option_says_its_values_in_its_help():
    from dataclasses import fields

    steps = next(f for f in fields(Config) if f.name == "steps")
    assert steps.metadata["help"].endswith("(default 34; quick 8)")
    assert set(Config().preset) == {f.name for f in fields(Config) if f.default is None}


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="steps must be > 0"):
        Config(steps=0)
    with pytest.raises(ValueError, match="minutes must be ≥ 0"):
        Config(minutes=-1)
    with pytest.raises(ValueError, match="beta must lie in"):
        Config(beta=1.5)


def test_plan_trains_ppo_on_the_reward_model_and_nash_md_on_the_preference_model(tmp_path):
    config = resolved(Config(out=str(tmp_path)))
    layout = RunFolder(tmp_path)
    chosen = methods(config, layout)
    assert [m.name for m in chosen] == ["ppo", "nash-md"]
    ppo, nash = chosen
    assert ppo.config.judge.endswith("reward-model/model")
    assert nash.config.judge.endswith("preference-model/model")
    assert nash.config.beta == 0.125
    assert (ppo.config.steps, nash.config.steps) == (config.ppo_steps, config.steps)
    for m in chosen:  # a fixed budget, same reference, same data, LoRA
        assert m.config.time_limit == 0 and m.comparisons_per_step == config.batch_size
        assert m.config.policy == "smollm2" and m.config.lora_r == 16
        assert m.config.prompts == str(layout.train_prompts)
        assert m.config.dtype == config.dtype in ("float32", "bfloat16")  # auto is decided
    everything = methods(resolved(Config(out=str(tmp_path), all_methods=True)), layout)
    names = ["ppo", "nash-md", "self-play", "nash-ema", "mpo", "online-ipo"]
    assert [m.name for m in everything] == [*names, "sppo", "inpo", "onpo", "dno"]
    by_name = {m.name: m for m in everything}
    assert by_name["self-play"].config.beta == 0.0 == by_name["mpo"].config.beta
    assert by_name["mpo"].config.magnet_every > 0
    assert by_name["onpo"].config.step_rule == "optimistic"
    assert (by_name["online-ipo"].config.loss_type, by_name["online-ipo"].config.label) == (
        "ipo",
        "soft",
    )
    half = config.batch_size // 2  # K = 4 samples of half the prompts: as many completions
    assert by_name["sppo"].config.batch_size == half and by_name["sppo"].config.samples == 4
    assert by_name["sppo"].comparisons_per_step == half * 6  # every pair of the 4
    assert by_name["inpo"].comparisons_per_step == half * 5  # the knockout of 4
    assert all(m.config.steps == config.steps for m in everything[1:])
    judges = imdb_judge_configs(config, layout)
    assert {c.data for c in judges.values()} == {"imdb"}
    assert {c.dtype for c in judges.values()} == {config.dtype}
    assert len({(c.max_pairs, c.seed, c.held_out) for c in judges.values()}) == 1  # same split
    assert tournament_entrants(config, layout)[0] == "reference"


def test_resuming_with_other_options_is_refused(tmp_path):
    saved = tmp_path / "run" / "config.yaml"
    config = resolved(Config(out=str(saved.parent), quick=True))
    start_or_resume(to_dict(config), saved, "demo")
    start_or_resume(to_dict(config), saved, "demo")  # same options: resumes
    other = resolved(Config(out=str(saved.parent), quick=True, steps=9))
    with pytest.raises(ConfigError, match=r"steps: 8 then, 9 now"):
        start_or_resume(to_dict(other), saved, "demo")
    start_or_resume(to_dict(config) | {"progress": False}, saved, "demo")  # free to change


def test_an_option_added_since_a_run_started_resumes_at_its_default(tmp_path):
    saved = tmp_path / "run" / "config.yaml"
    config = to_dict(resolved(Config(out=str(saved.parent), quick=True)))
    start_or_resume({k: v for k, v in config.items() if k != "seeds"}, saved, "demo")
    start_or_resume(config, saved, "demo", defaults=config)  # seeds at its default: resumes
    with pytest.raises(ConfigError, match=r"seeds: 1 then, 2 now"):
        start_or_resume(config | {"seeds": 2}, saved, "demo", defaults=config)


def test_command_line_names_only_what_differs(tmp_path):
    config = resolved(Config(out="runs/x", quick=True, tau=0.1))
    assert RUN.command_line(config) == "nlhf demo --quick tau=0.1 --out runs/x"
    assert RUN.command_line(resolved(Config(out="runs/y"))) == "nlhf demo --out runs/y"


def fake_tournament(p):
    """Two policies; P(row ≻ col) = p for nash-md over reference, with a ±0.05 interval."""
    return {
        "policies": [{"name": "reference"}, {"name": "nash-md"}],
        "judges": {
            "vader": {
                "win_rate": [[0.5, 1 - p], [p, 0.5]],
                "low": [[None, 1 - p - 0.05], [p - 0.05, None]],
                "high": [[None, 1 - p + 0.05], [p + 0.05, None]],
            }
        },
    }


@pytest.mark.parametrize(
    "p, expected",
    [(0.74, "nash-md beats reference"), (0.3, "reference beats nash-md"), (0.52, "no significant")],
)
def test_verdicts_follow_the_interval(p, expected):
    t = fake_tournament(p)
    estimate = compare(t, "vader", "nash-md", "reference")
    assert estimate["mean"] == pytest.approx(p)
    assert expected in verdict(estimate, "nash-md", "reference")
    assert any(expected in line for line in verdict_lines(t, pairs(["nash-md"])))


def test_the_verdicts_compare_each_method_with_the_reference_and_each_other():
    assert pairs(["ppo", "nash-md"]) == [
        ("ppo", "reference"),
        ("nash-md", "reference"),
        ("ppo", "nash-md"),
    ]
    assert pairs(["ppo", "nash-md"], each_other=False) == [
        ("ppo", "reference"),
        ("nash-md", "reference"),
    ]


# --------------------------------------------------------------------------- end to end

TINY_SIZES = [
    "judge_pairs=40",
    "judge_words=12",
    "judge_max_length=48",
    "batch_size=4",
    "max_new_tokens=6",
    "train_prompts=16",
    "eval_prompts=4",
    "samples_per_prompt=2",
    "lora_r=4",
]


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from eval_tiny import build_folders
    from tiny_encoder import make_tiny_encoder

    root = tmp_path_factory.mktemp("demo-models")
    words = "the a movie film good bad great awful review write".split()
    return build_folders(root)["base"], make_tiny_encoder(root / "encoder", words)


MINUTES = 0.1
"""Each method's training time on tiny models: the budget that ends its training."""


def demo_command(out, tiny_models, minutes):
    policy, encoder = tiny_models
    return [
        sys.executable, "-m", "nlhf.cli", "demo", "--out", str(out), "--no-progress",
        f"policy={policy}", f"encoder={encoder}", f"minutes={minutes}", *TINY_SIZES,
        "steps=100000", "ppo_steps=100000",  # the time cap (minutes) ends training
    ]  # fmt: skip


def test_interrupted_demo_resumes_and_writes_the_report(tmp_path, tiny_models):
    """Ctrl-C while the second policy trains; the same command then finishes the run
    without redoing the finished stages."""
    out = tmp_path / "run"
    cmd = demo_command(out, tiny_models, minutes=MINUTES)
    env = children.env(tmp_path, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        encoding="utf-8",
        preexec_fn=children.default_signals,  # the Ctrl-C below must reach Python
    )
    stages = out / "stages.json"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and proc.poll() is None:
        if stages.exists() and "train ppo" in json.loads(stages.read_text()):
            time.sleep(2.0)  # inside Nash-MD's training
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[0]
    proc.send_signal(signal.SIGINT)
    output = proc.communicate(timeout=120)[0]
    assert proc.returncode == 130, output
    assert "continue where it stopped with" in output
    assert not (out / "report.md").exists()
    done = json.loads(stages.read_text())
    assert "train ppo" in done and "train nash-md" not in done

    resumed = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, encoding="utf-8", timeout=300
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    for stage in ("prompts", "judges", "train ppo"):
        assert f"[demo] {stage}: done in an earlier run, skipped" in resumed.stdout
    report = (out / "report.md").read_text()
    for section in ("## Verdict", "## 1. Judges", "## 2. Training", "## 3. Tournament",
                    "## 4. Completions", "## 5. Configuration"):  # fmt: skip
        assert section in report
    assert (out / "curves.png").stat().st_size > 10_000
    assert (out / "tournament" / "heatmap.png").exists()
    tournament = json.loads((out / "tournament" / "tournament.json").read_text())
    assert [p["name"] for p in tournament["policies"]] == ["reference", "ppo", "nash-md"]
    assert set(tournament["judges"]) == {"vader", "preference-model"}
    # the README block of this run: verdicts, judges, tables, images copied beside it
    readme = tmp_path / "README.md"
    readme.write_text("intro\n<!-- demo:lm -->\nold\n<!-- /demo:lm -->\nrest\n")
    script = [sys.executable, str(ROOT / "scripts" / "readme.py"), str(out), str(readme)]
    written = subprocess.run(
        script, env=children.env(tmp_path), capture_output=True, encoding="utf-8"
    )
    assert written.returncode == 0, written.stderr
    text = readme.read_text()
    assert "old" not in text and text.startswith("intro") and text.endswith("rest\n")
    assert "P(nash-md ≻ reference)" in text and "| P(row ≻ col) |" in text
    assert "At matched KL" in text and "The final policies, each at its own KL (nats: ppo" in text
    assert "docs/images/demo-heatmap.png" in text
    assert (tmp_path / "docs" / "images" / "demo-curves.png").exists()
    budget = 60 * MINUTES
    for name in ("ppo", "nash-md"):  # each trained for its budget, no more (one step over)
        rows = [json.loads(x) for x in (out / "policies" / name / "metrics.jsonl").open()]
        seconds = sum(r["step_seconds"] for r in rows)
        assert budget <= seconds <= budget + 2 * max(r["step_seconds"] for r in rows)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, tiny_models):
    """``nlhf demo --quick`` on the tiny models, with the quick preset's step counts and
    learning rates and tiny data sizes, run once for the slow tests below.

    Nothing is asserted about what the random-init models learn (no judge accuracy above
    chance, no gain under VADER): learning is checked on tiny models with fixed step counts
    (tests/test_train_*.py, tests/test_judges.py) and by the full demo (README)."""
    root = tmp_path_factory.mktemp("quick-demo")
    out = root / "quick"
    policy, encoder = tiny_models
    command = [
        sys.executable, "-m", "nlhf.cli", "demo", "--quick", "--no-progress", "--out", str(out),
        f"policy={policy}", f"encoder={encoder}", *TINY_SIZES,
    ]  # fmt: skip
    result = subprocess.run(
        command,
        cwd=ROOT,
        env=children.env(root),
        capture_output=True,
        encoding="utf-8",
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert f"report: {out / 'report.md'}" in result.stdout
    return out


def tournament_of(out):
    return json.loads((out / "tournament" / "tournament.json").read_text())


@pytest.mark.slow
def test_quick_demo_records_each_judges_held_out_accuracy(quick_run):
    accuracy = json.loads((quick_run / "stages.json").read_text())["judges"]["held_out_accuracy"]
    assert set(accuracy) == {"reward-model", "preference-model"}
    for name, value in accuracy.items():  # the judge's own metrics.json, passed on
        held = json.loads((quick_run / "judges" / name / "metrics.json").read_text())["held_out"]
        assert value == held["accuracy"] and 0.0 <= value <= 1.0
        assert held["pairs"] == 8  # 20% of the 40 pairs held out


@pytest.mark.slow
def test_quick_demo_policies_train_their_steps_and_leave_the_reference(quick_run):
    from safetensors.torch import load_file

    quick = Config(quick=True).preset
    for name in ("ppo", "nash-md"):
        rows = [json.loads(x) for x in (quick_run / "policies" / name / "metrics.jsonl").open()]
        assert len(rows) == quick["ppo_steps" if name == "ppo" else "steps"]
        adapter = load_file(quick_run / "policies" / name / "policy" / "adapter_model.safetensors")
        lora_b = [t for key, t in adapter.items() if "lora_B" in key]
        assert lora_b and max(float(t.abs().max()) for t in lora_b) > 0  # B starts at zero
    kl = {p["name"]: p["kl"] for p in tournament_of(quick_run)["policies"]}
    assert kl["reference"]["mean"] == 0.0  # the reference against itself
    for name in ("ppo", "nash-md"):  # measured on each held-out prompt's completions
        assert kl[name]["n"] == 4 and kl[name]["low"] <= kl[name]["mean"] <= kl[name]["high"]


@pytest.mark.slow
def test_quick_demo_report_says_what_the_tournament_found(quick_run):
    tournament = tournament_of(quick_run)
    report = (quick_run / "report.md").read_text()
    estimate = compare(tournament, "vader", "nash-md", "reference")
    assert verdict(estimate, "nash-md", "reference") in report
    for section in ("## 1. Judges", "## 2. Training", "## 3. Tournament", "## 5. Configuration"):
        assert section in report


def test_more_tournament_judges_join_vader_and_the_preference_model(tmp_path):
    layout = RunFolder(tmp_path)
    plain = tournament_judges(resolved(Config()), layout)
    assert list(plain) == ["vader", "preference-model"]
    more = tournament_judges(resolved(Config(judges=["population:default"])), layout)
    assert more["population:default"] == "population:default" and len(more) == 3

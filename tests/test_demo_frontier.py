"""``nlhf demo`` at matched KL: the plan of ``--seeds`` and ``--frontier`` (fast), and one
``nlhf demo --frontier --seeds 2`` on tiny models whose report states its verdicts at the KL
each side reached (slow)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import children
from nlhf.demo.config import Config
from nlhf.demo.plan import frontier_runs, methods, tournament_entrants
from nlhf.resumable import RunFolder, resolved

ROOT = Path(__file__).resolve().parents[1]


def test_seeds_train_every_plain_method_again_from_the_next_seeds(tmp_path):
    config = resolved(Config(out=str(tmp_path), seeds=3, seed=5))
    chosen = methods(config, RunFolder(tmp_path))
    names = ["ppo", "nash-md", "ppo-seed1", "nash-md-seed1", "ppo-seed2", "nash-md-seed2"]
    assert [m.name for m in chosen] == names
    assert [m.config.seed for m in chosen] == [5, 5, 6, 6, 7, 7]
    assert [(m.group, m.run) for m in chosen[2:4]] == [("ppo", 1), ("nash-md", 1)]
    assert len({m.config.out for m in chosen}) == 6
    assert all(m.config.keep_checkpoints > 100 for m in chosen)  # every point along the run
    # the tournament plays the config's seed; the frontier reads every seed
    assert tournament_entrants(config, RunFolder(tmp_path))[1:] == [
        f"ppo={tmp_path / 'policies' / 'ppo' / 'policy'}",
        f"nash-md={tmp_path / 'policies' / 'nash-md' / 'policy'}",
    ]
    runs = frontier_runs(config, RunFolder(tmp_path))
    assert runs[0] == f"ppo#0={tmp_path / 'policies' / 'ppo'}"
    assert runs[3] == f"nash-md#1={tmp_path / 'policies' / 'nash-md-seed1'}"


SWEPT = ("ppo-kl", "nash-md-tau")


def test_the_frontier_sweep_fixes_ppo_s_kl_coefficient_and_varies_nash_md_s_tau(tmp_path):
    config = resolved(
        Config(
            out=str(tmp_path), frontier=True, seeds=2, ppo_kl_coefs=[0.01, 0.3],
            ppo_lrs=[1e-3, 1e-4], taus=[0.02],
        )
    )  # fmt: skip
    sweep = [m for m in methods(config, RunFolder(tmp_path)) if m.name.startswith(SWEPT)]
    assert [m.name for m in sweep] == [
        "ppo-kl0.01-lr0.001", "ppo-kl0.3-lr0.0001", "nash-md-tau0.02",
        "ppo-kl0.01-lr0.001-seed1", "ppo-kl0.3-lr0.0001-seed1", "nash-md-tau0.02-seed1",
    ]  # fmt: skip
    ppo = [m.config for m in sweep if m.group == "ppo"]
    assert [c.init_kl_coef for c in ppo] == [0.01, 0.3, 0.01, 0.3]
    assert [c.lr for c in ppo] == [1e-3, 1e-4, 1e-3, 1e-4]  # paired in order
    assert not any(c.adaptive_kl for c in ppo)  # a fixed strength, not a KL target
    assert [m.config.tau for m in sweep if m.group == "nash-md"] == [0.02, 0.02]
    assert [m.config.seed for m in sweep] == [config.seed] * 3 + [config.seed + 1] * 3
    assert [m.run for m in sweep] == [0, 0, 0, 1, 1, 1]
    assert sweep[0].title.endswith("init_kl_coef 0.01, lr 0.001, seed 0")
    runs = frontier_runs(config, RunFolder(tmp_path))  # each strength in its method's seed run
    assert f"ppo#1={tmp_path / 'policies' / 'ppo-kl0.3-lr0.0001-seed1'}" in runs
    assert len(runs) == 4 + 6 and {r.split("#")[0] for r in runs} == {"ppo", "nash-md"}
    with pytest.raises(ValueError, match="must be > 0"):
        Config(taus=[0.0])
    with pytest.raises(ValueError, match="ppo_lrs has 1 values, ppo_kl_coefs 2"):
        Config(ppo_kl_coefs=[0.1, 0.2], ppo_lrs=[1e-4])
    with pytest.raises(ValueError, match="seeds must be ≥ 1"):
        Config(seeds=0)


@pytest.fixture(scope="module")
def tiny_models(tmp_path_factory):
    from eval_tiny import build_folders
    from tiny_encoder import make_tiny_encoder

    root = tmp_path_factory.mktemp("demo-models")
    words = "the a movie film good bad great awful review write".split()
    return build_folders(root)["base"], make_tiny_encoder(root / "encoder", words)


@pytest.mark.slow
def test_demo_frontier_with_two_seeds_on_tiny_models(tmp_path, tiny_models):
    policy, encoder = tiny_models
    out = tmp_path / "run"
    command = [
        sys.executable, "-m", "nlhf.cli", "demo", "--frontier", "--no-progress", "--out", str(out),
        f"policy={policy}", f"encoder={encoder}", "seeds=2", "ppo_kl_coefs=0.1", "ppo_lrs=1e-3",
        "taus=0.1",
        "judge_pairs=40", "judge_words=12", "judge_max_length=48", "batch_size=4",
        "max_new_tokens=6", "train_prompts=16", "eval_prompts=4", "samples_per_prompt=2",
        "lora_r=4", "steps=5", "ppo_steps=4", "targets=0.5,2", "best_of_n=1,2",
    ]  # fmt: skip
    result = subprocess.run(
        command, cwd=ROOT, env=children.env(tmp_path), capture_output=True, encoding="utf-8",
        timeout=1200,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    frontier = json.loads((out / "frontier" / "frontier.json").read_text())
    methods_seen = {(p["method"], p["run"]) for p in frontier["points"]}
    assert methods_seen == {(m, k) for m in ("ppo", "nash-md") for k in (0, 1)}  # per seed
    swept = {p["name"] for p in frontier["points"] if p["method"] == "nash-md" and p["run"] == 1}
    assert any("-f1-" in name for name in swept)  # the sweep's strength, in its seed's run
    steps = {p["step"] for p in frontier["points"] if p["method"] == "ppo" and p["run"] == 0}
    assert steps == {2, 4}  # a checkpoint every 2 PPO steps, then the final policy
    assert [b["n"] for b in frontier["best_of_n"]] == [1, 2]
    report = (out / "report.md").read_text()
    assert "At matched KL (VADER" in report and "### Frontier: win rate against KL" in report
    assert (out / "frontier" / "frontier.png").stat().st_size > 10_000

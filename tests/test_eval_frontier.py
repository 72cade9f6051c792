"""The frontier (nlhf.eval.frontier): envelopes, matched-KL picks and best-of-n on constructed
points, and one tiny end-to-end frontier of LoRA checkpoints on a random GPT-2."""

import json
import math

import numpy as np
import pytest
import torch

from nlhf.eval.frontier import (
    Point,
    bon_curve,
    bon_kl,
    bootstrap_envelopes,
    envelope_at,
    nearest,
    pair_interval,
    parse_runs,
    regions,
    run_frontier,
    upper_envelope,
    verdict_lines,
)
from nlhf.eval.rollouts import Sampling
from nlhf.models import Policy, PolicyConfig
from nlhf.models.judges import FunctionJudge
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm


def test_the_envelope_keeps_the_points_no_lower_kl_point_beats():
    kl = np.array([0.5, 1.0, 2.0, 3.0, 4.0, 0.2])
    win = np.array([0.55, 0.52, 0.70, 0.65, 0.80, 0.50])
    assert upper_envelope(kl, win).tolist() == [5, 0, 2, 4]
    grid = np.array([0.1, 0.5, 1.5, 3.5, 4.0, 5.0])
    got = envelope_at(kl, win, grid)
    assert np.isnan(got[0]) and np.isnan(got[-1])  # below the lowest and beyond the highest
    assert got[1:5].tolist() == [0.55, 0.55, 0.70, 0.80]


def test_the_checkpoint_nearest_a_target_kl_is_chosen_on_a_log_scale_within_a_factor():
    kl = [0.3, 1.4, 2.9, 7.0]
    assert nearest(kl, 2.0) == 1  # |log 1.4 − log 2| < |log 2.9 − log 2|
    assert nearest(kl, 4.0) == 2
    assert nearest(kl, 8.0) == 3
    assert nearest(kl, 32.0) is None  # 7.0 is more than a factor 2 away
    assert nearest([], 1.0) is None


def test_best_of_n_kl_is_the_analytic_formula():
    assert bon_kl(1) == 0.0
    assert bon_kl(2) == pytest.approx(math.log(2) - 0.5)
    assert bon_kl(16) == pytest.approx(math.log(16) - 15 / 16)


def test_best_of_n_win_rate_averages_exactly_over_draws_of_the_pool():
    """Pool scores 0, 1, 2 and a step judge (huge scale): best of 2 from 3 beats a reference
    of score 1 unless the draw is {0, 1}, whose best ties it — P = 2/3·1 + 1/3·½."""
    pool = np.array([[0.0, 1.0, 2.0]])
    ref = np.array([[1.0]])
    assert bon_curve(ref, pool, 2, 1e6)[0] == pytest.approx(2 / 3 + 1 / 6)
    assert bon_curve(ref, pool, 1, 1e6)[0] == pytest.approx((0 + 0.5 + 1) / 3)
    assert bon_curve(ref, pool, 3, 1e6)[0] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="best-of-4"):
        bon_curve(ref, pool, 4, 1.0)


def points_of(method, run, kls, wins, n=40, noise=0.02, seed=0):
    rng = np.random.default_rng(seed)
    return [
        Point(
            method,
            run,
            step,
            f"{method}-r{run}-s{step}",
            np.full(n, k),
            np.clip(w + rng.normal(0, noise, n), 0, 1),
        )
        for step, (k, w) in enumerate(zip(kls, wins, strict=True))
    ]


def test_a_method_whose_frontier_is_higher_beyond_some_kl_is_found_there_and_only_there():
    a = points_of("a", 0, [0.5, 1, 2, 4, 8], [0.60, 0.65, 0.68, 0.70, 0.71])
    b = points_of("b", 0, [0.5, 1, 2, 4, 8], [0.60, 0.65, 0.68, 0.80, 0.85], seed=1)
    grid = np.geomspace(0.5, 8, 30)
    estimate, copies = bootstrap_envelopes(a + b, grid, resamples=300)
    diff_low = np.quantile(copies["b"] - copies["a"], 0.025, axis=0)
    above = regions(grid, diff_low > 0)
    assert len(above) == 1 and 4.0 <= above[0][0] < 4.2 and above[0][1] == pytest.approx(8)
    assert estimate["b"][-1] == pytest.approx(0.85, abs=0.02)


def test_the_dominance_line_says_what_was_compared_and_when_nothing_was():
    compared = {"a": "ppo", "b": "nash-md", "b_above": [], "a_above": [], "compared": [(1, 2)]}
    (line,) = verdict_lines([], [compared])
    assert line.endswith("anywhere over 1–2 nats")
    (line,) = verdict_lines([], [{**compared, "compared": [(1.8255, 1.8255), (3.01, 3.04)]}])
    assert line.endswith("anywhere over 1.8, 3 nats")  # a point reads as one number
    (line,) = verdict_lines([], [{**compared, "compared": []}])
    assert line == (
        "- frontiers of ppo and nash-md: not compared, no KL is reached by both in every "
        "bootstrap copy"
    )


def test_the_band_over_several_runs_is_wider_than_over_one_when_runs_disagree():
    one = points_of("m", 0, [1, 2, 4], [0.6, 0.7, 0.8])
    two = one + points_of("m", 1, [1, 2, 4], [0.5, 0.55, 0.6], seed=2)
    grid = np.array([1.0, 2.0, 4.0])
    width = {}
    for label, pts in (("one", one), ("two", two)):
        _, copies = bootstrap_envelopes(pts, grid, resamples=300)
        width[label] = np.quantile(copies["m"], 0.975, 0) - np.quantile(copies["m"], 0.025, 0)
    assert (width["two"] > 3 * width["one"]).all()


def test_pair_interval_bootstraps_over_runs_and_prompts():
    rng = np.random.default_rng(0)
    same = np.clip(0.6 + rng.normal(0, 0.05, (1, 1, 200)), 0, 1)
    est = pair_interval(same)
    assert est["low"] > 0.58 and est["high"] < 0.62
    spread = np.stack([same[0], same[0] - 0.3])[:, :, :]  # two runs of A that disagree
    wide = pair_interval(spread)
    assert wide["high"] - wide["low"] > 0.2


# --------------------------------------------------------------------------- end to end

PROMPTS = ["hello", "the movie was", "I think", "a b c"]


def count_a(prompt, text):
    return text.count("a")


def fake_run(root, base, tok, method, scales):
    """A training --out folder: a checkpoint per scale of the LoRA B weights (the last one
    the final policy/), as the trainers write them."""
    from transformers import AutoModelForCausalLM

    run = root / method
    policy = Policy(AutoModelForCausalLM.from_pretrained(base), tok, PolicyConfig(lora_r=4))
    torch.manual_seed(7)
    direction = {
        n: torch.randn_like(p) for n, p in policy.model.named_parameters() if "lora_B" in n
    }
    for step, scale in enumerate(scales, 1):
        with torch.no_grad():
            for n, p in policy.model.named_parameters():
                if n in direction:
                    p.copy_(scale * direction[n])
        trainable = {
            n: p.detach().clone() for n, p in policy.model.named_parameters() if p.requires_grad
        }
        if step < len(scales):
            (run / "checkpoints" / f"step-{step}").mkdir(parents=True)
            torch.save({"trainable": trainable}, run / "checkpoints" / f"step-{step}" / "state.pt")
        else:
            policy.save(run / "policy")
    (run / "metrics.jsonl").write_text(json.dumps({"step": len(scales)}) + "\n")
    return run


def test_a_tiny_frontier_end_to_end(tmp_path):
    torch.set_num_threads(1)
    tok = byte_tokenizer()
    base = tiny_causal_lm(
        "llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    with torch.no_grad():  # logits far from uniform, so a LoRA step moves the policy
        base.lm_head.weight.mul_(10.0)
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    folders = {"base": tmp_path / "base"}
    a = fake_run(tmp_path, folders["base"], tok, "a", [0.01, 0.04, 0.15])
    b = fake_run(tmp_path, folders["base"], tok, "b", [0.02, 0.08])
    out = tmp_path / "frontier"
    result = run_frontier(
        [f"a={a}", f"b={b}"],
        PROMPTS,
        FunctionJudge(count_a),
        "count_a",
        sampling=Sampling(samples_per_prompt=2, max_new_tokens=6, batch_size=8),
        targets=(0.5, 5.0),
        bon=(1, 2, 4),
        resamples=50,
        progress=False,
        out=out,
    )
    assert [p.name for p in result.points] == [
        "a-r0-s1",
        "a-r0-s2",
        "a-r0-s3",
        "b-r0-s1",
        "b-r0-s2",
    ]
    kl = {p.name: p.kl.mean() for p in result.points}
    assert kl["a-r0-s1"] < kl["a-r0-s2"] < kl["a-r0-s3"]  # larger LoRA weights, further from μ
    assert (out / "points" / "a-r0-s1" / "adapter_config.json").exists()
    assert [b["n"] for b in result.bon] == [1, 2, 4]
    assert result.bon[0]["win_rate"]["mean"] == pytest.approx(0.5, abs=0.2)
    saved = json.loads((out / "frontier.json").read_text())
    assert len(saved["points"]) == 5 and saved["judge"] == "count_a"
    report = (out / "frontier.md").read_text()
    assert "## Verdicts at matched KL" in report and (out / "frontier.png").stat().st_size > 0
    low, high = result.matched
    assert low["points"] == {"a": ["a-r0-s1"]} and low["pairs"] == []  # b has no point near
    assert high["points"] == {"a": ["a-r0-s2"], "b": ["b-r0-s1"]}
    (pair,) = high["pairs"]
    assert pair["row"] == "a" and pair["col"] == "b" and pair["low"] <= pair["mean"] <= pair["high"]
    assert f"at 5 nats (a {kl['a-r0-s2']:.2f}, b {kl['b-r0-s1']:.2f}): P(a ≻ b)" in report
    assert "at 0.5 nats: only a has a point" in report


def test_runs_are_numbered_per_method_and_a_sweep_shares_one_run():
    got = parse_runs(["ppo=a", "ppo=b", "nash#0=c", "nash#0=d", "nash#1=e", "runs/x"])
    assert [(m, r) for m, r, _ in got] == [
        ("ppo", 0),
        ("ppo", 1),
        ("nash", 0),
        ("nash", 0),
        ("nash", 1),
        ("x", 0),
    ]
    with pytest.raises(ValueError, match="must be a number"):
        parse_runs(["nash#x=c"])


def test_nlhf_eval_frontier_runs_from_the_command_s_config(tmp_path, capsys):
    from nlhf.eval.cli import Config, run

    torch.set_num_threads(1)
    tok = byte_tokenizer()
    base = tiny_causal_lm("llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                          pad_token_id=tok.pad_token_id)  # fmt: skip
    base.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    a = fake_run(tmp_path, tmp_path / "base", tok, "a", [0.05, 0.1])
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ["good", "bad film"]))
    out = tmp_path / "out"
    config = Config(
        policies=[f"a={a}"], frontier=True, judges=["vader"], prompts=str(prompts),
        num_prompts=2, samples_per_prompt=2, max_new_tokens=4, bon=[1, 2], targets=[1.0],
        resamples=20, out=str(out), progress=False,
    )  # fmt: skip
    assert run(config) == 0
    saved = json.loads((out / "frontier.json").read_text())
    assert saved["judge"] == "vader" and [p["step"] for p in saved["points"]] == [1, 2]
    assert "frontier.md" in capsys.readouterr().out

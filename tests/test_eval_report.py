"""Tournament markdown (nlhf.eval.report): one interval formatter for estimates and their
dicts, tables aligned as asked, and completions that cannot break a table."""

import math

import numpy as np

from nlhf.eval.report import (
    completion_tables,
    format_interval,
    markdown_table,
    matrix_table,
    worst_case_columns,
)
from nlhf.eval.stats import Estimate


def test_an_estimate_and_its_dict_are_written_alike():
    e = Estimate(0.6234, 0.5, 0.75, 10)
    assert format_interval(e) == format_interval(e.as_dict()) == "0.62 [0.50, 0.75]"
    assert format_interval(e, 3) == "0.623 [0.500, 0.750]"
    undefined = Estimate(0.6, math.nan, math.nan, 1)
    assert format_interval(undefined) == format_interval(undefined.as_dict()) == "0.60"
    assert format_interval({"accuracy": 0.9, "low": 0.8, "high": 0.95, "n": 40}) == (
        "0.90 [0.80, 0.95]"
    )
    assert format_interval(None) == format_interval({}) == format_interval({"mean": None})
    assert format_interval(None) == "n/a"


def test_a_table_aligns_the_first_column_left_and_the_rest_right_unless_told():
    assert markdown_table(["a", "b", "c"], [["1", "2", "3"]]) == [
        "| a | b | c |",
        "| --- | ---: | ---: |",
        "| 1 | 2 | 3 |",
    ]
    assert markdown_table(["a", "b"], [], "ll")[1] == "| --- | --- |"


def test_completion_tables_escape_the_texts_and_cut_them():
    samples = {"x": [{"prompt": "p|1", "completion": "a\nb"}], "y": [{"prompt": "p|1",
               "completion": "z" * 10}]}  # fmt: skip
    lines = completion_tables(list(samples.items()), 5)
    assert lines[0] == "**Prompt 1:** p\\|1"
    assert "| **x** | a<br>b |" in lines and "| **y** | zzzzz… |" in lines
    assert completion_tables([], 5) == []


def test_a_win_rate_table_shows_each_policy_s_worst_case_and_whom_it_loses_to():
    names = ["ref", "a", "b"]
    mean = np.array([[0.5, 0.3, 0.6], [0.7, 0.5, 0.45], [0.4, 0.55, 0.5]])
    worst = [Estimate(0.3, 0.25, 0.35, 9), Estimate(0.45, 0.4, 0.5, 9), Estimate(0.4, 0.3, 0.5, 9)]
    columns = worst_case_columns(names, worst, [1, 2, 0], [e.as_dict() for e in worst])
    table = matrix_table(names, mean, mean, mean, "P", [("vs rest", ["x", "y", "z"]), *columns])
    lines = table.splitlines()
    assert lines[0].endswith("| vs rest | worst case | vs best response |")
    assert "| y | 0.45 [0.40, 0.50] vs b | 0.45 [0.40, 0.50] |" in lines[3]

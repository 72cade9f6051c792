"""In-memory datasets.Dataset objects through the same adapters (nothing is downloaded)."""

from __future__ import annotations

import pytest

datasets = pytest.importorskip("datasets")

from nlhf.data import (  # noqa: E402
    DataError,
    HHRow,
    LabelColumns,
    PairColumns,
    SHPRow,
    Turn,
    from_hf_dataset,
    prompts_from_records,
)


def test_pair_columns_with_renamed_columns():
    ds = datasets.Dataset.from_dict(
        {"question": ["q1", "q2"], "good": ["a", "b"], "bad": ["c", "d"], "extra": [1, 2]}
    )
    pairs = from_hf_dataset(ds, PairColumns("question", "good", "bad"))
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [("q1", "a", "c"), ("q2", "b", "d")]
    assert pairs.name == "datasets.Dataset"


def test_chat_prompts_and_labels():
    ds = datasets.Dataset.from_list(
        [
            {
                "prompt": [{"role": "user", "content": "Hi"}],
                "response_a": "x",
                "response_b": "y",
                "label": "B",
            },
            {
                "prompt": [{"role": "user", "content": "Yo"}],
                "response_a": "u",
                "response_b": "v",
                "label": "A",
            },
        ]
    )
    pairs = from_hf_dataset(ds, LabelColumns())
    assert pairs[0].prompt == (Turn("user", "Hi"),)
    assert (pairs[0].chosen, pairs[1].chosen) == ("y", "u")


def test_shp_and_hh_rows_from_a_dataset():
    shp = datasets.Dataset.from_dict(
        {
            "history": ["h"],
            "human_ref_A": ["A"],
            "human_ref_B": ["B"],
            "labels": [0],
            "score_ratio": [2.0],
        }
    )
    pair = from_hf_dataset(shp, SHPRow())[0]
    assert (pair.chosen, pair.rejected, pair.margin) == ("B", "A", 2.0)
    hh = datasets.Dataset.from_dict(
        {
            "chosen": ["\n\nHuman: q\n\nAssistant: yes"],
            "rejected": ["\n\nHuman: q\n\nAssistant: no"],
        }
    )
    assert from_hf_dataset(hh, HHRow())[0].prompt == (Turn("user", "q"),)


def test_missing_column_reported_up_front_and_bad_rows_by_index():
    ds = datasets.Dataset.from_dict({"prompt": ["q"], "chosen": ["a"]})
    with pytest.raises(DataError, match=r"no column 'rejected' \(columns: prompt, chosen\)"):
        from_hf_dataset(ds, name="mine")
    bad = datasets.Dataset.from_dict(
        {"prompt": ["q", "q"], "chosen": ["a", ""], "rejected": ["b", "c"]}
    )
    with pytest.raises(DataError, match=r"^mine, row 1, field 'chosen': empty text"):
        from_hf_dataset(bad, name="mine")
    pairs = from_hf_dataset(bad, skip_bad_rows=True)
    assert len(pairs) == 1 and pairs.skipped.counts["empty_text"] == 1
    with pytest.raises(TypeError, match=r"datasets\.Dataset"):
        from_hf_dataset([{"prompt": "q"}])


def test_prompts_from_a_dataset():
    ds = datasets.Dataset.from_dict({"prompt": ["a", "b"]})
    assert [p.content for p in prompts_from_records(ds)] == ["a", "b"]

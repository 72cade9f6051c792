"""Stanford SHP adapter: label direction, score ratio as margin, bad labels."""

from __future__ import annotations

import json

import pytest

from nlhf.data import DataError, SHPRow, load_shp, pairs_from_records


def shp_row(label, **extra):
    return {
        "post_id": "p1",
        "domain": "askculinary_train",
        "history": "How long do I boil an egg?",
        "human_ref_A": "Ten minutes.",
        "human_ref_B": "Never boil eggs.",
        "labels": label,
        **extra,
    }


def test_label_1_means_a_preferred_and_0_b_preferred():
    a_wins, b_wins = pairs_from_records([shp_row(1, score_ratio=3.5), shp_row(0)], SHPRow())
    assert (a_wins.chosen, a_wins.rejected) == ("Ten minutes.", "Never boil eggs.")
    assert (b_wins.chosen, b_wins.rejected) == ("Never boil eggs.", "Ten minutes.")
    assert a_wins.margin == 3.5 and b_wins.margin is None
    assert a_wins.prompt == "How long do I boil an egg?"
    assert a_wins.source == "shp/askculinary_train"


def test_shp_json_lines_file_named_json(tmp_path):
    path = tmp_path / "train.json"  # SHP ships JSON lines under a .json name
    path.write_text("\n".join(json.dumps(r) for r in [shp_row("1"), shp_row(0.0), shp_row(2)]))
    with pytest.raises(DataError) as info:
        load_shp(path)
    assert (info.value.kind, info.value.location, info.value.field) == (
        "bad_label",
        "line 3",
        "labels",
    )
    pairs = load_shp(path, skip_bad_rows=True)
    assert [p.chosen for p in pairs] == ["Ten minutes.", "Never boil eggs."]
    assert dict(pairs.skipped.counts) == {"bad_label": 1}


def test_shp_identical_comments_and_empty_comment():
    with pytest.raises(DataError, match="row 0, field 'human_ref_B': chosen and rejected"):
        pairs_from_records([shp_row(1, human_ref_B="Ten minutes.")], SHPRow())
    with pytest.raises(DataError, match="field 'human_ref_A': empty text"):
        pairs_from_records([shp_row(1, human_ref_A="")], SHPRow())

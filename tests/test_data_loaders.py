"""JSONL / JSON / CSV loaders: column mapping, every kind of bad row, skipping, round trips."""

from __future__ import annotations

import gzip
import json
import logging

import pytest

from nlhf.data import (
    DataError,
    LabelColumns,
    PairColumns,
    PreferencePair,
    PromptColumn,
    Turn,
    load_pairs,
    load_prompts,
    pairs_from_records,
)


def write_jsonl(path, rows):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


GOOD = {"prompt": "Say hi", "chosen": "Hi!", "rejected": "No."}


def test_jsonl_default_columns_with_chat_prompt_and_optional_fields(tmp_path):
    chat = [{"role": "user", "content": "Say hi"}]
    path = write_jsonl(
        tmp_path / "p.jsonl",
        [GOOD, "", {**GOOD, "prompt": chat, "weight": 2, "margin": 0.5, "source": "x"}],
    )
    pairs = load_pairs(path)
    assert len(pairs) == 2 and not pairs.skipped
    assert pairs[0] == PreferencePair("Say hi", "Hi!", "No.")
    assert pairs[1].prompt == (Turn("user", "Say hi"),)
    assert (pairs[1].weight, pairs[1].margin, pairs[1].source) == (2.0, 0.5, "x")


def test_round_trip_through_to_jsonl_plain_and_gzip(tmp_path):
    pairs = pairs_from_records(
        [GOOD, {**GOOD, "prompt": [{"role": "user", "content": "é ✓"}], "margin": 1.5}]
    )
    for name in ("out.jsonl", "out.jsonl.gz"):
        path = pairs.to_jsonl(tmp_path / "sub" / name)
        assert load_pairs(path) == pairs
    assert (
        gzip.open(tmp_path / "sub" / "out.jsonl.gz").read()
        == (tmp_path / "sub" / "out.jsonl").read_bytes()
    )
    assert not list((tmp_path / "sub").glob(".*tmp"))  # atomic write left no temporary file


def test_csv_column_mapping_and_multiline_fields(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text(
        'question,first,second,winner\n"two\nlines",a1,b1,1\nq2,a2,b2,2\nq3,a3,b3, 1 \n',
        encoding="utf-8",
    )
    columns = LabelColumns("question", "first", "second", "winner", a_labels=(1,), b_labels=(2,))
    pairs = load_pairs(path, columns)
    assert [(p.prompt, p.chosen, p.rejected) for p in pairs] == [
        ("two\nlines", "a1", "b1"),
        ("q2", "b2", "a2"),
        ("q3", "a3", "b3"),
    ]
    renamed = tmp_path / "renamed.csv"
    renamed.write_text("\ufeffq,good,bad\nx,y,z\n", encoding="utf-8")  # with a byte-order mark
    assert load_pairs(renamed, PairColumns("q", "good", "bad"))[0] == PreferencePair("x", "y", "z")


def test_tsv_and_json_array(tmp_path):
    tsv = tmp_path / "p.tsv"
    tsv.write_text("prompt\tchosen\trejected\nq\ta, b\tc\n")
    assert load_pairs(tsv)[0].chosen == "a, b"
    array = tmp_path / "p.json"
    array.write_text(json.dumps([GOOD, GOOD]))
    assert len(load_pairs(array)) == 2
    lines = write_jsonl(tmp_path / "lines.json", [GOOD])
    assert len(load_pairs(lines)) == 1
    with pytest.raises(ValueError, match="unknown data format"):
        load_pairs(write_jsonl(tmp_path / "p.txt", [GOOD]))


# One file per kind of bad row: (file content after a good first row, kind, location, field).
JSONL_BAD = [
    ('{"prompt": "q", "chosen": ', "malformed", "line 2", None),
    ("[1, 2]", "malformed", "line 2", None),
    ({"prompt": "q", "rejected": "r"}, "missing_field", "line 2", "chosen"),
    ({"prompt": "q", "chosen": None, "rejected": "r"}, "missing_field", "line 2", "chosen"),
    ({"prompt": "q", "chosen": "  ", "rejected": "r"}, "empty_text", "line 2", "chosen"),
    ({"prompt": "", "chosen": "c", "rejected": "r"}, "empty_text", "line 2", "prompt"),
    ({"prompt": "q", "chosen": "same", "rejected": "same "}, "identical", "line 2", "rejected"),
    ({"prompt": "q", "chosen": 3, "rejected": "r"}, "bad_value", "line 2", "chosen"),
    (
        {"prompt": "q", "chosen": "c", "rejected": "r", "weight": -1},
        "bad_value",
        "line 2",
        "weight",
    ),
    (
        {"prompt": "q", "chosen": "c", "rejected": "r", "margin": "big"},
        "bad_value",
        "line 2",
        "margin",
    ),
]


@pytest.mark.parametrize(("row", "kind", "location", "field"), JSONL_BAD)
def test_each_bad_jsonl_row_raises_with_file_line_and_field(tmp_path, row, kind, location, field):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, row, GOOD])
    with pytest.raises(DataError) as info:
        load_pairs(path)
    err = info.value
    assert (err.kind, err.location, err.field) == (kind, location, field)
    message = str(err)
    assert str(path) in message and location in message
    if field:
        assert f"'{field}'" in message


@pytest.mark.parametrize(("row", "kind", "location", "field"), JSONL_BAD)
def test_each_bad_jsonl_row_is_skipped_and_counted(tmp_path, row, kind, location, field, caplog):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, row, GOOD])
    with caplog.at_level(logging.WARNING, logger="nlhf.data.loader"):
        pairs = load_pairs(path, skip_bad_rows=True)
    assert len(pairs) == 2
    assert dict(pairs.skipped.counts) == {kind: 1}
    assert location in pairs.skipped.examples[kind][0]
    assert "1 row skipped" in caplog.text  # never silent


def test_bad_label_and_csv_structure_errors(tmp_path):
    path = tmp_path / "votes.csv"
    path.write_text(
        "prompt,response_a,response_b,label\n"
        "q1,a,b,A\n"
        "q2,a,b,C\n"  # label outside the allowed set
        "q3,a,b\n"  # a field short
        'q4,"unclosed,b,B\n'  # broken quoting swallows the rest of the file
    )
    with pytest.raises(DataError) as info:
        load_pairs(path, LabelColumns())
    assert (info.value.kind, info.value.location, info.value.field) == (
        "bad_label",
        "line 3",
        "label",
    )
    assert "'C' is not one of 'A', 'a', 'B', 'b'" in str(info.value)
    pairs = load_pairs(path, LabelColumns(), skip_bad_rows=True)
    assert len(pairs) == 1
    assert dict(pairs.skipped.counts) == {"bad_label": 1, "malformed": 2}
    assert any("line 4" in m for m in pairs.skipped.examples["malformed"])
    assert any("line 5" in m for m in pairs.skipped.examples["malformed"])


def test_empty_response_allowed_only_when_asked(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"prompt": "q", "chosen": "", "rejected": "r"}])
    with pytest.raises(DataError, match="empty text"):
        load_pairs(path)
    assert load_pairs(path, allow_empty_response=True)[0].chosen == ""


def test_no_usable_rows_is_an_error_even_when_skipping(tmp_path):
    path = write_jsonl(tmp_path / "p.jsonl", [{"question": "q", "a": "x", "b": "y"}])
    with pytest.raises(DataError) as info:
        load_pairs(path, skip_bad_rows=True)
    assert info.value.kind == "no_rows"
    assert "missing (the row has: question, a, b)" in str(info.value)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataError, match="no usable rows"):
        load_pairs(empty)


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(json.dumps(GOOD).encode() + b"\n" + b'{"prompt": "\xff"}\n')
    with pytest.raises(DataError, match=r"line 2: not valid UTF-8"):
        load_pairs(path, skip_bad_rows=True)


def test_label_columns_reject_overlapping_label_sets():
    with pytest.raises(ValueError, match="cannot mean both"):
        LabelColumns(a_labels=("1",), b_labels=(1,))


def test_prompts_from_jsonl_and_csv(tmp_path):
    path = write_jsonl(
        tmp_path / "prompts.jsonl",
        [{"prompt": "Once upon"}, {"prompt": [{"role": "user", "content": "Hi"}], "source": "s"}],
    )
    prompts = load_prompts(path)
    assert [p.content for p in prompts] == ["Once upon", (Turn("user", "Hi"),)]
    csv_path = tmp_path / "prompts.csv"
    csv_path.write_text("text\nhello\n \n\nworld\n")
    with pytest.raises(DataError) as info:
        load_prompts(csv_path, PromptColumn("text"))
    assert (info.value.kind, info.value.location) == ("empty_text", "line 3")
    prompts = load_prompts(csv_path, PromptColumn("text"), skip_bad_rows=True)
    assert [p.content for p in prompts] == ["hello", "world"]


def test_in_memory_records_are_located_by_index():
    with pytest.raises(DataError, match=r"^records, row 1, field 'rejected'"):
        pairs_from_records([GOOD, {**GOOD, "rejected": "Hi!"}])

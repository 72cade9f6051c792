"""Records of nlhf.data: normalization of chat prompts, value checks, JSON form."""

from __future__ import annotations

import pickle

import pytest

from nlhf.data import DataError, PreferencePair, Prompt, Turn, prompt_messages
from nlhf.data.errors import Skipped


def test_chat_prompt_dicts_become_hashable_turns():
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
    pair = PreferencePair(turns, "Hello.", "Go away.")
    assert pair.prompt == (Turn("system", "Be brief."), Turn("user", "Hi"))
    same = PreferencePair(tuple(Turn(**t) for t in turns), "Hello.", "Go away.")
    assert pair == same and hash(pair) == hash(same)
    assert prompt_messages(pair.prompt) == turns
    assert pair.to_dict()["prompt"] == turns


def test_text_prompt_is_one_user_message():
    assert prompt_messages("Hi") == [{"role": "user", "content": "Hi"}]
    assert Prompt("Once upon").to_dict() == {"prompt": "Once upon", "source": None}


@pytest.mark.parametrize(
    ("kwargs", "kind", "field"),
    [
        ({"prompt": "  "}, "empty_text", "prompt"),
        ({"prompt": []}, "empty_text", "prompt"),
        ({"prompt": [{"role": "user", "content": " "}]}, "empty_text", "prompt"),
        ({"prompt": [{"role": "bot", "content": "x"}]}, "bad_value", "prompt"),
        ({"prompt": [{"content": "x"}]}, "bad_value", "prompt"),
        ({"prompt": 3}, "bad_value", "prompt"),
        ({"chosen": 1}, "bad_value", "chosen"),
        ({"rejected": "good "}, "identical", "rejected"),
        ({"weight": 0.0}, "bad_value", "weight"),
        ({"weight": float("nan")}, "bad_value", "weight"),
        ({"weight": True}, "bad_value", "weight"),
        ({"margin": float("inf")}, "bad_value", "margin"),
        ({"source": 5}, "bad_value", "source"),
    ],
)
def test_bad_values_raise_data_error_naming_the_field(kwargs, kind, field):
    args = {"prompt": "q", "chosen": "good", "rejected": "bad", **kwargs}
    with pytest.raises(DataError) as info:
        PreferencePair(**args)
    assert info.value.kind == kind
    assert info.value.field == field
    assert isinstance(info.value, ValueError)


def test_empty_response_is_allowed_by_the_record_itself():
    pair = PreferencePair("q", "", "something")  # loaders decide (allow_empty_response)
    assert pair.chosen == ""


def test_data_error_message_location_and_pickle():
    err = DataError("empty_text", "empty text", field="chosen").located("a.jsonl", "line 3")
    assert str(err) == "a.jsonl, line 3, field 'chosen': empty text"
    back = pickle.loads(pickle.dumps(err))
    assert (back.kind, back.field, back.source, back.location) == (
        "empty_text",
        "chosen",
        "a.jsonl",
        "line 3",
    )
    with pytest.raises(ValueError, match="unknown DataError kind"):
        DataError("oops", "x")


def test_skipped_counts_and_summary():
    skipped = Skipped(keep_examples=1)
    assert not skipped and skipped.summary() == "no rows skipped"
    for kind in ("bad_label", "bad_label", "malformed"):
        skipped.add(DataError(kind, "x"))
    assert skipped.total == 3 and skipped.counts["bad_label"] == 2
    assert skipped.summary() == "3 rows skipped: 2 bad_label, 1 malformed"
    assert len(skipped.examples["bad_label"]) == 1

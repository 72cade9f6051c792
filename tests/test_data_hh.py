"""Anthropic HH: dialogue splitting on small fixtures and on the packaged harmless-base file."""

from __future__ import annotations

import gzip
import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nlhf.data import (
    DataError,
    HHRow,
    Turn,
    compare_lengths,
    hh_harmless_path,
    length_baseline_accuracy,
    load_hh,
    load_hh_harmless,
    pairs_from_records,
    split_hh_dialogue,
)
from nlhf.data.hh import ASSISTANT


def shared_prefix(texts: list[str]) -> str:
    a, b = texts
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return a[:n]


PROMPT = "\n\nHuman: Hi\n\nAssistant: Hello.\n\nHuman: Help me?"


def test_split_at_the_last_assistant_turn_before_the_difference():
    chosen = PROMPT + "\n\nAssistant: No.\n\nHuman: Why?\n\nAssistant: Because."  # invented turns
    rejected = PROMPT + "\n\nAssistant: Sure."
    pair = pairs_from_records([{"chosen": chosen, "rejected": rejected}], HHRow())[0]
    assert pair.prompt == (
        Turn("user", "Hi"),
        Turn("assistant", "Hello."),
        Turn("user", "Help me?"),
    )
    assert pair.chosen == "No.\n\nHuman: Why?\n\nAssistant: Because."
    assert pair.rejected == "Sure."
    assert pair.source == "hh-rlhf"


def test_replies_that_share_a_prefix_and_a_reply_that_is_a_prefix():
    prompt, a, b = split_hh_dialogue(PROMPT + ASSISTANT + " Yes, ok", PROMPT + ASSISTANT + " Yes")
    assert (prompt, a, b) == (PROMPT, " Yes, ok", " Yes")


def test_empty_chosen_kept_by_default_rejected_on_request():
    row = {"chosen": PROMPT + ASSISTANT + " ", "rejected": PROMPT + ASSISTANT + " Sure."}
    assert pairs_from_records([row], HHRow())[0].chosen == ""
    with pytest.raises(DataError, match="row 0, field 'chosen': empty final reply"):
        pairs_from_records([row], HHRow(), allow_empty_response=False)


@pytest.mark.parametrize(
    ("row", "kind", "field"),
    [
        ({"chosen": PROMPT + " A", "rejected": PROMPT + " A"}, "identical", "rejected"),
        ({"chosen": "\n\nHuman: a", "rejected": "\n\nHuman: b"}, "bad_value", "chosen"),
        (
            {"chosen": "hello" + ASSISTANT + " a", "rejected": "hello" + ASSISTANT + " b"},
            "bad_value",
            "chosen",
        ),
        ({"chosen": PROMPT + ASSISTANT + " a"}, "missing_field", "rejected"),
    ],
)
def test_bad_hh_rows(tmp_path, row, kind, field):
    path = tmp_path / "hh.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataError) as info:
        load_hh(path)
    assert (info.value.kind, info.value.location, info.value.field) == (kind, "line 1", field)


# The packaged file (2,312 rows, 0.1 s to load).


@pytest.fixture(scope="module")
def hh():
    return load_hh_harmless()


@pytest.fixture(scope="module")
def raw_rows():
    with gzip.open(hh_harmless_path(), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_packaged_file_count_and_empty_chosen_rows(hh):
    assert len(hh) == 2312 and not hh.skipped
    assert [i for i, p in enumerate(hh) if not p.chosen] == [86, 516, 925, 1103]
    assert all(p.rejected for p in hh)
    assert all(p.source == "hh-rlhf/harmless-base/test" for p in hh)
    with pytest.raises(DataError) as info:
        load_hh_harmless(allow_empty_response=False)
    assert info.value.location == "line 87"
    strict = load_hh_harmless(skip_bad_rows=True, allow_empty_response=False)
    assert len(strict) == 2308 and dict(strict.skipped.counts) == {"empty_text": 4}


@pytest.mark.parametrize("index", [1254, 1688, 1950, 1952, 2036])
def test_extra_turn_rows_split_where_the_replies_differ(hh, raw_rows, index):
    chosen, rejected = raw_rows[index]["chosen"], raw_rows[index]["rejected"]
    prompt, chosen_reply, rejected_reply = split_hh_dialogue(chosen, rejected)
    # A naive split at the last "Assistant:" would cut inside a reply that invents turns.
    assert max(chosen.rfind(ASSISTANT), rejected.rfind(ASSISTANT)) > len(prompt)
    assert prompt + ASSISTANT + chosen_reply == chosen
    assert prompt + ASSISTANT + rejected_reply == rejected
    differ = len(shared_prefix([chosen, rejected]))
    assert len(prompt) + len(ASSISTANT) <= differ  # the prompt ends before the replies differ
    assert ASSISTANT not in shared_prefix([chosen_reply, rejected_reply])
    replies = hh[index].chosen + hh[index].rejected
    assert "Human:" in replies or "Assistant:" in replies  # invented turns stay in their reply
    assert hh[index].prompt[-1].role == "user"


def test_every_row_reconstructs_and_prompt_ends_before_the_difference(raw_rows):
    for row in raw_rows:
        prompt, a, b = split_hh_dialogue(row["chosen"], row["rejected"])
        assert prompt + ASSISTANT + a == row["chosen"] and prompt + ASSISTANT + b == row["rejected"]
        assert ASSISTANT not in shared_prefix([a, b])


def test_length_statistics_of_the_packaged_file(hh):
    stats = compare_lengths(hh)
    assert (stats.chosen_shorter, stats.chosen_longer, stats.tied) == (1276, 1025, 11)
    assert stats.chosen_shorter / len(hh) == pytest.approx(0.552, abs=5e-4)  # DESIGN.md: 55%
    assert length_baseline_accuracy(hh) == pytest.approx(0.5543, abs=1e-4)
    assert length_baseline_accuracy(hh, prefer="longer") == pytest.approx(0.4457, abs=1e-4)
    words = length_baseline_accuracy(hh, length=lambda t: len(t.split()))
    assert words == pytest.approx(0.5599, abs=1e-4)


def test_split_of_the_packaged_file(hh):
    train, test = hh.split(0.2, seed=0)
    assert len(train) + len(test) == 2312 and 462 <= len(test) <= 463
    assert {p.prompt for p in train}.isdisjoint({p.prompt for p in test})


PIECES = ["a", "b", " ", "\n", "\n\nHuman:", ASSISTANT, "Assistant:"]
replies = st.lists(st.sampled_from(PIECES), max_size=8).map("".join)


@settings(max_examples=200, deadline=None)
@given(first=replies, second=replies)
def test_split_recovers_the_prompt_unless_the_replies_share_a_turn(first, second):
    assume(first != second)
    chosen, rejected = PROMPT + ASSISTANT + first, PROMPT + ASSISTANT + second
    prompt, a, b = split_hh_dialogue(chosen, rejected)
    assert prompt + ASSISTANT + a == chosen and prompt + ASSISTANT + b == rejected
    assert (prompt == PROMPT) == (ASSISTANT not in shared_prefix([first, second]))

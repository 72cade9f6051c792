"""PreferenceDataset / PromptDataset: sequence behaviour and the deterministic split."""

from __future__ import annotations

import random

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nlhf.data import PreferenceDataset, PreferencePair, Prompt, PromptDataset


def make_pairs(n: int, per_prompt: int = 1) -> PreferenceDataset:
    return PreferenceDataset(
        (PreferencePair(f"prompt {i // per_prompt}", f"good {i}", f"bad {i}") for i in range(n)),
        name="toy",
    )


def test_sequence_behaviour():
    pairs = make_pairs(10)
    assert len(pairs) == 10
    assert pairs[3].chosen == "good 3" and pairs[-1].chosen == "good 9"
    assert isinstance(pairs[2:5], PreferenceDataset) and len(pairs[2:5]) == 3
    assert [p.chosen for p in pairs][:2] == ["good 0", "good 1"]
    assert "toy" in repr(pairs) and "10 records" in repr(pairs)


def test_split_is_deterministic_exact_and_disjoint():
    pairs = make_pairs(200)
    train, test = pairs.split(0.2, seed=3)
    again_train, again_test = pairs.split(0.2, seed=3)
    assert train == again_train and test == again_test
    assert (len(train), len(test)) == (160, 40)
    assert set(train).isdisjoint(test) and set(train) | set(test) == set(pairs)
    assert [p for p in pairs if p in set(test)] == list(test)  # original order kept
    _, other = pairs.split(0.2, seed=4)
    assert other != test


def test_split_does_not_depend_on_input_order():
    pairs = make_pairs(100)
    shuffled = list(pairs)
    random.Random(0).shuffle(shuffled)
    _, test = pairs.split(0.3, seed=0)
    _, test_shuffled = PreferenceDataset(shuffled).split(0.3, seed=0)
    assert set(test) == set(test_shuffled)


def test_split_keeps_prompts_together():
    pairs = make_pairs(90, per_prompt=3)
    train, test = pairs.split(0.2, seed=1)
    assert {p.prompt for p in train}.isdisjoint({p.prompt for p in test})
    assert len(test) == 18  # 18 = 0.2 · 90 is a multiple of 3: no overshoot
    _, loose = pairs.split(0.2, seed=1, by_prompt=False)
    assert {p.prompt for p in loose} & {p.prompt for p in pairs.split(0.8, seed=1)[1]}


def test_split_rejects_fractions_that_leave_a_side_empty():
    with pytest.raises(ValueError, match="strictly between"):
        make_pairs(10).split(1.0)
    with pytest.raises(ValueError, match="leaves one side empty"):
        make_pairs(3).split(0.1)
    with pytest.raises(ValueError, match="training side empty: the 4 records fall in 1 prompt"):
        make_pairs(4, per_prompt=4).split(0.5)


def test_prompt_dataset_split_and_jsonl(tmp_path):
    prompts = PromptDataset(Prompt(f"p{i}") for i in range(20))
    train, test = prompts.split(0.25, seed=0)
    assert (len(train), len(test)) == (15, 5)
    path = test.to_jsonl(tmp_path / "test.jsonl")
    assert path.read_text().count("\n") == 5


@settings(max_examples=50, deadline=None)
@given(
    n=st.integers(2, 60),
    per_prompt=st.integers(1, 4),
    fraction=st.floats(0.05, 0.95),
    seed=st.integers(0, 10**6),
)
def test_split_is_a_partition(n, per_prompt, fraction, seed):
    pairs = make_pairs(n, per_prompt)
    target = round(fraction * n)
    assume(0 < target < n and len({p.prompt for p in pairs}) > 1)
    try:
        train, test = pairs.split(fraction, seed=seed)
    except ValueError as err:  # only when whole-prompt groups cannot leave both sides non-empty
        assert "training side empty" in str(err)
        return
    assert sorted(map(hash, [*train, *test])) == sorted(map(hash, pairs))
    assert target <= len(test) < target + per_prompt

"""The online training core's parts: prompt order, per-row seeding, config checks.  (What
Nash-MD-PG does in the loop, NaN handling included, is in test_train_nash_md.py.)"""

import pytest

from nlhf.models.sampling import row_generators
from nlhf.train.online import OnlineConfig, step_rows


def test_prompt_order_is_a_permutation_per_pass_and_seeded():
    rows = [r for step in range(5) for r in step_rows(step, 4, 20, seed=1)]
    assert sorted(rows) == list(range(20))  # one pass: every prompt once
    assert step_rows(3, 4, 20, seed=1) == step_rows(3, 4, 20, seed=1)
    assert step_rows(3, 4, 20, seed=1) != step_rows(3, 4, 20, seed=2)


def test_row_generators_do_not_depend_on_batching():
    a = [g.initial_seed() for g in row_generators(0, 5, [0, 1, 2, 3])]
    b = [g.initial_seed() for g in row_generators(0, 5, [2, 3])]
    assert a[2:] == b and len(set(a)) == 4


def test_config_checks():
    with pytest.raises(ValueError, match="multiple of grad_accum"):
        OnlineConfig(batch_size=6, grad_accum=4)
    with pytest.raises(ValueError, match="steps must be ≥ 1"):
        OnlineConfig(steps=0)
    with pytest.raises(ValueError, match="dtype=bfloat16 needs LoRA"):
        OnlineConfig(dtype="bfloat16", lora_r=0)

"""``Caller``: one forward with the keyword names the model expects; the last positions'
logits are exactly those of a full forward."""

import pytest
import torch

from nlhf.models.lm import Caller
from nlhf.models.tiny import tiny_causal_lm


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("keep", [1, 3])
def test_logits_to_keep_gives_the_last_positions_of_a_full_forward(kind, keep):
    model = tiny_causal_lm(kind, vocab_size=40)
    ids = torch.randint(2, 40, (3, 6), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, :2] = 0  # a left-padded row
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    call = Caller(model)
    with torch.no_grad():
        full = call(ids, mask, pos)
        last = call(ids, mask, pos, logits_to_keep=keep)
    assert last.shape == (3, keep, 40)
    torch.testing.assert_close(last, full[:, -keep:], atol=1e-6, rtol=0)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_one_token_input_keeps_its_logits(kind):
    model = tiny_causal_lm(kind, vocab_size=40)
    ids = torch.tensor([[5], [7]])
    mask, pos = torch.ones_like(ids), torch.zeros_like(ids)
    with torch.no_grad():
        full = Caller(model)(ids, mask, pos)
        last = Caller(model)(ids, mask, pos, logits_to_keep=1)
    assert last.shape == (2, 1, 40)
    torch.testing.assert_close(last, full, atol=1e-6, rtol=0)

"""The preallocated KV cache gives the same logits as transformers' growing DynamicCache."""

import pytest
import torch

from nlhf.models.kv_cache import PreallocatedLayer, new_cache
from nlhf.models.tiny import tiny_causal_lm


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def decode(model, cache, prompt, steps, reorder=None):
    """Greedy decode with a cache; ``reorder`` selects/repeats rows after the prompt."""
    rows, width = prompt.shape
    with torch.no_grad():
        pos = torch.arange(width).expand(rows, width)
        logits = model(input_ids=prompt, position_ids=pos, cache=cache, use_cache=True).logits
        last = logits[:, -1]
        if reorder is not None:
            cache.reorder_cache(reorder)
            last = last.index_select(0, reorder)
        out = [last]
        for t in range(steps):
            tok = last.argmax(-1, keepdim=True)
            pos = torch.full((tok.shape[0], 1), width + t)
            mask = torch.ones(tok.shape[0], width + t + 1, dtype=torch.long)
            last = model(
                input_ids=tok, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True
            ).logits[:, -1]
            out.append(last)
    return torch.stack(out, 1)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_same_logits_as_dynamic_cache_with_row_reordering(kind):
    model = tiny_causal_lm(kind, vocab_size=40)
    prompt = torch.randint(2, 40, (2, 5), generator=torch.Generator().manual_seed(0))
    index = torch.tensor([1, 0, 1])
    pre = new_cache(model.config, capacity=5 + 6)
    assert all(isinstance(layer, PreallocatedLayer) for layer in pre.layers)
    plain = new_cache(model.config)
    assert not any(isinstance(layer, PreallocatedLayer) for layer in plain.layers)
    got = decode(model, pre, prompt, 6, index)
    expected = decode(model, plain, prompt, 6, index)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=0)
    assert pre.get_seq_length() == 11


def test_full_cache_is_an_error():
    model = tiny_causal_lm("gpt2", vocab_size=40)
    cache = new_cache(model.config, capacity=4)
    with pytest.raises(RuntimeError, match="KV cache of 4 positions is full"):
        decode(model, cache, torch.randint(2, 40, (1, 3)), 3)

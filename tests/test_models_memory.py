"""Loaded weights are copied out of the memory-mapped checkpoint, tied weights stay tied."""

import torch

from nlhf.models import Policy, PolicyConfig
from nlhf.models.memory import into_memory
from nlhf.models.tiny import byte_tokenizer, tiny_causal_lm


def test_into_memory_gives_every_tensor_its_own_storage_and_keeps_ties():
    tok = byte_tokenizer()
    model = tiny_causal_lm("gpt2", vocab_size=len(tok), seed=0)
    assert model.lm_head.weight is model.transformer.wte.weight  # tied
    before = {n: (p.data_ptr(), p.detach().clone()) for n, p in model.named_parameters()}
    into_memory(model)
    assert model.lm_head.weight is model.transformer.wte.weight
    for n, p in model.named_parameters():
        ptr, value = before[n]
        assert p.data_ptr() != ptr, n
        torch.testing.assert_close(p.detach(), value, rtol=0, atol=0)


def test_loaded_policy_weights_are_not_views_of_the_file(tmp_path):
    import numpy as np

    tok = byte_tokenizer()
    tiny_causal_lm("gpt2", vocab_size=len(tok), seed=0).save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = Policy.load(PolicyConfig(model=str(tmp_path), lora_r=0))
    mapped = np.memmap(tmp_path / "model.safetensors", mode="r")
    start = mapped.ctypes.data
    end = start + mapped.size
    for name, p in policy.model.named_parameters():
        assert not start <= p.data_ptr() < end, name

"""``nlhf.models.text``: prompts become left-padded tokens with nothing added, completions
become their masked tokens' text, and the end/pad ids come from the tokenizer first."""

from types import SimpleNamespace

import torch

from nlhf.models import Policy, PolicyConfig
from nlhf.models.text import decode_completions, eos_token_ids, pad_token_id, tokenize_prompts
from nlhf.models.tiny import byte_tokenizer, tiny_byte_lm


def test_prompts_are_left_padded_without_special_tokens():
    tok = byte_tokenizer()
    tok.padding_side = "right"
    ids, mask = tokenize_prompts(tok, ["abc", "a"], "cpu")
    assert tok.padding_side == "left"
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    a, b, c = (tok.convert_tokens_to_ids(ch) for ch in "abc")
    assert ids.tolist() == [[a, b, c], [tok.pad_token_id, tok.pad_token_id, a]]  # no BOS/EOS


def test_completions_keep_their_masked_tokens_and_whitespace():
    tok = byte_tokenizer()
    text = [tok.convert_tokens_to_ids(ch) for ch in tok.tokenize(" hi ")]
    eos, pad = tok.eos_token_id, tok.pad_token_id
    tokens = torch.tensor([[*text, eos, pad], [*text, pad, pad]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 0, 0, 0, 0]])
    assert decode_completions(tok, tokens, mask) == [" hi ", " h"]  # EOS dropped, no strip


def test_end_and_pad_ids_prefer_the_tokenizer_then_the_configs():
    model, tok = tiny_byte_lm("gpt2")
    assert eos_token_ids(model, tok) == [tok.eos_token_id]
    assert pad_token_id(model, tok) == tok.pad_token_id
    assert eos_token_ids(model) == [model.config.eos_token_id]
    assert pad_token_id(model) == model.config.pad_token_id
    bare = SimpleNamespace(config=SimpleNamespace(eos_token_id=[5, 6], pad_token_id=None))
    assert eos_token_ids(bare) == [5, 6] and pad_token_id(bare) == 5  # pad: the first EOS
    assert eos_token_ids(SimpleNamespace()) == [] and pad_token_id(SimpleNamespace()) == 0
    policy = Policy(model, tok, PolicyConfig())
    assert policy.eos_token_ids == [tok.eos_token_id] and policy.pad_token_id == tok.pad_token_id

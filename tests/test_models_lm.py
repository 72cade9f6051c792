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


def test_as_model_takes_models_and_views_and_names_the_role_otherwise():
    from nlhf.models import Policy, PolicyConfig
    from nlhf.models.lm import as_model

    model = tiny_causal_lm("gpt2", vocab_size=40)
    assert as_model(model, "policy") is model
    policy = Policy(model, None, PolicyConfig(lora_r=2))
    assert as_model(policy.reference, "reference") is not None
    with pytest.raises(TypeError, match=r"reference: .*policy\.model.*got Policy"):
        as_model(policy, "reference")  # a Policy is unwrapped by the callers that take one


def test_lm_is_a_leaf_of_the_models_package():
    import ast
    from pathlib import Path

    import nlhf.models.lm as lm

    tree = ast.parse(Path(lm.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    ours = {name for name in imported if name.startswith("nlhf")}
    # no policy, no logprobs (nlhf.models.errors imports only nlhf.errors)
    assert ours == {"nlhf.models.errors", "nlhf.models.kv_cache", "nlhf.models.memory"}


def test_load_causal_lm_from_folders(tmp_path):
    from nlhf.models.lm import load_causal_lm, load_tokenizer
    from nlhf.models.tiny import byte_tokenizer

    tok = byte_tokenizer()
    tok.pad_token = None  # a tokenizer without a pad token gets EOS
    model = tiny_causal_lm("llama", vocab_size=len(tok), eos_token_id=tok.eos_token_id)
    model.save_pretrained(tmp_path / "model")
    tok.save_pretrained(tmp_path / "model")
    loaded, loaded_tok = load_causal_lm(str(tmp_path / "model"), "bfloat16")
    assert not loaded.training and next(loaded.parameters()).dtype == torch.bfloat16
    assert loaded_tok.padding_side == "left"
    assert loaded_tok.pad_token_id == loaded_tok.eos_token_id == tok.eos_token_id
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(loaded.state_dict()[name], tensor.to(torch.bfloat16))
    # an adapter folder without tokenizer files is passed over for the next folder
    (tmp_path / "adapter").mkdir()
    assert load_tokenizer(str(tmp_path / "adapter"), str(tmp_path / "model")).get_vocab() == (
        tok.get_vocab()
    )
    with pytest.raises(OSError, match="adapter: no tokenizer files"):
        load_tokenizer(str(tmp_path / "adapter"))
    with pytest.raises(OSError, match="missing: cannot load a causal LM"):
        load_causal_lm(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_causal_lm(str(tmp_path / "model"), "float64")

"""The lean decode path samples what the transformers path samples; other models fall back."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

from nlhf.models import Policy, PolicyConfig, sample, sample_pair
from nlhf.models import sampling as sampling_module
from nlhf.models.decode_lean import StaticCache, lean_unsupported
from nlhf.models.tiny import randomize_lora, tiny_causal_lm

VOCAB, EOS, PAD = 48, 1, 0
CLOSE = {"atol": 2e-5, "rtol": 0}


@pytest.fixture(autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def prompts():
    rows = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
    width = max(map(len, rows))
    ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return ids, mask


def grouped_query_llama(seed: int = 0) -> LlamaForCausalLM:
    """A tiny Llama with 4 query heads sharing 2 key/value heads and tied embeddings, as
    SmolLM2 has."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    return LlamaForCausalLM(config).eval()


def model(kind: str, seed: int = 0) -> torch.nn.Module:
    if kind == "llama-gqa":
        return grouped_query_llama(seed)
    return tiny_causal_lm(kind, vocab_size=VOCAB, seed=seed, eos_token_id=EOS, pad_token_id=PAD)


def assert_same(lean, general) -> None:
    assert torch.equal(lean.tokens, general.tokens)
    assert torch.equal(lean.mask, general.mask)
    torch.testing.assert_close(lean.policy_logprobs, general.policy_logprobs, **CLOSE)
    torch.testing.assert_close(lean.sampling_logprobs, general.sampling_logprobs, **CLOSE)
    if general.ref_logprobs is None:
        assert lean.ref_logprobs is None
    else:
        torch.testing.assert_close(lean.ref_logprobs, general.ref_logprobs, **CLOSE)


def on_both_paths(sampler, *args, seed: int = 7, **kwargs) -> dict:
    """``sampler(*args, **kwargs)`` on the lean and the transformers path, each with a fresh
    generator seeded ``seed``."""
    return {
        decoder: sampler(
            *args, generator=torch.Generator().manual_seed(seed), decoder=decoder, **kwargs
        )
        for decoder in ("lean", "transformers")
    }


@pytest.mark.parametrize("kind", ["gpt2", "llama", "llama-gqa"])
def test_lean_path_samples_the_same_pairs_and_logprobs_as_transformers(kind):
    policy, reference = model(kind, seed=0), model(kind, seed=1)
    ids, mask = prompts()
    runs = on_both_paths(sample_pair, policy, ids, mask, 20, reference=reference, beta=0.4)
    for lean, general in zip(runs["lean"], runs["transformers"], strict=True):
        assert_same(lean, general)
    assert runs["lean"][1].tokens.ne(runs["lean"][0].tokens).any()  # y′ is not a copy of y


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_lean_path_matches_with_several_samples_top_k_and_row_generators(kind):
    policy = Policy(model(kind))
    ids, mask = prompts()
    generators = [torch.Generator().manual_seed(row) for row in range(6)]
    runs = {
        decoder: sample(
            policy,
            ids,
            mask,
            16,
            reference=policy.reference,
            temperature=0.8,
            top_k=10,
            generator=[torch.Generator().set_state(g.get_state()) for g in generators],
            num_samples=2,
            decoder=decoder,
        )
        for decoder in ("lean", "transformers")
    }
    assert_same(runs["lean"], runs["transformers"])


def test_auto_takes_the_lean_path_for_supported_models(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the transformers path was taken")

    monkeypatch.setattr(sampling_module, "GeneralForwards", refuse)
    policy = Policy(model("llama"))
    ids, mask = prompts()
    y, _ = sample_pair(policy, ids, mask, 4, reference=policy.reference)
    assert y.tokens.shape == (3, 4)


def test_an_unsupported_architecture_falls_back_to_transformers(monkeypatch):
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=48,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        eos_token_id=EOS,
        pad_token_id=PAD,
    )
    qwen = Qwen2ForCausalLM(config).eval()
    assert "Qwen2ForCausalLM" in lean_unsupported(qwen)
    ids, mask = prompts()
    with pytest.raises(ValueError, match="decoder='lean' cannot run this model"):
        sample(qwen, ids, mask, 4, decoder="lean")

    def refuse(*args, **kwargs):
        raise AssertionError("the lean path was taken")

    monkeypatch.setattr(sampling_module, "LeanForwards", refuse)
    out = sample(qwen, ids, mask, 4, generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (3, 4)


def lora_policy(kind: str) -> Policy:
    """A LoRA policy whose adapter changes the logits."""
    policy = Policy(model(kind), None, PolicyConfig(lora_r=2, lora_alpha=4))
    randomize_lora(policy.model, std=0.3, seed=3)
    return policy


@pytest.mark.parametrize("kind", ["gpt2", "llama-gqa"])
@pytest.mark.parametrize("fuse", [None, False])
def test_a_lora_policy_and_its_reference_view_sample_on_the_lean_path_as_in_peft(kind, fuse):
    """One shared forward (fuse None) or one per model: the same pairs as peft's."""
    policy = lora_policy(kind)
    ids, mask = prompts()
    runs = on_both_paths(
        sample_pair, policy, ids, mask, 12, reference=policy.reference, beta=0.4, fuse=fuse
    )
    for lean, general in zip(runs["lean"], runs["transformers"], strict=True):
        assert_same(lean, general)
    base = sample(policy.reference, ids, mask, 12, generator=torch.Generator().manual_seed(7))
    assert not torch.allclose(runs["lean"][0].policy_logprobs, base.policy_logprobs)


def test_one_of_several_adapters_decodes_lean_against_a_separate_reference():
    """The tournament's case: named adapters on one base, the active one sampled, the KL
    read from a reference loaded on its own."""
    policy = lora_policy("llama")
    peft = policy.model
    peft.add_adapter("other", peft.peft_config["default"])
    peft.set_adapter("other")  # a fresh adapter: B = 0, the base's logits
    reference = model("llama")
    ids, mask = prompts()
    for name, same_as_base in (("other", True), ("default", False)):
        peft.set_adapter(name)
        runs = on_both_paths(sample, peft, ids, mask, 8, reference=reference, seed=1)
        assert_same(runs["lean"], runs["transformers"])
        exact = runs["lean"].exact_kl.abs().max()
        assert (exact < 1e-5) if same_as_base else (exact > 1e-3)


def test_dora_falls_back_to_transformers():
    from peft import LoraConfig, get_peft_model

    peft = get_peft_model(model("llama"), LoraConfig(r=2, use_dora=True, target_modules=["q_proj"]))
    assert "variant" in lean_unsupported(peft)
    ids, mask = prompts()
    with pytest.raises(ValueError, match="decoder='lean'"):
        sample(peft, ids, mask, 3, decoder="lean")
    out = sample(peft, ids, mask, 3, generator=torch.Generator().manual_seed(0))
    assert out.tokens.shape == (3, 3)


def test_the_static_cache_fills_every_row_and_appends_in_place():
    like = torch.zeros(1)
    cache = StaticCache(layers=1, rows=4, heads=2, capacity=5, head_dim=3, like=like)
    keys = torch.randn(2, 2, 3, 3)
    cache.fill(0, keys, keys + 1, torch.tensor([0, 1, 0, 1]))
    assert torch.equal(cache.keys[0][:2, :, :3], keys)
    assert torch.equal(cache.keys[0][2:, :, :3], keys)
    assert torch.equal(cache.values[0][2:, :, :3], keys + 1)
    storage = cache.keys[0].data_ptr()
    new = torch.randn(4, 2, 1, 3)
    k, _ = cache.append(0, new, new, slot=3)
    assert k.shape == (4, 2, 4, 3) and torch.equal(k[:, :, 3:], new)
    assert cache.keys[0].data_ptr() == storage
    cache.fill(0, keys[:1], keys[:1], torch.zeros(4, dtype=torch.long))  # one prompt, four rows
    assert all(torch.equal(cache.keys[0][r, :, :3], keys[0]) for r in range(4))


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
@pytest.mark.parametrize("decoder", ["lean", "transformers"])
def test_a_repeated_prompt_is_prefilled_once_and_samples_as_separate_rows(kind, decoder):
    """Rows that repeat a prompt share its prefill and sample exactly what they sample
    beside a different prompt, on both decode paths."""
    ids, mask = prompts()
    repeated_ids, repeated_mask = ids[[0, 1, 0, 0]], mask[[0, 1, 0, 0]]
    lm = model(kind)
    gens = lambda: [torch.Generator().manual_seed(s) for s in (5, 6, 7, 8)]  # noqa: E731
    together = sample(lm, repeated_ids, repeated_mask, 6, generator=gens(), decoder=decoder)
    for r, g in enumerate(gens()):
        alone = sample(
            lm, repeated_ids[r : r + 1], repeated_mask[r : r + 1], 6, generator=[g], decoder=decoder
        )
        assert torch.equal(together.tokens[r, : alone.tokens.shape[1]], alone.tokens[0])
        torch.testing.assert_close(
            together.policy_logprobs[r, : alone.tokens.shape[1]],
            alone.policy_logprobs[0],
            atol=1e-5,
            rtol=1e-5,
        )


def test_an_unknown_decoder_is_refused():
    ids, mask = prompts()
    with pytest.raises(ValueError, match="decoder must be one of"):
        sample(model("gpt2"), ids, mask, 2, decoder="fast")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kind", ["gpt2", "llama-gqa"])
def test_on_cuda_the_lean_path_samples_what_transformers_samples(kind):
    policy, reference = model(kind, seed=0).cuda(), model(kind, seed=1).cuda()
    ids, mask = prompts()
    runs = {
        decoder: sample_pair(
            policy,
            ids.cuda(),
            mask.cuda(),
            12,
            reference=reference,
            beta=0.4,
            generator=torch.Generator(device="cuda").manual_seed(7),
            decoder=decoder,
        )
        for decoder in ("lean", "transformers")
    }
    for lean, general in zip(runs["lean"], runs["transformers"], strict=True):
        assert lean.tokens.is_cuda
        assert_same(lean, general)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_an_automatic_reference_is_bfloat16_with_a_bounded_error():
    policy = Policy(model("llama")).to("cuda")
    assert {p.dtype for p in policy.reference.parameters()} == {torch.bfloat16}
    ids, mask = prompts()
    comp = torch.randint(2, VOCAB, (3, 8))
    exact = policy.logprobs(ids.cuda(), mask.cuda(), comp.cuda()).detach()
    error = (policy.reference_logprobs(ids.cuda(), mask.cuda(), comp.cuda()) - exact).abs()
    assert error.max() <= 0.01

"""KV-cached sampling: recorded log-probs, the mixture distribution, RNG, padding, EOS, LoRA."""

import copy

import pytest
import torch

from nlhf.models import Policy, PolicyConfig, mixture_logits, row_generators, sample, sample_pair
from nlhf.models.lm import AdapterDisabled
from nlhf.models.logprobs import completion_kl, completion_logprobs, position_ids_from_mask
from nlhf.models.tiny import randomize_lora, tiny_causal_lm

KINDS = ["gpt2", "llama"]
VOCAB = 32
EOS, PAD = 1, 0


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and do not stall when the CPUs are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def prompts():
    rows = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    width = max(map(len, rows))
    ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
    return rows, ids, mask


def perturb(module: torch.nn.Module, scale: float = 0.5, seed: int = 3) -> None:
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(scale * p.std().nan_to_num(0.02) * torch.randn_like(p))


def full_policy(kind: str = "gpt2") -> Policy:
    """A policy whose weights moved away from its frozen reference (π ≠ μ)."""
    policy = Policy(tiny_causal_lm(kind, vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD))
    perturb(policy.model)
    return policy


def lora_policy(kind: str = "gpt2") -> Policy:
    model = tiny_causal_lm(kind, vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD)
    policy = Policy(model, None, PolicyConfig(lora_r=4, lora_alpha=8))
    randomize_lora(policy.model, std=0.5, seed=1)
    return policy


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def full_forward_mixture(policy: Policy, ids, mask, out, beta: float) -> torch.Tensor:
    """log π_β of the sampled tokens, recomputed from full forwards without any cache."""
    full_ids, full_mask = out.with_prompt(ids, mask)
    pos = position_ids_from_mask(full_mask)
    width = ids.shape[1]
    with torch.no_grad():
        logits = [
            m(input_ids=full_ids, attention_mask=full_mask, position_ids=pos).logits[
                :, width - 1 : -1
            ]
            for m in (policy.model, policy.reference)
        ]
    mix = mixture_logits(logits[0], logits[1], beta)
    return mix.gather(-1, out.tokens.unsqueeze(-1)).squeeze(-1).masked_fill(out.mask == 0, 0.0)


def assert_matches_fresh_forward(policy: Policy, ids, mask, out, beta: float) -> None:
    """Recorded policy / reference / sampling log-probs and the exact KL along each row equal
    fresh full forwards to 1e-5."""
    close = {"atol": 1e-5, "rtol": 0}
    torch.testing.assert_close(
        out.policy_logprobs, policy.logprobs(ids, mask, out.tokens, out.mask).detach(), **close
    )
    torch.testing.assert_close(
        out.ref_logprobs, policy.reference_logprobs(ids, mask, out.tokens, out.mask), **close
    )
    torch.testing.assert_close(
        out.sampling_logprobs, full_forward_mixture(policy, ids, mask, out, beta), **close
    )
    kl = completion_kl(policy.model, policy.reference, ids, mask, out.tokens, out.mask)
    assert float(kl.min()) > 0.0  # π ≠ μ on every row
    torch.testing.assert_close(out.exact_kl.sum(-1), kl, **close)
    assert bool((out.exact_kl[out.mask == 0] == 0).all())


@pytest.mark.parametrize("kind", KINDS)
def test_pair_logprobs_equal_a_fresh_forward(kind):
    policy = full_policy(kind)
    _, ids, mask = prompts()
    y, y_mix = sample_pair(
        policy, ids, mask, 12, reference=policy.reference, beta=0.3, generator=gen()
    )
    assert y.tokens.shape == y_mix.tokens.shape == (3, 12)
    assert (y.beta, y_mix.beta) == (0.0, 0.3)
    assert_matches_fresh_forward(policy, ids, mask, y, 0.0)
    assert_matches_fresh_forward(policy, ids, mask, y_mix, 0.3)
    torch.testing.assert_close(y.sampling_logprobs, y.policy_logprobs)


@pytest.mark.parametrize("make", [full_policy, lora_policy])
def test_repeated_prompt_rows_record_what_a_fresh_forward_gives(make):
    """Rows that repeat a prompt share one prefill (fused LoRA and lean paths alike) and
    still record the log-probs and KL of a fresh forward."""
    policy = make("llama")
    _, ids, mask = prompts()
    ids, mask = ids[[0, 1, 0, 0]], mask[[0, 1, 0, 0]]
    y, y_mix = sample_pair(
        policy, ids, mask, 8, reference=policy.reference, beta=0.3, generator=gen()
    )
    assert_matches_fresh_forward(policy, ids, mask, y, 0.0)
    assert_matches_fresh_forward(policy, ids, mask, y_mix, 0.3)
    assert not torch.equal(y.tokens[0], y.tokens[2])  # same prompt, own draws


@pytest.mark.parametrize("kind", KINDS)
def test_lora_fused_and_separate_forwards_agree(kind):
    policy = lora_policy(kind)
    assert isinstance(policy.reference, AdapterDisabled)
    _, ids, mask = prompts()
    runs = {
        fuse: sample_pair(
            policy, ids, mask, 10, reference=policy.reference, beta=0.5, generator=gen(), fuse=fuse
        )
        for fuse in (True, False)
    }
    for fused, separate in zip(runs[True], runs[False], strict=True):
        assert torch.equal(fused.tokens, separate.tokens)
        torch.testing.assert_close(
            fused.policy_logprobs, separate.policy_logprobs, atol=1e-5, rtol=0
        )
        torch.testing.assert_close(fused.ref_logprobs, separate.ref_logprobs, atol=1e-5, rtol=0)
    y, y_mix = runs[True]
    assert_matches_fresh_forward(policy, ids, mask, y, 0.0)
    assert_matches_fresh_forward(policy, ids, mask, y_mix, 0.5)


def test_mixture_first_token_frequencies():
    """20k draws of the first token match normalized π^(1−β) μ^β within 5 standard errors."""
    models = []
    for seed, perm in ((0, [0, 1, 2, 3, 4, 5]), (1, [4, 0, 5, 1, 2, 3])):
        model = tiny_causal_lm(
            "gpt2", vocab_size=6, layers=1, hidden=16, seed=seed, eos_token_id=None, pad_token_id=0
        )
        with torch.no_grad():
            model.transformer.ln_f.weight.mul_(10.0)  # sharpen the near-uniform random logits
            model.transformer.wte.weight.copy_(model.transformer.wte.weight[perm])
        models.append(model)
    pi, mu = models
    rows, beta = 20_000, 0.4
    ids, mask = torch.tensor([[2, 3, 4]]), torch.ones(1, 3, dtype=torch.long)
    with torch.no_grad():
        logits = [m(input_ids=ids).logits[0, -1] for m in (pi, mu)]
    expected = mixture_logits(logits[0], logits[1], beta).exp().double()
    assert (expected - torch.softmax(logits[0].double(), -1)).abs().max() > 0.05  # π_β ≠ π
    assert (expected - torch.softmax(logits[1].double(), -1)).abs().max() > 0.05  # π_β ≠ μ
    out = sample(
        pi, ids.expand(rows, 3), mask.expand(rows, 3), 1, reference=mu, beta=beta, generator=gen(7)
    )
    freq = torch.bincount(out.tokens[:, 0], minlength=6).double() / rows
    se = (expected * (1 - expected) / rows).sqrt()
    assert ((freq - expected).abs() < 5 * se + 1e-9).all(), (freq, expected)


def test_beta_zero_is_plain_sampling_and_beta_one_samples_the_reference():
    policy = full_policy()
    _, ids, mask = prompts()
    plain = sample(policy, ids, mask, 10, generator=gen(4))
    assert plain.ref_logprobs is None
    zero = sample(policy, ids, mask, 10, reference=policy.reference, beta=0.0, generator=gen(4))
    assert torch.equal(plain.tokens, zero.tokens) and zero.ref_logprobs is not None
    one = sample(policy, ids, mask, 10, reference=policy.reference, beta=1.0, generator=gen(4))
    from_ref = sample(policy.reference, ids, mask, 10, generator=gen(4))
    assert torch.equal(one.tokens, from_ref.tokens)
    assert not torch.equal(one.tokens, plain.tokens)
    torch.testing.assert_close(one.sampling_logprobs, one.ref_logprobs)


def test_fixed_generator_reproduces_and_different_seeds_differ():
    policy = full_policy("llama")
    _, ids, mask = prompts()
    a = sample_pair(policy, ids, mask, 8, reference=policy.reference, generator=gen(1))
    b = sample_pair(policy, ids, mask, 8, reference=policy.reference, generator=gen(1))
    c = sample_pair(policy, ids, mask, 8, reference=policy.reference, generator=gen(2))
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.policy_logprobs, y.policy_logprobs)
    assert not torch.equal(a[0].tokens, c[0].tokens)


@pytest.mark.parametrize("kind", KINDS)
def test_left_padding_and_batch_do_not_change_a_row(kind):
    """With one generator per prompt, a prompt alone and in a padded batch gets the same sample."""
    policy = full_policy(kind)
    rows, ids, mask = prompts()
    batched = sample_pair(
        policy,
        ids,
        mask,
        10,
        reference=policy.reference,
        beta=0.5,
        generator=[gen(10 + i) for i in range(3)],
    )
    for i, row in enumerate(rows):
        alone = sample_pair(
            policy,
            torch.tensor([row]),
            torch.ones(1, len(row), dtype=torch.long),
            10,
            reference=policy.reference,
            beta=0.5,
            generator=[gen(10 + i)],
        )
        for b, a in zip(batched, alone, strict=True):
            steps = a.tokens.shape[1]  # alone, generation may end earlier (all rows hit EOS)
            assert (b.mask[i, steps:] == 0).all()
            assert torch.equal(b.tokens[i : i + 1, :steps], a.tokens)
            torch.testing.assert_close(
                b.policy_logprobs[i : i + 1, :steps], a.policy_logprobs, atol=1e-5, rtol=0
            )
            torch.testing.assert_close(
                b.ref_logprobs[i : i + 1, :steps], a.ref_logprobs, atol=1e-5, rtol=0
            )


@pytest.mark.parametrize("kind", KINDS)
def test_several_samples_per_prompt_equal_the_repeated_prompts(kind):
    """``num_samples=2`` with one generator per output row: the prompts run once, and every
    row is what sampling the prompts repeated (rows j and j + B follow prompt j) gives."""
    policy = full_policy(kind)
    _, ids, mask = prompts()
    gens = lambda: [gen(20 + i) for i in range(6)]  # noqa: E731
    two = sample(policy, ids, mask, 10, reference=policy.reference, generator=gens(),
                 num_samples=2)  # fmt: skip
    repeated = sample(
        policy, ids.repeat(2, 1), mask.repeat(2, 1), 10, reference=policy.reference,
        generator=gens(),
    )  # fmt: skip
    assert two.tokens.shape[0] == 6 and not torch.equal(two.tokens[:3], two.tokens[3:])
    assert torch.equal(two.tokens, repeated.tokens) and torch.equal(two.mask, repeated.mask)
    for field in ("policy_logprobs", "ref_logprobs", "sampling_logprobs"):
        torch.testing.assert_close(getattr(two, field), getattr(repeated, field), atol=1e-5, rtol=0)
    assert_matches_fresh_forward(policy, ids, mask, two, 0.0)  # with_prompt repeats the prompts
    with pytest.raises(ValueError, match="one per prompt, or one per output row: 6"):
        sample(policy, ids, mask, 4, generator=gens()[:4], num_samples=2)


def test_eos_is_kept_and_everything_after_is_masked():
    policy = full_policy()
    _, ids, mask = prompts()
    stop = list(range(1, 12))  # a third of the vocabulary ends a completion
    out = sample(
        policy,
        ids,
        mask,
        40,
        reference=policy.reference,
        generator=gen(5),
        eos_token_id=stop,
        pad_token_id=PAD,
    )
    assert out.tokens.shape[1] < 40  # stopped early: every row ended
    for row in range(3):
        toks, m = out.tokens[row].tolist(), out.mask[row].tolist()
        end = next(t for t, tok in enumerate(toks) if tok in stop)
        assert m == [1] * (end + 1) + [0] * (len(toks) - end - 1)
        assert toks[end + 1 :] == [PAD] * (len(toks) - end - 1)
        assert (out.policy_logprobs[row, end + 1 :] == 0).all()
        assert (out.ref_logprobs[row, end + 1 :] == 0).all()
        assert (out.policy_logprobs[row, : end + 1] < 0).all()
    assert out.lengths.tolist() == out.mask.sum(1).tolist()
    torch.testing.assert_close(
        out.policy_logprobs,
        policy.logprobs(ids, mask, out.tokens, out.mask).detach(),
        atol=1e-5,
        rtol=0,
    )


def test_top_k_one_is_greedy_and_warping_leaves_recorded_logprobs_at_temperature_one():
    policy = full_policy()
    _, ids, mask = prompts()
    greedy = sample(
        policy, ids, mask, 6, reference=policy.reference, beta=0.5, top_k=1, generator=gen()
    )
    assert (greedy.sampling_logprobs == 0).all()  # one token left: probability 1
    mix = full_forward_mixture(policy, ids, mask, greedy, 0.5)
    full_ids, full_mask = greedy.with_prompt(ids, mask)
    with torch.no_grad():
        logits = [
            m(
                input_ids=full_ids,
                attention_mask=full_mask,
                position_ids=position_ids_from_mask(full_mask),
            ).logits[:, ids.shape[1] - 1 : -1]
            for m in (policy.model, policy.reference)
        ]
    assert torch.equal(mixture_logits(*logits, 0.5).argmax(-1), greedy.tokens)
    assert (mix < 0).all()
    hot = sample(policy, ids, mask, 6, temperature=0.5, top_p=0.9, generator=gen())
    torch.testing.assert_close(
        hot.policy_logprobs,
        policy.logprobs(ids, mask, hot.tokens, hot.mask).detach(),
        atol=1e-5,
        rtol=0,
    )
    assert not torch.allclose(hot.sampling_logprobs, hot.policy_logprobs)


def test_bare_models_and_training_mode_restored():
    model = tiny_causal_lm("gpt2", vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD)
    ref = copy.deepcopy(model)
    perturb(model)
    model.train()
    _, ids, mask = prompts()
    out = sample(model, ids, mask, 5, reference=ref, beta=0.25, generator=gen())
    assert model.training
    torch.testing.assert_close(
        out.policy_logprobs,
        completion_logprobs(model.eval(), ids, mask, out.tokens, out.mask),
        atol=1e-5,
        rtol=0,
    )
    torch.testing.assert_close(
        out.ref_logprobs,
        completion_logprobs(ref, ids, mask, out.tokens, out.mask),
        atol=1e-5,
        rtol=0,
    )


def test_a_policy_is_unwrapped_as_policy_and_as_reference():
    policy, other = full_policy(), full_policy("gpt2")
    perturb(other.model, seed=5)
    _, ids, mask = prompts()
    wrapped = sample(policy, ids, mask, 6, reference=other, beta=0.5, generator=gen(4))
    bare = sample(policy.model, ids, mask, 6, reference=other.model, beta=0.5, generator=gen(4))
    assert torch.equal(wrapped.tokens, bare.tokens)
    torch.testing.assert_close(wrapped.ref_logprobs, bare.ref_logprobs, atol=0, rtol=0)


def test_row_generators_are_seeded_by_seed_step_row_and_salt_alone():
    # the seed of row r at step t: ((seed · 1000003 + t) · 65537 + r) · 31 + salt
    (g,) = row_generators(2, 3, [5], salt=7)
    assert g.initial_seed() == ((2 * 1_000_003 + 3) * 65_537 + 5) * 31 + 7
    batched = [g.initial_seed() for g in row_generators(0, 5, [0, 1, 2, 3])]
    assert [g.initial_seed() for g in row_generators(0, 5, [2, 3])] == batched[2:]
    assert len(set(batched)) == 4
    assert row_generators(0, 5, [2], salt=1)[0].initial_seed() != batched[2]


def test_errors_name_the_problem():
    policy = full_policy()
    lora = lora_policy()
    _, ids, mask = prompts()
    with pytest.raises(ValueError, match="needs a reference"):
        sample(policy, ids, mask, 4, beta=0.5)
    with pytest.raises(ValueError, match="needs a reference"):
        sample_pair(policy, ids, mask, 4)
    with pytest.raises(ValueError, match="3 prompts"):
        sample(policy, ids, mask, 4, generator=[gen(), gen()])
    with pytest.raises(ValueError, match="row 1 is not left-padded"):
        sample(policy, ids, mask.flip(1), 4)
    with pytest.raises(ValueError, match="exceeds the model's 128 positions"):
        sample(policy, ids, mask, 200)
    with pytest.raises(ValueError, match="max_new_tokens"):
        sample(policy, ids, mask, 0)
    with pytest.raises(ValueError, match="adapter"):
        sample(lora, ids, mask, 4, reference=lora.model.get_base_model(), beta=0.5)
    with pytest.raises(ValueError, match="fuse=True"):
        sample(policy, ids, mask, 4, reference=policy.reference, fuse=True)
    other = tiny_causal_lm("gpt2", vocab_size=VOCAB + 3)
    with pytest.raises(ValueError, match="vocabularies differ"):
        sample(policy, ids, mask, 4, reference=other, beta=0.5)
    with pytest.raises(TypeError, match="reference"):
        sample(policy, ids, mask, 4, reference="gpt2")


@pytest.mark.filterwarnings("ignore:.*is_gradient_checkpointing.*:FutureWarning")
def test_dora_adapter_is_sampled_without_fusing():
    """peft's per-row adapter selection does not support DoRA: fall back to two forwards."""
    from peft import LoraConfig, get_peft_model

    model = tiny_causal_lm("llama", vocab_size=VOCAB, eos_token_id=EOS, pad_token_id=PAD)
    config = LoraConfig(r=2, use_dora=True, target_modules=["q_proj", "v_proj"])
    policy = Policy(get_peft_model(model, config))
    perturb(policy.model, scale=0.3)
    _, ids, mask = prompts()
    with pytest.raises(ValueError, match="fuse=True"):
        sample(policy, ids, mask, 3, reference=policy.reference, beta=0.5, fuse=True)
    y, y_mix = sample_pair(policy, ids, mask, 6, reference=policy.reference, beta=0.5)
    assert_matches_fresh_forward(policy, ids, mask, y, 0.0)
    assert_matches_fresh_forward(policy, ids, mask, y_mix, 0.5)

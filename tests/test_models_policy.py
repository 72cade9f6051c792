"""Policy log-probs under left padding, the frozen-copy and adapter-disabled references, LoRA."""

import copy

import pytest
import torch

from nlhf.models import AdapterDisabled, Policy, PolicyConfig, completion_logprobs
from nlhf.models import policy as policy_module
from nlhf.models.lm import BASE_ADAPTER, adapters_off, eval_mode
from nlhf.models.logprobs import completion_kl, position_ids_from_mask
from nlhf.models.tiny import tiny_byte_lm, tiny_causal_lm

KINDS = ["gpt2", "llama"]


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run fastest on one thread, and do not stall when the CPUs are shared."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def batch():
    """Three left-padded prompts and right-padded completions (ids < 32)."""
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    completions = [[20, 21, 22, 1], [23, 24, 25, 26], [27, 1, 0, 0]]
    cmask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]])
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    return prompts, ids, mask, torch.tensor(completions), cmask


def lora_policy(kind: str = "gpt2", seed: int = 0) -> tuple[Policy, torch.nn.Module]:
    """A LoRA policy with non-zero adapter weights, and an untouched copy of its base model."""
    base = tiny_causal_lm(kind, vocab_size=32, seed=seed)
    original = copy.deepcopy(base)
    policy = Policy(base, None, PolicyConfig(lora_r=4, lora_alpha=8))
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.3)
    return policy, original


def test_position_ids_from_mask():
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1], [0, 0, 0, 0, 1]])
    expected = [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4], [0, 0, 0, 0, 0]]
    assert position_ids_from_mask(mask).tolist() == expected


@pytest.mark.parametrize("kind", KINDS)
def test_left_padding_does_not_change_logprobs(kind):
    model = tiny_causal_lm(kind, vocab_size=32)
    prompts, ids, mask, comp, cmask = batch()
    padded = completion_logprobs(model, ids, mask, comp, cmask)
    for i, prompt in enumerate(prompts):
        alone = completion_logprobs(
            model,
            torch.tensor([prompt]),
            torch.ones(1, len(prompt), dtype=torch.long),
            comp[i : i + 1],
            cmask[i : i + 1],
        )
        torch.testing.assert_close(padded[i : i + 1], alone, atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_logprobs_equal_a_plain_forward_and_are_masked(kind):
    model = tiny_causal_lm(kind, vocab_size=32)
    prompts, ids, mask, comp, cmask = batch()
    lp = completion_logprobs(model, ids, mask, comp, cmask)
    assert lp.dtype == torch.float32 and lp.shape == comp.shape
    assert (lp[2, 2:] == 0).all() and (lp[cmask == 1] < 0).all()
    seq = torch.tensor([prompts[1] + comp[1].tolist()])
    with torch.no_grad():
        logits = model(input_ids=seq).logits[0].float()
    manual = torch.log_softmax(logits, -1)[len(prompts[1]) - 1 : -1].gather(
        -1, comp[1].unsqueeze(-1)
    )
    torch.testing.assert_close(lp[1], manual.squeeze(-1), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lora", [False, True])
def test_several_completions_per_prompt_share_the_prompt_forward(kind, lora):
    """k = 2 completions per prompt (rows j and j + B follow prompt j): the prompts run once,
    and log-probs and gradients equal those of the prompts repeated row by row."""
    if lora:
        policy, _ = lora_policy(kind)
        model = policy.model
    else:
        model = tiny_causal_lm(kind, vocab_size=32)
    _, ids, mask, comp, cmask = batch()
    second = torch.tensor([[3, 4, 1, 0], [28, 29, 30, 31], [2, 2, 2, 2]])
    comps = torch.cat([comp, second])
    cmasks = torch.cat([cmask, torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]])])
    params = [p for p in model.parameters() if p.requires_grad]

    def run(prompt_ids, prompt_mask):
        lp = completion_logprobs(model, prompt_ids, prompt_mask, comps, cmasks)
        grads = torch.autograd.grad((lp * torch.arange(1.0, 5.0)).sum(), params)
        return lp.detach(), grads

    shared, shared_grads = run(ids, mask)
    repeated, repeated_grads = run(ids.repeat(2, 1), mask.repeat(2, 1))
    torch.testing.assert_close(shared, repeated, atol=1e-5, rtol=0)
    assert (shared[cmasks == 0] == 0).all()
    for a, b in zip(shared_grads, repeated_grads, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    one_token = completion_logprobs(model, ids, mask, comps[:, :1], cmasks[:, :1])
    torch.testing.assert_close(one_token, repeated[:, :1], atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="multiple of the prompts' batch size 3"):
        completion_logprobs(model, ids, mask, comps[:5], cmasks[:5])


def test_bad_masks_are_rejected_with_the_row():
    model = tiny_causal_lm("gpt2", vocab_size=32)
    _, ids, mask, comp, cmask = batch()
    right_padded = mask.flip(1)
    with pytest.raises(ValueError, match="prompt_mask row 1 is not left-padded"):
        completion_logprobs(model, ids, right_padded, comp, cmask)
    holes = cmask.clone()
    holes[0] = torch.tensor([1, 0, 1, 1])
    with pytest.raises(ValueError, match="completion_mask row 0"):
        completion_logprobs(model, ids, mask, comp, holes)
    with pytest.raises(ValueError, match="differ in shape"):
        completion_logprobs(model, ids, mask[:, 1:], comp, cmask)
    empty = mask.clone()
    empty[2] = 0
    with pytest.raises(ValueError, match="row 2 is empty"):
        completion_logprobs(model, ids, empty, comp, cmask)


def test_frozen_copy_reference():
    model = tiny_causal_lm("gpt2", vocab_size=32)
    policy = Policy(model, None, PolicyConfig(reference_dtype="float32"))
    ref = policy.reference
    assert not policy.is_lora and ref is not model and not ref.training
    assert all(not p.requires_grad for p in ref.parameters())
    ids = {p.data_ptr() for p in model.parameters()}
    assert not ids & {p.data_ptr() for p in ref.parameters()}
    _, pids, mask, comp, cmask = batch()
    before = policy.reference_logprobs(pids, mask, comp, cmask)
    torch.testing.assert_close(before, policy.logprobs(pids, mask, comp, cmask).detach())
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    assert torch.equal(policy.reference_logprobs(pids, mask, comp, cmask), before)
    assert not torch.allclose(policy.logprobs(pids, mask, comp, cmask).detach(), before)


BF16_MAX_ERROR, BF16_MEAN_ERROR = 0.01, 0.003
"""Bounds on |log μ_bf16 − log μ_fp32| per token (nats), a few times what the tiny models
measure (test below)."""


@pytest.mark.parametrize("kind", KINDS)
def test_a_bfloat16_reference_has_half_the_bytes_and_a_bounded_logprob_error(kind):
    model = tiny_causal_lm(kind, vocab_size=256, hidden=64, layers=3, heads=4)
    policy = Policy(model, None, PolicyConfig(reference_dtype="bfloat16"))
    ref = policy.reference
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert next(model.parameters()).dtype == torch.float32
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert (ref.get_output_embeddings().weight is ref.get_input_embeddings().weight) == tied
    ref_bytes = sum(p.nbytes for p in ref.parameters())
    assert ref_bytes * 2 == sum(p.nbytes for p in model.parameters())
    policy.to("cpu")  # moving keeps the parameters in bf16 and the buffers as they were
    assert {p.dtype for p in ref.parameters()} == {torch.bfloat16}
    assert all(b.dtype == torch.float32 for b in ref.buffers() if b.is_floating_point())
    torch.manual_seed(0)
    ids = torch.randint(2, 256, (4, 12))
    mask = torch.ones_like(ids)
    mask[0, :5] = 0
    comp = torch.randint(2, 256, (4, 16))
    exact = policy.logprobs(ids, mask, comp).detach()
    error = (policy.reference_logprobs(ids, mask, comp) - exact).abs()
    assert error.max() <= BF16_MAX_ERROR, f"max error {error.max():.4f}"
    assert error.mean() <= BF16_MEAN_ERROR, f"mean error {error.mean():.4f}"
    assert error.max() > 0  # it really ran in bf16
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    moved = policy.logprobs(ids, mask, comp).detach()
    stale = (policy.reference_logprobs(ids, mask, comp) - moved).abs()
    policy.reset_reference()  # converts the new weights into the bf16 copy
    fresh = (policy.reference_logprobs(ids, mask, comp) - moved).abs()
    assert fresh.mean() <= BF16_MEAN_ERROR * 4 < stale.mean()


def test_the_automatic_reference_dtype_follows_the_hardware(monkeypatch):
    for fast, dtype in ((True, torch.bfloat16), (False, torch.float32)):
        monkeypatch.setattr(policy_module, "has_fast_bfloat16", lambda device=None, f=fast: f)
        policy = Policy(tiny_causal_lm("gpt2", vocab_size=32))
        assert {p.dtype for p in policy.reference.parameters()} == {dtype}
    lora, _ = lora_policy("gpt2")
    assert isinstance(lora.reference, AdapterDisabled)  # LoRA: no copy to convert


@pytest.mark.parametrize("kind", KINDS)
def test_lora_reference_is_the_base_model_without_a_copy(kind):
    policy, original = lora_policy(kind)
    _, ids, mask, comp, cmask = batch()
    ref = policy.reference
    assert policy.is_lora and isinstance(ref, AdapterDisabled)
    base_lp = completion_logprobs(original, ids, mask, comp, cmask)
    torch.testing.assert_close(
        policy.reference_logprobs(ids, mask, comp, cmask), base_lp, atol=1e-5, rtol=0
    )
    assert not torch.allclose(policy.logprobs(ids, mask, comp, cmask).detach(), base_lp)
    # No second copy: the reference owns no tensors, and the policy's parameters are the
    # base weights plus the (small) adapter.
    assert vars(ref) == {"peft_model": policy.model, "adapter": BASE_ADAPTER}
    base_numel = sum(p.numel() for p in original.parameters())
    storages = {p.untyped_storage().data_ptr(): p.numel() for p in policy.model.parameters()}
    lora_numel = sum(p.numel() for p in policy.trainable_parameters())
    assert sum(storages.values()) == base_numel + lora_numel
    assert 0 < lora_numel < base_numel / 4
    assert all("lora_" in n for n, p in policy.model.named_parameters() if p.requires_grad)


def test_eval_mode_switches_every_module_and_puts_each_flag_back():
    policy, _ = lora_policy("gpt2")
    model = policy.model.train()
    dropout = next(m for m in model.modules() if isinstance(m, torch.nn.Dropout))
    frozen = next(m for m in model.modules() if m is not dropout and m is not model)
    frozen.eval()  # a mixed tree comes back mixed, not all in the root's mode
    before = {id(m): m.training for m in model.modules()}
    assert any(before.values()) and not all(before.values())
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert {id(m): m.training for m in model.modules()} == before
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("inside")
    assert {id(m): m.training for m in model.modules()} == before


def test_eval_mode_calls_a_train_method_of_a_module_s_own():
    calls = []

    class Custom(torch.nn.Linear):
        def train(self, mode: bool = True):
            calls.append(mode)
            return super().train(mode)

    model = torch.nn.Sequential(torch.nn.Linear(2, 2), Custom(2, 2)).train()
    calls.clear()
    with eval_mode(model):
        assert not any(m.training for m in model.modules())
    assert calls == [False, True] and all(m.training for m in model.modules())


def test_adapters_off_is_peft_disable_adapter_and_puts_everything_back():
    """The reference's switch gives what peft's ``disable_adapter()`` gives, leaves every
    layer's switch and every parameter's ``requires_grad`` as found (an error inside too),
    and hands a merged adapter to peft's own context."""
    policy, original = lora_policy("llama")
    peft_model = policy.model
    _, ids, mask, _, _ = batch()
    layers = [m for m in peft_model.modules() if hasattr(m, "_disable_adapters")]
    frozen = next(p for n, p in peft_model.named_parameters() if "lora_A" in n)
    frozen.requires_grad_(False)  # a state peft's context would reset to True
    grads = {n: p.requires_grad for n, p in peft_model.named_parameters()}
    with torch.no_grad():
        expected = original(input_ids=ids, attention_mask=mask).logits
        with peft_model.disable_adapter():
            torch.testing.assert_close(
                peft_model(input_ids=ids, attention_mask=mask).logits, expected
            )
        frozen.requires_grad_(False)
        with adapters_off(peft_model):
            assert all(m.disable_adapters for m in layers)
            off = peft_model(input_ids=ids, attention_mask=mask).logits
        on = peft_model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(off, expected, atol=1e-6, rtol=0)
    assert not torch.allclose(on, expected)
    assert not any(m.disable_adapters for m in layers)
    assert {n: p.requires_grad for n, p in peft_model.named_parameters()} == grads
    with pytest.raises(RuntimeError), adapters_off(peft_model):
        raise RuntimeError("inside")
    assert not any(m.disable_adapters for m in layers)
    peft_model.merge_adapter()
    with torch.no_grad(), adapters_off(peft_model):
        merged_off = peft_model(input_ids=ids, attention_mask=mask).logits
    torch.testing.assert_close(merged_off, expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("lora", [False, True])
def test_the_kl_from_the_step_forwards_equals_completion_kl(lora):
    """reference_logprobs_and_logits and logprobs_and_kl: the two methods' log-probs, and the
    exact KL of policy and reference from those two forwards only."""
    if lora:
        policy, _ = lora_policy()
    else:
        policy = Policy(tiny_causal_lm("gpt2", vocab_size=32, seed=0), None)
        with torch.no_grad():
            for p in policy.model.parameters():
                p.add_(0.05 * torch.randn_like(p))
    _, ids, mask, comp, cmask = batch()
    ref_lp, ref_logits = policy.reference_logprobs_and_logits(ids, mask, comp, cmask)
    torch.testing.assert_close(ref_lp, policy.reference_logprobs(ids, mask, comp, cmask))
    lp, kl = policy.logprobs_and_kl(ids, mask, comp, cmask, ref_logits)
    torch.testing.assert_close(lp, policy.logprobs(ids, mask, comp, cmask))
    expected = completion_kl(policy.model, policy.reference, ids, mask, comp, cmask)
    assert (expected > 1e-4).all()
    torch.testing.assert_close(kl, expected, rtol=1e-5, atol=1e-8)
    assert lp.requires_grad and not kl.requires_grad


def test_lora_gradients_reach_only_the_adapter():
    policy, _ = lora_policy()
    _, ids, mask, comp, cmask = batch()
    policy.sequence_logprobs(ids, mask, comp, cmask).sum().backward()
    grads = [p.grad for p in policy.trainable_parameters()]
    assert all(g is not None for g in grads) and any(g.abs().sum() > 0 for g in grads)
    assert policy.reference_logprobs(ids, mask, comp, cmask).requires_grad is False


def test_dropout_is_disabled_by_default():
    model = tiny_causal_lm("gpt2", vocab_size=32).train()
    policy = Policy(model)
    _, ids, mask, comp, cmask = batch()
    a = policy.logprobs(ids, mask, comp, cmask)
    b = policy.logprobs(ids, mask, comp, cmask)
    assert torch.equal(a, b)


def test_peft_model_with_lora_r_is_an_error():
    policy, _ = lora_policy()
    with pytest.raises(ValueError, match="already carries a peft adapter"):
        Policy(policy.model, None, PolicyConfig(lora_r=4))
    same = Policy(policy.model)
    assert same.is_lora and isinstance(same.reference, AdapterDisabled)


def test_load_from_folder_and_tokens(tmp_path):
    model, tok = tiny_byte_lm("llama")
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    policy = Policy.load(PolicyConfig(model=str(tmp_path), lora_r=2))
    assert policy.is_lora and policy.eos_token_ids == [tok.eos_token_id]
    assert policy.pad_token_id == tok.pad_token_id
    with pytest.raises(OSError, match="cannot load"):
        Policy.load(PolicyConfig(model=str(tmp_path / "missing")))
    with pytest.raises(ValueError, match="lora_r"):
        PolicyConfig(lora_r=-1)

"""Sample each tournament policy once: several completions per prompt, seeded per row.

    from nlhf.eval.rollouts import Sampling, sample_entrants
    completions = sample_entrants(entrants, reference_path, prompt_texts, Sampling())

Completion ``j`` of prompt ``i`` from a policy is drawn with its own generator, seeded by
(seed, j, i) and salted by the policy's spec (:func:`nlhf.models.sampling.row_generators`), so it
depends neither on the batch it was drawn in nor on the other policies; different policies
get independent draws (a pair's comparisons are then unbiased estimates of P(π ≻ π′)).

Memory: the reference model is loaded once; LoRA adapters trained on it are attached to it
as named peft adapters (one base model in memory however many adapters share it) and the
reference is the adapter-disabled view.  Adapters on another base load that base once per
group; full models load one at a time and are freed after sampling.

Each decode holds whole prompts with all their samples (or one prompt's samples, when they
exceed a batch), so a prompt is prefilled once per decode rather than once per sample.

KL to the reference, of each completion: exact, Σ over its positions of KL(π(·|x, y_<t) ‖
μ(·|x, y_<t)) over the whole vocabulary, read from the decode loop's own logits
(``SampleOutput.exact_kl``; Tang et al. 2024, App. D), and the
sampled Σ_t log π(y_t) − log μ(y_t) from the log-probs the sampler records (same
expectation at temperature 1, noisier); 0 for the reference itself; None when no reference
is known or its vocabulary differs.
"""

from __future__ import annotations

import gc
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from tqdm.auto import tqdm

from nlhf.config import Checked, option
from nlhf.eval.entrants import Entrant, same_model, same_vocabulary
from nlhf.models.lm import AdapterDisabled, hf_model, load_causal_lm, load_tokenizer
from nlhf.models.sampling import row_generators, sample
from nlhf.models.text import decode_completions, eos_token_ids, pad_token_id, tokenize_prompts


@dataclass
class Sampling(Checked):
    """How completions are drawn."""

    samples_per_prompt: int = option(4, "completions sampled per prompt and policy")
    max_new_tokens: int = option(24, "tokens sampled per completion")
    temperature: float = option(1.0, "sampling temperature (1: sample the policy itself)")
    top_p: float | None = option(None, "nucleus sampling threshold (none: off)")
    batch_size: int = option(32, "completions decoded together")
    seed: int = option(0, "seed of the per-row sampling generators")
    dtype: Literal["float32", "bfloat16", "float16"] = option(
        "float32", "dtype of the policy weights (log-probs are computed in float32)"
    )

    def check(self) -> None:
        self.at_least(1, "samples_per_prompt", "max_new_tokens", "batch_size")
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")


@dataclass
class Completions:
    """A policy's completions: ``texts[i][j]`` is sample j of prompt i."""

    name: str
    texts: list[list[str]]
    lengths: np.ndarray
    """(prompts, samples) completion tokens, EOS included."""
    kl: np.ndarray | None
    """(prompts, samples) exact KL(π‖μ) per completion; None when not measurable."""
    kl_sampled: np.ndarray | None = None
    """(prompts, samples) Σ log π − log μ of the sampled tokens; None likewise."""


def spec_salt(spec: str) -> int:
    return zlib.crc32(spec.encode("utf-8")) % 1_000_003


def sample_policy(
    model: Any,
    tokenizer: Any,
    prompts: list[str],
    settings: Sampling,
    salt: int,
    reference: Any = None,
    measure_kl: bool = True,
    advance: Callable[[int], None] | None = None,
    name: str = "",
) -> Completions:
    """Sample ``samples_per_prompt`` completions of every prompt from one loaded model.

    ``reference`` (a causal LM or an adapter-disabled view) records log μ for the KL;
    without one, ``measure_kl`` True means the model *is* the reference (KL 0).
    """
    S = settings.samples_per_prompt
    n = len(prompts)
    texts = [[""] * S for _ in range(n)]
    lengths = np.zeros((n, S), dtype=np.int64)
    kl = np.zeros((n, S)) if measure_kl else None
    kl_sampled = np.zeros((n, S)) if measure_kl else None
    device = next(iter(_parameters(model))).device
    eos = eos_token_ids(_hf(model), tokenizer)
    pad = pad_token_id(_hf(model), tokenizer)
    for block, samples in _blocks(n, S, settings.batch_size):
        ids, mask = tokenize_prompts(tokenizer, [prompts[i] for i in block], device)
        chunk = [(i, j) for j in samples for i in block]  # output row order of num_samples
        generators = [row_generators(settings.seed, j, [i], salt=salt)[0] for i, j in chunk]
        out = sample(
            model,
            ids,
            mask,
            settings.max_new_tokens,
            reference=reference,
            temperature=settings.temperature,
            generator=generators,
            top_p=settings.top_p,
            eos_token_id=eos,
            pad_token_id=pad,
            num_samples=len(samples),
        )
        decoded = decode_completions(tokenizer, out.tokens, out.mask)
        row_kl = row_sampled = None
        if reference is not None and kl is not None:
            row_sampled = (out.policy_logprobs - out.ref_logprobs).sum(-1).double().cpu().numpy()
            row_kl = out.exact_kl.sum(-1).double().cpu().numpy()
        for r, (i, j) in enumerate(chunk):
            texts[i][j] = decoded[r]
            lengths[i, j] = int(out.lengths[r])
            if row_kl is not None:
                kl[i, j], kl_sampled[i, j] = row_kl[r], row_sampled[r]
        if advance is not None:
            advance(len(chunk))
    return Completions(name, texts, lengths, kl, kl_sampled)


def _blocks(prompts: int, samples: int, batch_size: int):
    """(prompt indices, sample indices) of each decode: whole prompts with all their samples
    when those fit a batch, else one prompt's samples in batch-sized runs, so each prompt is
    prefilled once per decode (every row keeps its own generator, so batching leaves the
    texts as they are)."""
    if samples <= batch_size:
        per = batch_size // samples
        for start in range(0, prompts, per):
            yield list(range(start, min(start + per, prompts))), list(range(samples))
        return
    for i in range(prompts):
        for start in range(0, samples, batch_size):
            yield [i], list(range(start, min(start + batch_size, samples)))


def _hf(model: Any) -> Any:
    return hf_model(model)


def _parameters(model: Any):
    return (model.peft_model if isinstance(model, AdapterDisabled) else model).parameters()


def _attach(base: Any, entrants: list[Entrant]) -> Any:
    """Load every adapter of ``entrants`` onto ``base`` as named adapters of one PeftModel."""
    from peft import PeftModel  # noqa: PLC0415 - peft is slow to import; only adapters need it

    with warnings.catch_warnings():  # peft calls a transformers method deprecated in v5
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")
        peft = PeftModel.from_pretrained(base, entrants[0].path, adapter_name=entrants[0].name)
        for entrant in entrants[1:]:
            peft.load_adapter(entrant.path, adapter_name=entrant.name)
    return peft.eval()


def _free(*objects: Any) -> None:
    del objects
    gc.collect()


def sample_entrants(
    entrants: list[Entrant],
    reference_path: str | None,
    prompts: list[str],
    settings: Sampling,
    progress: bool = True,
    kl: bool = True,
) -> list[Completions]:
    """Sample every entrant (see the module doc for what is loaded when); entrant order.
    ``kl`` False leaves the reference out of every decode (``Completions.kl`` None): half
    the forwards where only the texts are wanted."""
    bar = tqdm(
        total=len(entrants) * len(prompts) * settings.samples_per_prompt,
        desc="sampling",
        unit="completion",
        disable=not progress,
    )
    results: dict[str, Completions] = {}
    ref_model = ref_view = ref_tok = None
    if reference_path is not None:
        ref_model, ref_tok = load_causal_lm(reference_path, settings.dtype)
        ref_view = ref_model

    def run(entrant: Entrant, model: Any, tokenizer: Any, reference: Any, kl: bool) -> None:
        bar.set_postfix_str(entrant.name)
        results[entrant.name] = sample_policy(
            model,
            tokenizer,
            prompts,
            settings,
            spec_salt(entrant.name),  # what it is in the run, not where it is stored
            reference,
            kl,
            bar.update,
            entrant.name,
        )

    def kl_reference(tokenizer: Any) -> Any:
        if not kl or ref_view is None or not same_vocabulary(tokenizer, ref_tok):
            return None
        return ref_view

    on_ref = [e for e in entrants if e.kind == "adapter" and same_model(e.base, reference_path)]
    if on_ref:
        peft = _attach(ref_model, on_ref)
        ref_view = AdapterDisabled(peft)
        for entrant in on_ref:
            peft.set_adapter(entrant.name)
            tokenizer = load_tokenizer(entrant.path, reference_path)
            reference = kl_reference(tokenizer)
            run(entrant, peft, tokenizer, reference, reference is not None)
    for entrant in entrants:
        if entrant.kind == "reference":
            run(entrant, ref_view, ref_tok, None, kl)

    others = [e for e in entrants if e.kind == "adapter" and e not in on_ref]
    for base in dict.fromkeys(e.base for e in others):
        group = [e for e in others if e.base == base]
        # the tokenizers are each adapter's own (below); this one only has to load
        model, _ = load_causal_lm(base, settings.dtype, tokenizer=[*(e.path for e in group), base])
        peft = _attach(model, group)
        for entrant in group:
            peft.set_adapter(entrant.name)
            tokenizer = load_tokenizer(entrant.path, base)
            reference = kl_reference(tokenizer)
            run(entrant, peft, tokenizer, reference, reference is not None)
        _free(peft)

    for entrant in entrants:
        if entrant.kind == "model":
            model, tokenizer = load_causal_lm(entrant.path, settings.dtype)
            reference = kl_reference(tokenizer)
            if same_model(entrant.path, reference_path):
                reference = None  # the reference itself under another name: KL 0
                run(entrant, model, tokenizer, None, kl)
            else:
                run(entrant, model, tokenizer, reference, reference is not None)
            _free(model)
    bar.close()
    return [results[e.name] for e in entrants]

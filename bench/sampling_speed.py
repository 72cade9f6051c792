"""Speed of Nash-MD rollouts: our one-loop policy + mixture sampling against the peer's way.

    .venv/bin/python bench/sampling_speed.py    # writes bench/results/sampling_speed.json
    .venv/bin/python bench/sampling_speed.py --repeats 3 --tokens 32
    .venv/bin/python bench/sampling_speed.py --threads 1   # ..._threads1.json
    .venv/bin/python bench/sampling_speed.py --workload smollm2   # ..._smollm2.json
    .venv/bin/python bench/sampling_speed.py --workload smollm2 --repeats 1 --tokens 4  # smoke

Workload (the peer baseline in ``shared/bench/trl``, :data:`common.PEER`): GPT-2 with 4
layers, 4 heads, 256 dims,
256 positions, random init with seed 0; the byte-level BPE tokenizer (vocab 2000) from
``shared/bench/trl/tok``; the first 8 prompts of prompts.json (8-16 tokens, left-padded);
32 and 128 new tokens; temperature 1, no top-k / top-p; fp32; 2 threads.  The reference μ is
a second model with the same weights, as the peer loads it.  Mixture coefficient β = 0.5
(the peer's default).

Contenders, all producing y ~ π and y′ ~ π_β for every prompt:

- ``ours``: :func:`nlhf.models.sample_pair`, one decode loop, KV caches for both models; it
  also returns log π and log μ of every token of y and y′ (the peer computes log μ(y) later).
- ``peer``: what TRL 1.12's Nash-MD asks for: ``model.generate`` for y, then ``generate`` on a
  geometric-mixture wrapper whose ``prepare_inputs_for_generation`` sets ``use_cache=False``,
  so both models re-run the whole prefix for every token (quadratic).  The wrapper is
  re-created here from the trl 1.12.0 source (trl is not imported) and run with
  ``GenerationConfig(use_cache=False)``, so that the cache really is off.
- ``peer_as_run``: TRL 1.12's wrapper code verbatim in behaviour on transformers 5.24, where
  ``use_cache=False`` no longer stops ``generate`` from passing one KV cache, which the wrapper
  then hands to BOTH models: linear cost, but policy and reference keys share one cache, so the
  samples are not from π_β (``peer_as_run_beta0_token_agreement`` < 1 shows it: with β = 0 the
  mixture should reproduce plain policy sampling token for token), and since the shared cache
  grows by two positions per token, GPT-2's 256 positions run out before 128 new tokens
  (recorded as a failure).
- ``minimal``: a hand-written KV-cached loop doing the same forwards as ours (policy over
  [y ; y′] rows, reference over the same rows), Gumbel-max sampling, no bookkeeping: the
  practical limit.  ``efficiency = minimal / ours``.

Also timed: plain sampling (``sample`` vs ``model.generate``), with a LoRA policy the fused
policy + reference forward (one forward over the shared base, each row with its adapter or
none) against two separate forwards, and
``ours_transformers``: ``sample_pair(decoder="transformers")``, the general path, against the
lean path ``ours`` takes for GPT-2 and Llama (lean / transformers: what the lean path buys).

Against the machine: ``floor`` is :func:`common.weight_stream_floor` of the policy and of the
reference (16-row products over every weight matrix, as one decode forward of the 16 rows of
y and y′ reads them); ``fraction of floor`` = (decode forwards × floor) / measured time, 1.0
being the bandwidth limit.  ``--workload smollm2``: SmolLM2-135M-Instruct (the embedded
policy, float32) and a frozen reference copy, the first 8 peer prompts, 64 new tokens, EOS
ignored so every row decodes every token; contenders ``ours``, ``ours_transformers`` and
``ours_bf16_reference`` (the reference copy in bfloat16, ``PolicyConfig.reference_dtype``).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from common import PEER, ROOT, record, weight_stream_floor
from nlhf.models import (
    AdapterDisabled,
    Policy,
    PolicyConfig,
    mixture_logits,
    sample,
    sample_pair,
)

BETA = 0.5


def build(tok_dir: Path) -> tuple:
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = PreTrainedTokenizerFast.from_pretrained(str(tok_dir))
    tok.padding_side = "left"
    config = GPT2Config(
        vocab_size=len(tok),
        n_layer=4,
        n_head=4,
        n_embd=256,
        n_positions=256,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
    )
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).eval()
    ref = copy.deepcopy(model)
    ref.requires_grad_(False)
    return tok, model, ref


# ------------------------------------------------------------------------------ the peer


def mixture_wrapper(model, ref, beta: float, generation_config):
    """A generation wrapper with the behaviour of TRL 1.12's GeometricMixtureWrapper."""
    from transformers import GenerationMixin

    class Mixture(GenerationMixin):
        main_input_name = "input_ids"
        _supports_cache_class = False
        _supports_static_cache = False
        _is_stateful = False

        def __init__(self) -> None:
            super().__init__()
            self.model, self.ref_model, self.config = model, ref, model.config
            self.generation_config, self.device = generation_config, model.device

        def __call__(self, *args, **kwargs):
            return self.forward(*args, **kwargs)

        @torch.inference_mode()
        def forward(self, *args, **kwargs):
            out = self.model(*args, **kwargs)
            ref_logits = self.ref_model(*args, **kwargs).logits
            out.logits = torch.log_softmax(beta * ref_logits + (1 - beta) * out.logits, dim=-1)
            return out

        def prepare_inputs_for_generation(self, *args, **kwargs):
            kwargs["use_cache"] = False
            inputs = self.model.prepare_inputs_for_generation(*args, **kwargs)
            self.ref_model.prepare_inputs_for_generation(*args, **kwargs)
            return inputs

        def _validate_model_class(self):
            self.model._validate_model_class()

        def _validate_model_kwargs(self, model_kwargs):
            return self.model._validate_model_kwargs(model_kwargs)

        def get_experts_implementation(self):
            return self.model.get_experts_implementation()

        def set_experts_implementation(self, value):
            self.model.set_experts_implementation(value)

    return Mixture()


def generation_config(tok, max_new_tokens: int, use_cache: bool):
    from transformers import GenerationConfig

    return GenerationConfig(
        max_new_tokens=max_new_tokens,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        repetition_penalty=1.0,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        use_cache=use_cache,
    )


def peer(model, ref, tok, ids, mask, steps: int, mixture_cache: bool):
    """y from ``model.generate``; y′ from ``generate`` on the mixture wrapper."""
    with torch.no_grad():
        y = model.generate(
            input_ids=ids,
            attention_mask=mask,
            generation_config=generation_config(tok, steps, True),
        )
        config = generation_config(tok, steps, mixture_cache)
        y_mix = mixture_wrapper(model, ref, BETA, config).generate(
            input_ids=ids, attention_mask=mask, generation_config=config
        )
    return y, y_mix


# ------------------------------------------------------------------------------ the limit


def minimal_pair(model, ref, ids, mask, steps: int, generator: torch.Generator):
    """The same forwards as sample_pair, nothing else: the practical limit."""
    from transformers import DynamicCache

    with torch.no_grad():
        batch, width = ids.shape
        ids2, mask2 = ids.repeat(2, 1), mask.repeat(2, 1)
        pos = (mask2.cumsum(-1) - 1).clamp(min=0)
        caches = [DynamicCache(config=model.config), DynamicCache(config=ref.config)]
        logits = [
            m(
                input_ids=ids2,
                attention_mask=mask2,
                position_ids=pos,
                cache=c,
                use_cache=True,
                logits_to_keep=1,
            ).logits[:, -1]
            for m, c in zip((model, ref), caches, strict=True)
        ]
        full_mask = torch.cat([mask2, torch.ones(2 * batch, steps, dtype=mask.dtype)], dim=1)
        next_pos = mask2.sum(1, keepdim=True)
        out = []
        for t in range(steps):
            lp, lr = (torch.log_softmax(x, dim=-1) for x in logits)
            mix = torch.log_softmax((1 - BETA) * lp[batch:] + BETA * lr[batch:], dim=-1)
            dist = torch.cat([lp[:batch], mix])
            gumbel = -torch.log(-torch.log(torch.rand(dist.shape, generator=generator)))
            tok = torch.argmax(dist + gumbel, dim=-1, keepdim=True)
            out.append(tok)
            if t == steps - 1:
                break
            logits = [
                m(
                    input_ids=tok,
                    attention_mask=full_mask[:, : width + t + 1],
                    position_ids=next_pos + t,
                    cache=c,
                    use_cache=True,
                ).logits[:, -1]
                for m, c in zip((model, ref), caches, strict=True)
            ]
        return torch.cat(out, dim=1)


# ------------------------------------------------------------------------------ timing


def timeit(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def run_rounds(
    contenders: dict[str, Callable[[], object]], repeats: int
) -> tuple[dict[str, list[float]], dict[str, str]]:
    """One warm-up each, then ``repeats`` rounds, each round timing every contender once.

    A contender whose warm-up raises is dropped; its error is returned instead of times.
    """
    errors: dict[str, str] = {}
    for name, fn in contenders.items():
        try:
            fn()
        except Exception as exc:  # a failing contender is a result, not a crash
            errors[name] = f"{type(exc).__name__}: {exc}"
    live = [name for name in contenders if name not in errors]
    times: dict[str, list[float]] = {name: [] for name in live}
    for r in range(repeats):
        order = live[r % len(live) :] + live[: r % len(live)]  # rotate the order
        for name in order:
            times[name].append(timeit(contenders[name]))
    return times, errors


def beta0_agreement(model, tok, ids, mask, steps: int) -> float:
    """Share of tokens where the peer's β = 0 mixture (as run) equals plain policy sampling."""
    config = generation_config(tok, steps, True)
    with torch.no_grad():
        torch.manual_seed(1)
        plain = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        torch.manual_seed(1)
        mixed = mixture_wrapper(model, model, 0.0, config).generate(
            input_ids=ids, attention_mask=mask, generation_config=config
        )
    width = ids.shape[1]
    return float((plain[:, width:] == mixed[:, width:]).float().mean())


def ours_mixture_error(model, ref, ids, mask, steps: int) -> float:
    """Max |recorded − recomputed| log π_β of our mixture samples (full forwards, no cache)."""
    out = sample(
        model,
        ids,
        mask,
        steps,
        reference=ref,
        beta=BETA,
        generator=torch.Generator().manual_seed(1),
    )
    full_ids, full_mask = out.with_prompt(ids, mask)
    pos = (full_mask.cumsum(-1) - 1).clamp(min=0)
    with torch.no_grad():
        logits = [
            m(input_ids=full_ids, attention_mask=full_mask, position_ids=pos).logits
            for m in (model, ref)
        ]
    width = ids.shape[1]
    mix = mixture_logits(logits[0][:, width - 1 : -1], logits[1][:, width - 1 : -1], BETA)
    recomputed = mix.gather(-1, out.tokens.unsqueeze(-1)).squeeze(-1) * out.mask
    return float((recomputed - out.sampling_logprobs).abs().max())


def make_contenders(steps: int, model, ref, lora: Policy, tok, ids, mask) -> dict:
    """Every timed variant for ``steps`` new tokens, as zero-argument callables."""
    gen = torch.Generator().manual_seed(0)
    lora_ref = lora.reference
    assert isinstance(lora_ref, AdapterDisabled)
    hf_config = generation_config(tok, steps, True)
    return {
        "ours": lambda: sample_pair(
            model, ids, mask, steps, reference=ref, beta=BETA, generator=gen
        ),
        "ours_transformers": lambda: sample_pair(
            model, ids, mask, steps, reference=ref, beta=BETA, generator=gen, decoder="transformers"
        ),
        "minimal": lambda: minimal_pair(model, ref, ids, mask, steps, gen),
        "peer": lambda: peer(model, ref, tok, ids, mask, steps, mixture_cache=False),
        "peer_as_run": lambda: peer(model, ref, tok, ids, mask, steps, mixture_cache=True),
        "ours_sample": lambda: sample(model, ids, mask, steps, generator=gen),
        "hf_generate": lambda: model.generate(
            input_ids=ids, attention_mask=mask, generation_config=hf_config
        ),
        "lora_fused": lambda: sample_pair(
            lora, ids, mask, steps, reference=lora_ref, beta=BETA, generator=gen, fuse=True
        ),
        "lora_separate": lambda: sample_pair(
            lora, ids, mask, steps, reference=lora_ref, beta=BETA, generator=gen, fuse=False
        ),
    }


def cpu_busy() -> float:
    """Busy CPU seconds of the whole machine (all processes), from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


def own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds per contender")
    parser.add_argument("--tokens", default="32,128", help="new-token counts to time")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (peer: 2)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per batch (peer: 8)")
    parser.add_argument(
        "--workload", choices=["tiny", "smollm2"], default="tiny", help="see the module doc"
    )
    parser.add_argument("--device", default="cpu", help="smollm2 workload: cpu or cuda")
    parser.add_argument(
        "--smoke", action="store_true", help="one round of 4 tokens, printed, nothing recorded"
    )
    args = parser.parse_args()
    if args.smoke:
        args.repeats, args.tokens = 1, "4"
    torch.set_num_threads(args.threads)
    if args.workload == "smollm2":
        return smollm2(args)
    import transformers

    transformers.logging.set_verbosity_error()
    tok, model, ref = build(PEER / "tok")
    texts = json.loads((PEER / "prompts.json").read_text())[: args.prompts]
    enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids, mask = enc["input_ids"], enc["attention_mask"]

    # A LoRA policy over a copy of the same model, adapter weights made non-trivial.
    torch.manual_seed(0)
    lora = Policy(copy.deepcopy(model), tok, PolicyConfig(lora_r=16, lora_alpha=32))
    with torch.no_grad():
        for name, p in lora.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)

    results: dict[str, dict] = {}
    busy0, own0, start = cpu_busy(), own_cpu(), time.perf_counter()
    floor = weight_stream_floor(model, rows=2 * ids.shape[0])
    for steps in [int(t) for t in args.tokens.split(",")]:
        contenders = make_contenders(steps, model, ref, lora, tok, ids, mask)
        times, errors = run_rounds(contenders, args.repeats)
        med = {name: statistics.median(ts) for name, ts in times.items()}

        def ratio(a: str, b: str, med=med) -> float | None:
            return med[a] / med[b] if a in med and b in med else None

        results[str(steps)] = {
            "seconds": {
                name: {"median": med[name], "min": min(ts), "all": ts} for name, ts in times.items()
            },
            "errors": errors,
            "ours_over_peer": ratio("ours", "peer"),
            "ours_over_peer_as_run": ratio("ours", "peer_as_run"),
            "efficiency_minimal_over_ours": ratio("minimal", "ours"),
            "sample_over_hf_generate": ratio("ours_sample", "hf_generate"),
            "lora_fused_over_separate": ratio("lora_fused", "lora_separate"),
            "lean_over_transformers": ratio("ours", "ours_transformers"),
            "ours_fraction_of_floor": floor_fraction(med.get("ours"), steps, [floor, floor]),
            "target_ours_over_peer": 0.4 if steps <= 32 else 0.2,
        }
    checks = {
        "peer_as_run_beta0_token_agreement": beta0_agreement(model, tok, ids, mask, 32),
        "ours_mixture_logprob_max_error": ours_mixture_error(model, ref, ids, mask, 32),
    }
    wall = time.perf_counter() - start
    cotenant = ((cpu_busy() - busy0) - (own_cpu() - own0)) / (wall * (os.cpu_count() or 1))
    result = {
        "cotenant_cpu_fraction": round(max(0.0, cotenant), 3),
        "workload": {
            "prompts": args.prompts,
            "prompt_tokens": list(ids.shape),
            "beta": BETA,
            "threads": args.threads,
            "dtype": "float32",
            "model": "GPT-2 4x4x256 seed 0",
            "tokenizer": os.path.relpath(PEER / "tok", ROOT),
        },
        "peer_source": (
            "GeometricMixtureWrapper behaviour re-created from the trl 1.12.0 source "
            "(trl/experimental/nash_md/nash_md_trainer.py); trl itself is not imported"
        ),
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "repeats": args.repeats,
        "floor": floor,
        "results": results,
        "checks": checks,
    }
    name = "sampling_speed" if args.threads == 2 else f"sampling_speed_threads{args.threads}"
    record(
        name, result, table(results, checks, result["cotenant_cpu_fraction"]), write=not args.smoke
    )


def floor_fraction(seconds: float | None, steps: int, floors: list[dict]) -> float | None:
    """(decode forwards × their floor) / ``seconds``: ``steps`` − 1 decode steps of every
    model in ``floors`` (the prefill and the first token's draw are not counted)."""
    if seconds is None or steps < 2:
        return None
    return (steps - 1) * sum(f["seconds_per_pass"] for f in floors) / seconds


def smollm2(args: argparse.Namespace) -> None:
    """The SmolLM2 workload (module doc): ours on both paths against the bandwidth floor."""
    import transformers

    from nlhf.assets import policy_path
    from nlhf.models import load_causal_lm

    transformers.logging.set_verbosity_error()
    model, tok = load_causal_lm(str(policy_path()))
    policies = {
        dtype: Policy(model, tok, PolicyConfig(reference_dtype=dtype)).to(args.device)
        for dtype in ("float32", "bfloat16")
    }
    texts = json.loads((PEER / "prompts.json").read_text())[: args.prompts]
    enc = tok(texts, return_tensors="pt", padding=True).to(args.device)
    ids, mask = enc["input_ids"], enc["attention_mask"]
    rows = 2 * ids.shape[0]
    floors = {d: weight_stream_floor(p.reference, rows=rows) for d, p in policies.items()}
    floors["policy"] = floors["float32"]
    results = {}
    busy0, own0, start = cpu_busy(), own_cpu(), time.perf_counter()
    for steps in [int(t) for t in args.tokens.split(",")]:

        def pair(dtype: str, decoder: str = "auto", steps: int = steps) -> Callable[[], object]:
            policy = policies[dtype]
            return lambda: sample_pair(
                policy, ids, mask, steps, reference=policy.reference, beta=BETA,
                generator=torch.Generator(device=args.device).manual_seed(0),
                eos_token_id=[], decoder=decoder,
            )  # fmt: skip

        contenders = {
            "ours": pair("float32"),
            "ours_transformers": pair("float32", "transformers"),
            "ours_bf16_reference": pair("bfloat16"),
        }
        times, errors = run_rounds(contenders, args.repeats)
        med = {name: statistics.median(ts) for name, ts in times.items()}
        f32 = [floors["policy"], floors["float32"]]
        results[str(steps)] = {
            "seconds": {n: {"median": med[n], "min": min(t), "all": t} for n, t in times.items()},
            "errors": errors,
            "lean_over_transformers": (
                med["ours"] / med["ours_transformers"] if len(med) == len(contenders) else None
            ),
            "fraction_of_floor": {
                "ours": floor_fraction(med.get("ours"), steps, f32),
                "ours_transformers": floor_fraction(med.get("ours_transformers"), steps, f32),
                "ours_bf16_reference": floor_fraction(
                    med.get("ours_bf16_reference"), steps, [floors["policy"], floors["bfloat16"]]
                ),
            },
        }
    wall = time.perf_counter() - start
    cotenant = ((cpu_busy() - busy0) - (own_cpu() - own0)) / (wall * (os.cpu_count() or 1))
    result = {
        "cotenant_cpu_fraction": round(max(0.0, cotenant), 3),
        "workload": {
            "model": "SmolLM2-135M-Instruct (float32) and a frozen reference copy",
            "prompts": args.prompts,
            "prompt_tokens": list(ids.shape),
            "beta": BETA,
            "threads": args.threads,
            "device": args.device,
            "eos": "ignored (every row decodes every token)",
        },
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "repeats": args.repeats,
        "floor": floors,
        "results": results,
    }
    name = (
        f"sampling_speed_smollm2_{args.device}"
        if args.device != "cpu"
        else "sampling_speed_smollm2"
    )
    table_ = smollm2_table(results, floors, result["cotenant_cpu_fraction"])
    record(name, result, table_, write=not args.smoke)


def smollm2_table(results: dict, floors: dict, cotenant: float) -> str:
    def cell(r: dict, name: str) -> str:
        if name not in r["seconds"]:
            return "fails"
        fraction = r["fraction_of_floor"][name]
        share = "" if fraction is None else f" ({fraction:.2f} of floor)"
        return f"{r['seconds'][name]['median']:.2f}{share}"

    lines = [
        "| new tokens | ours, lean path (s) | ours, transformers path (s) | lean / transformers "
        "| ours, bf16 reference (s) |",
        "|---:|---:|---:|---:|---:|",
    ]
    for steps, r in results.items():
        ratio = r["lean_over_transformers"]
        lines.append(
            f"| {steps} | {cell(r, 'ours')} | {cell(r, 'ours_transformers')} | "
            f"{'–' if ratio is None else f'{ratio:.2f}'} | {cell(r, 'ours_bf16_reference')} |"
        )
    policy = floors["policy"]
    lines += [
        "",
        f"Floor: one 16-row pass over the policy's {policy['weight_bytes'] / 1e6:.0f} MB of "
        f"weight matrices takes {policy['seconds_per_pass'] * 1e3:.1f} ms "
        f"({policy['gb_per_s']:.1f} GB/s; the bf16 reference's "
        f"{floors['bfloat16']['seconds_per_pass'] * 1e3:.1f} ms); fraction of floor = decode "
        "forwards × floor / time. Medians of the timed rounds; CPU used by other processes "
        f"during the run: {cotenant:.0%} of the machine.",
    ]
    for steps, r in results.items():
        for name, error in r["errors"].items():
            lines.append(f"{name} at {steps} tokens fails: {error[:160]}")
    return "\n".join(lines)


def table(results: dict, checks: dict, cotenant: float) -> str:
    def sec(r: dict, name: str) -> str:
        if name in r["seconds"]:
            return f"{r['seconds'][name]['median']:.3f}"
        return "fails" if name in r["errors"] else "–"

    def num(value: float | None, digits: int = 2) -> str:
        return "–" if value is None else f"{value:.{digits}f}"

    lines = [
        "| new tokens | ours (s) | peer, no cache (s) | ours / peer | peer as run on tf 5.24 (s) "
        "| minimal loop (s) | efficiency | sample / generate | LoRA fused / separate "
        "| lean / transformers | fraction of floor |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for steps, r in results.items():
        lines.append(
            f"| {steps} | {sec(r, 'ours')} | {sec(r, 'peer')} | {num(r['ours_over_peer'], 3)} "
            f"(goal ≤ {r['target_ours_over_peer']}) | {sec(r, 'peer_as_run')} | "
            f"{sec(r, 'minimal')} | {num(r['efficiency_minimal_over_ours'])} | "
            f"{num(r['sample_over_hf_generate'])} | {num(r['lora_fused_over_separate'])} | "
            f"{num(r['lean_over_transformers'])} | {num(r['ours_fraction_of_floor'])} |"
        )
    lines.append("")
    lines.append(
        f"Checks: our recorded mixture log-probs match a cache-free recomputation to "
        f"{checks['ours_mixture_logprob_max_error']:.1e}; the peer's wrapper as run with β = 0 "
        f"reproduces plain policy sampling on only "
        f"{checks['peer_as_run_beta0_token_agreement']:.3f} of tokens (1.0 if it were correct). "
        f"Medians of the timed rounds; CPU used by other processes during the run: "
        f"{cotenant:.0%} of the machine."
    )
    for steps, r in results.items():
        for name, error in r["errors"].items():
            lines.append(f"{name} at {steps} tokens fails: {error[:160]}")
    return "\n".join(lines)


if __name__ == "__main__":
    main()

"""The logged ``kl`` of the online LM trainers: the exact KL(π‖μ) of the step's completions.

Every online trainer logs ``kl``, the exact KL of its completions summed over positions, from
the forwards its step runs anyway: the reference's forward over the completions keeps its
logits and the policy's forward takes the KL of its own against them
(:func:`nlhf.models.logprobs.completion_logprobs_and_kl`); Nash-MD-PG, whose decode loop runs
μ beside π for the mixture, takes it from the loop (``SampleOutput.exact_kl``).  These tests
hold that value to :func:`nlhf.models.logprobs.completion_kl`, the two-forward reference
implementation, on the same completions, and count the forwards a step runs outside its
decode loop.
"""

import json
from pathlib import Path

import pytest
import torch

import tiny_train
from nlhf.models import policy as policy_module
from nlhf.models.lm import body
from nlhf.models.logprobs import completion_kl
from nlhf.train import nash_md, online_dpo

TRAINERS = ["online-dpo", "sppo", "inpo", "dno", "nash-md", "ppo"]


def logged(out: Path, key: str) -> list[float]:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [row[key] for row in rows if key in row]


@pytest.mark.parametrize("name", TRAINERS)
def test_the_logged_kl_equals_completion_kl_on_the_same_completions(name, tmp_path, monkeypatch):
    """Step 2 (after one update, so π ≠ μ): the logged kl is completion_kl's mean on the
    completions of that step, to 1e-5 relative or 1e-6 nats."""
    expected: list[torch.Tensor] = []
    if name == "nash-md":  # y, the first of the pair, at the weights it was sampled with
        sample_pair = nash_md.sample_pair

        def spy(policy, prompt_ids, prompt_mask, *args, **kwargs):
            y, y_mix = sample_pair(policy, prompt_ids, prompt_mask, *args, **kwargs)
            kl = completion_kl(
                policy.model, policy.reference, prompt_ids, prompt_mask, y.tokens, y.mask
            )
            expected.append(kl)
            return y, y_mix

        monkeypatch.setattr(nash_md, "sample_pair", spy)
    else:  # the completions the reference's forward reads
        reference_forward = policy_module.Policy.reference_logprobs_and_logits

        def spy(self, prompt_ids, prompt_mask, completion_ids, completion_mask=None):
            expected.append(
                completion_kl(
                    self.model,
                    self.reference,
                    prompt_ids,
                    prompt_mask,
                    completion_ids,
                    completion_mask,
                )
            )
            return reference_forward(self, prompt_ids, prompt_mask, completion_ids, completion_mask)

        monkeypatch.setattr(policy_module.Policy, "reference_logprobs_and_logits", spy)
    trainer, config = tiny_train.make(name, str(tmp_path), ["steps=2"])
    tiny_train.train(name, trainer, config)
    kl = logged(tmp_path, "kl")
    assert len(kl) == 2 and len(expected) == 2  # one chunk, one sample per step
    assert float(expected[1].mean()) > 1e-6  # a KL the comparison can see
    # float rounding of two attention kernels (decode loop, full forward): about 1e-7 nats
    assert kl[1] == pytest.approx(float(expected[1].mean()), rel=1e-5, abs=1e-6)


class Counter:
    """Counts forward calls of the models it wraps, except inside the decode loop."""

    def __init__(self) -> None:
        self.calls, self.paused = 0, False

    def wrap(self, model: torch.nn.Module) -> None:
        forward = model.forward

        def counted(*args, **kwargs):
            self.calls += not self.paused
            return forward(*args, **kwargs)

        model.forward = counted

    def pausing(self, function):
        def paused(*args, **kwargs):
            self.paused = True
            try:
                return function(*args, **kwargs)
            finally:
                self.paused = False

        return paused


@pytest.mark.parametrize(
    "name, module, sampler, forwards",
    [
        # μ over the finished pairs and π with gradient, each a prompt forward whose cache
        # serves both completions and a completions' forward (it was 6: 2 more for the KL)
        ("online-dpo", online_dpo, "sample", 4),
        # π with gradient only: the decode loop gives log μ and the exact KL (it was 3: the
        # gradient forward and 2 for the KL)
        ("nash-md", nash_md, "sample_pair", 1),
        # exact_kl: the KL term's gradient needs μ's logits at every position, one forward
        ("nash-md exact_kl=true", nash_md, "sample_pair", 2),
    ],
)
def test_a_step_runs_no_forward_of_its_own_for_the_exact_kl(
    name, module, sampler, forwards, tmp_path, monkeypatch
):
    """One step's forwards outside the decode loop: the trainer's own, none for the KL."""
    name, *options = name.split()
    trainer, config = tiny_train.make(name, str(tmp_path), ["steps=1", *options])
    counter = Counter()  # every forward, with the head or without, runs the body once
    bodies = {id(body(m)): body(m) for m in (trainer.policy.model, trainer.policy.reference)}
    for trunk in bodies.values():
        counter.wrap(trunk)
    monkeypatch.setattr(module, sampler, counter.pausing(getattr(module, sampler)))
    tiny_train.train(name, trainer, config)
    assert logged(tmp_path, "kl") == [pytest.approx(0.0, abs=1e-6)]  # step 1: π = μ
    assert counter.calls == forwards

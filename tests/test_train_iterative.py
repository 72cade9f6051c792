"""The batched-iterative regime (``iteration_steps``, ``iteration_epochs``) of SPPO, INPO, ONPO
and DNO on a tiny model: each iteration samples and judges once, with the policy frozen, and
every prepared batch is trained on once per pass; one step per iteration is the online run
exactly; (slow) a run killed inside an iteration resumes bit for bit."""

import pytest
import torch

import tiny_train
from nlhf.train import dno, inpo, sppo
from nlhf.train.iterative import IterativeAlgorithm
from online_harness import assert_identical, kill_and_resume, metrics, policy_weights

ALGORITHMS = {"sppo": sppo.SPPO, "inpo": inpo.INPO, "onpo": inpo.INPO, "dno": dno.DNO}


def test_each_pass_trains_on_every_prepared_step_once():
    class Cfg:
        iteration_steps, iteration_epochs, seed = 3, 2, 5

    algorithm = IterativeAlgorithm.__new__(IterativeAlgorithm)
    algorithm.config = Cfg()
    seen = [algorithm.prompt_step(s) for s in range(12)]
    assert [i for i, _ in seen] == [0] * 6 + [1] * 6
    for start in range(0, 12, 3):  # each pass: the iteration's 3 prompt steps, each once
        iteration = start // 6
        assert sorted(p for _, p in seen[start : start + 3]) == [
            3 * iteration + j for j in (0, 1, 2)
        ]
    with pytest.raises(ValueError, match="iteration_steps"):
        sppo.Config(iteration_steps=-1)


@pytest.mark.parametrize("name", ["sppo", "dno"])
def test_one_step_per_iteration_is_the_online_run(tmp_path, name):
    def weights(*extra):
        out = str(tmp_path / "-".join([name, *extra]) or name)
        trainer, config = tiny_train.make(name, out, ["steps=3", *extra])
        trainer.run(ALGORITHMS[name](trainer, config), name)
        return [p.detach().clone() for p in trainer.params]

    online = weights()
    batched = weights("iteration_steps=1", "iteration_epochs=1")
    for a, b in zip(online, batched, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize("name", ["inpo", "dno"])
def test_an_iteration_samples_once_with_the_policy_frozen(tmp_path, name, monkeypatch):
    """steps=8 with 2 prompt steps × 2 passes per iteration: 2 iterations, each preparing 2
    steps' batches at its start; the other steps reuse them (sampling time 0), and the loss
    anchors stay the log-probs of the policy that sampled."""
    trainer, config = tiny_train.make(
        name, str(tmp_path), ["steps=8", "iteration_steps=2", "iteration_epochs=2"]
    )
    algorithm = ALGORITHMS[name](trainer, config)
    prepared_at = []
    prepare = algorithm.prepare

    def counting(batch, step):
        prepared_at.append((trainer.steps_done, step))
        return prepare(batch, step)

    monkeypatch.setattr(algorithm, "prepare", counting)
    before = [p.detach().clone() for p in trainer.params]
    trainer.run(algorithm, name)
    assert prepared_at == [(0, 0), (0, 1), (4, 2), (4, 3)]
    rows = metrics(trainer.out)
    preparing = [r["step"] for r in rows if r["sample_seconds"] > 0]
    assert preparing == [1, 5] and all(r["judge_seconds"] == 0 for r in rows)
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, trainer.params, strict=True))
    if name == "sppo":  # the anchor of the iteration's second pass is still π_t's
        group = algorithm.prepared[2][0].data["group"]
        assert group.out.policy_logprobs.requires_grad is False


@pytest.mark.slow
def test_a_run_killed_inside_an_iteration_resumes_bit_for_bit(tmp_path):
    full, resumed = kill_and_resume("dno", tmp_path, "iteration_steps=3", "iteration_epochs=2")
    assert_identical(policy_weights(full), policy_weights(resumed))
    assert [r["loss"] for r in metrics(full)] == [r["loss"] for r in metrics(resumed)]

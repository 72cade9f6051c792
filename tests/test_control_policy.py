"""Acting policies (nlhf.control.policy): evaluate gives the log-probabilities of taken actions
and the entropy, worked by hand; CleanRL's initialization; save/load round trip into an atomic
folder; the core trains the actor (and the critic unless frozen)."""

import json
import math

import pytest
import torch

from nlhf.control.policy import ActingPolicy
from nlhf.errors import UserError


def test_evaluate_gives_the_taken_actions_log_probability_and_the_entropy():
    policy = ActingPolicy(4, 2)
    with torch.no_grad():  # π = (¼, ¾) in every state
        policy.actor[-1].weight.zero_()
        policy.actor[-1].bias.copy_(torch.log(torch.tensor([1.0, 3.0])))
    logprobs, entropy = policy.evaluate(torch.randn(2, 3, 4), torch.tensor([[0, 1, 1], [1, 0, 0]]))
    quarter, three = math.log(0.25), math.log(0.75)
    expected = torch.tensor([[quarter, three, three], [three, quarter, quarter]])
    torch.testing.assert_close(logprobs, expected)
    torch.testing.assert_close(entropy, torch.full((2, 3), -(0.25 * quarter + 0.75 * three)))


def test_init_is_orthogonal_with_cleanrl_gains():
    torch.manual_seed(0)
    policy = ActingPolicy(4, 2)
    first, out = policy.actor[0].weight, policy.actor[-1].weight
    torch.testing.assert_close(first.T @ first, 2.0 * torch.eye(4), rtol=0, atol=1e-5)  # gain √2
    torch.testing.assert_close(out @ out.T, 1e-4 * torch.eye(2), rtol=0, atol=1e-7)  # gain 0.01
    assert all(
        float(p.detach().abs().sum()) == 0 for n, p in policy.named_parameters() if "bias" in n
    )
    with torch.no_grad():
        logits = policy.logits(torch.randn(8, 4))
    assert logits.abs().max() < 0.1  # near-uniform actions at the start
    assert policy.value(torch.randn(8, 4)).shape == (8,)


def test_save_and_load_round_trip(tmp_path):
    torch.manual_seed(1)
    policy = ActingPolicy(6, 3, hidden=[16, 8])
    folder = policy.save(tmp_path / "policy")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json", "model.safetensors"]
    assert json.loads((folder / "config.json").read_text())["hidden"] == [16, 8]
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]  # no temp folder left behind
    loaded = ActingPolicy.load(folder)
    for (name, a), (_, b) in zip(
        policy.state_dict().items(), loaded.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    with pytest.raises(UserError, match="not an acting policy folder"):
        ActingPolicy.load(tmp_path)


def test_trainable_hands_the_actor_and_maybe_the_critic_to_the_core(tmp_path):
    policy = ActingPolicy(4, 2)
    both = policy.trainable()
    assert len(both.trainable_parameters()) == len(list(policy.parameters()))
    actor_only = policy.trainable(critic=False)
    assert len(actor_only.trainable_parameters()) == len(list(policy.actor.parameters()))
    actor_only.save(tmp_path)
    assert (tmp_path / "model.safetensors").exists()


def test_episode_returns_counts_one_whole_episode_per_copy():
    pytest.importorskip("gymnasium", reason="the control extra is not installed (nlhf[control])")
    from nlhf.control.rollout import episode_returns

    torch.manual_seed(0)
    policy = ActingPolicy(4, 2)
    returns = episode_returns(policy, "CartPole-v1", episodes=6, seed=1)
    assert len(returns) == 6 and all(8 <= r <= 100 for r in returns)  # a near-uniform policy
    assert returns == episode_returns(policy, "CartPole-v1", episodes=6, seed=1)

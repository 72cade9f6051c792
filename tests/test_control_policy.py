"""Acting policies (nlhf.control.policy): the per-step geometric mixture is exactly the
normalized π^(1−β)·μ^β; CleanRL's initialization; save/load round trip into an atomic folder;
the core trains the actor (and the critic unless frozen)."""

import json

import pytest
import torch

from nlhf.control.policy import ActingPolicy, mixture_logits
from nlhf.errors import UserError


@pytest.mark.parametrize("beta", [0.0, 0.125, 0.5, 1.0])
def test_mixture_is_the_normalized_geometric_product(beta):
    g = torch.Generator().manual_seed(0)
    logits_pi = torch.randn(5, 4, generator=g, dtype=torch.float64) * 3
    logits_mu = torch.randn(5, 4, generator=g, dtype=torch.float64)
    pi, mu = logits_pi.softmax(-1), logits_mu.softmax(-1)
    product = pi ** (1 - beta) * mu**beta
    expected = product / product.sum(-1, keepdim=True)
    got = mixture_logits(logits_pi, logits_mu, beta).softmax(-1)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


def test_mixture_refuses_beta_outside_the_unit_interval():
    with pytest.raises(ValueError, match="beta"):
        mixture_logits(torch.zeros(2), torch.zeros(2), 1.5)


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

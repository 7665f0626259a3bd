from __future__ import annotations

import torch

from policy.networks import ActorCritic
from policy.normalize import InstanceRewardScaler, RunningMeanStd
from twin.spec import ObservationSpec

OBS_DIM = ObservationSpec(6).dim


def test_shapes_and_action_ranges() -> None:
    torch.manual_seed(0)
    agent = ActorCritic(OBS_DIM, 6)
    obs = torch.randn(32, OBS_DIM) * 10
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    assert action.shape == (32, 8) and logprob.shape == entropy.shape == value.shape == (32,)
    assert set(action[:, :6].unique().tolist()) <= {0.0, 1.0}
    assert ((action[:, 6:] > 0) & (action[:, 6:] < 100)).all()
    assert agent.get_value(obs).shape == (32,)
    det = agent.act(obs)
    assert det.shape == (32, 8) and torch.equal(det, agent.act(obs))


def test_sampled_logprob_equals_reevaluated_logprob() -> None:
    torch.manual_seed(1)
    agent = ActorCritic(OBS_DIM, 6)
    obs = torch.randn(256, OBS_DIM)
    action, logprob, entropy, value = agent.get_action_and_value(obs)
    _, again, entropy2, value2 = agent.get_action_and_value(obs, action)
    torch.testing.assert_close(again, logprob, atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(entropy2, entropy)
    torch.testing.assert_close(value2, value)


def test_edge_actions_have_finite_logprob() -> None:
    agent = ActorCritic(OBS_DIM, 6)
    obs = torch.zeros(2, OBS_DIM)
    action = torch.tensor([[0, 1, 0, 1, 0, 1, 0.0, 100.0], [1, 1, 1, 1, 1, 1, 100.0, 0.0]])
    _, logprob, _, _ = agent.get_action_and_value(obs, action)
    assert torch.isfinite(logprob).all()


def test_obs_normaliser_is_in_state_dict() -> None:
    agent = ActorCritic(OBS_DIM, 6)
    agent.update_obs_stats(torch.randn(100, OBS_DIM) * 5 + 3)
    clone = ActorCritic(OBS_DIM, 6)
    clone.load_state_dict(agent.state_dict())
    torch.testing.assert_close(clone.obs_rms.mean, agent.obs_rms.mean)
    assert "obs_rms.var" in agent.state_dict()


def test_running_mean_std_matches_batch_statistics() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1000, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 5.0, 0.1]) + 2.0
    rms = RunningMeanStd((3,), epsilon=0.0)
    for chunk in x.split(137):
        rms.update(chunk)
    torch.testing.assert_close(rms.mean, x.mean(0))
    torch.testing.assert_close(rms.var, x.var(0, unbiased=False))


def test_reward_scaler_is_per_instance() -> None:
    scaler = InstanceRewardScaler(2, gamma=0.9)
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        rewards = torch.randn(16, 2, generator=g) * torch.tensor([1.0, 100.0])
        scaled = scaler(rewards, torch.zeros(16, 2, dtype=torch.bool))
    ratio = scaled[:, 0].std() / scaled[:, 1].std()
    assert 0.3 < float(ratio) < 3.0  # raw ratio is 0.01


def test_fast_tanh_matches_torch_tanh_in_value_and_gradient() -> None:
    from policy.networks import fast_tanh

    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4096, 64, generator=gen) * 3.0,
                   torch.tensor([[-1e4, -30.0, -1e-8, 0.0, 1e-8, 30.0, 1e4] + [0.0] * 57])])
    x.requires_grad_(True)
    y = fast_tanh(x)
    assert y.dtype == x.dtype and y.shape == x.shape and bool(torch.isfinite(y).all())
    assert float((y - torch.tanh(x)).abs().max().detach()) < 3e-7
    grad_out = torch.randn(x.shape, generator=gen)
    (g_fast,) = torch.autograd.grad(y, x, grad_out)
    (g_ref,) = torch.autograd.grad(torch.tanh(x), x, grad_out)
    assert float((g_fast - g_ref).abs().max()) < 1e-5
    # float64 gradient check of the hand-written backward
    x64 = torch.randn(5, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(fast_tanh, (x64,))
    with torch.inference_mode():  # rollouts run under inference mode
        assert float((fast_tanh(x.detach()) - torch.tanh(x.detach())).abs().max()) < 3e-7

from __future__ import annotations

import torch

from policy.gae import compute_gae


def reference_gae(rewards, values, terminated, truncated, final_values, last_value, gamma, lam):
    """Plain-Python GAE, one instance and one step at a time."""
    T, B = len(rewards), len(rewards[0])
    adv = [[0.0] * B for _ in range(T)]
    for b in range(B):
        running = 0.0
        for t in reversed(range(T)):
            if terminated[t][b]:
                next_value, cont = 0.0, 0.0
            elif truncated[t][b]:
                next_value, cont = final_values[t][b], 0.0
            else:
                next_value = values[t + 1][b] if t + 1 < T else last_value[b]
                cont = 1.0
            delta = rewards[t][b] + gamma * next_value - values[t][b]
            running = delta + gamma * lam * cont * running
            adv[t][b] = running
    returns = [[adv[t][b] + values[t][b] for b in range(B)] for t in range(T)]
    return adv, returns


def test_matches_reference_loop_on_random_data() -> None:
    g = torch.Generator().manual_seed(0)
    T, B = 37, 11
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    final_values = torch.randn(T, B, generator=g, dtype=torch.float64)
    last_value = torch.randn(B, generator=g, dtype=torch.float64)
    terminated = torch.rand(T, B, generator=g) < 0.08
    truncated = torch.rand(T, B, generator=g) < 0.08  # some steps both: termination wins
    assert (terminated & truncated).any() and terminated.any() and truncated.any()

    adv, ret = compute_gae(rewards, values, terminated, truncated, final_values, last_value, 0.97, 0.9)
    ref_adv, ref_ret = reference_gae(rewards.tolist(), values.tolist(), terminated.tolist(),
                                     truncated.tolist(),
                                     final_values.tolist(), last_value.tolist(), 0.97, 0.9)
    torch.testing.assert_close(adv, torch.tensor(ref_adv, dtype=torch.float64))
    torch.testing.assert_close(ret, torch.tensor(ref_ret, dtype=torch.float64))


def test_hand_made_returns() -> None:
    # One instance, lambda = 1 (Monte-Carlo returns), gamma = 0.5, rewards all 1.
    # Steps 0-1 run into a termination at step 1; steps 2-3 are truncated at step 3 with the
    # final observation worth 4; step 4 continues into last_value = 8 (the next obs after the rollout).
    ones = torch.ones(5, 1)
    values = torch.zeros(5, 1)
    terminated = torch.tensor([[0], [1], [0], [0], [0]], dtype=torch.bool)
    truncated = torch.tensor([[0], [0], [0], [1], [0]], dtype=torch.bool)
    final_values = torch.tensor([[100.0], [100.0], [100.0], [4.0], [100.0]])  # only step 3's entry may count
    _, returns = compute_gae(ones, values, terminated, truncated, final_values, torch.tensor([8.0]), 0.5, 1.0)
    expected = torch.tensor([[1.5], [1.0], [1 + 0.5 * (1 + 0.5 * 4)], [1 + 0.5 * 4], [1 + 0.5 * 8]])
    torch.testing.assert_close(returns, expected)

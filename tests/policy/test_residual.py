from __future__ import annotations

import dataclasses

import torch

from policy.config import PPOConfig
from policy.networks import ActorCritic
from policy.ppo import make_twin, train
from policy.residual import SINGLE_VALVE_PUMP_CAP, interlock
from policy.tuning import load_tuned_threshold
from safety.interlock import PUMP_MIN_RUNNING_PCT
from twin.spec import ObservationSpec

OBS_DIM = ObservationSpec(6).dim

ZONES = 6
EVAL_SEED = 123



def expert_observations(steps: int = 40, num_envs: int = 32) -> torch.Tensor:
    """Observations visited by the tuned expert (so some valves are open and the hysteresis matters)."""
    cfg = PPOConfig.preset("tiny")
    twin = make_twin(cfg, num_instances=num_envs, seed=EVAL_SEED)
    expert = load_tuned_threshold()
    obs, rows = twin.reset(), []
    for _ in range(steps):
        rows.append(obs.clone())
        obs, *_ = twin.step(expert(obs))
    return torch.cat(rows)


def rollout(cfg: PPOConfig, controller, steps: int = 48, num_envs: int = 64) -> tuple[float, int]:
    """Mean reward per env step and the number of terminations on a fixed evaluation twin."""
    twin = make_twin(cfg, num_instances=num_envs, seed=EVAL_SEED)
    obs, total, terminations = twin.reset(), 0.0, 0
    with torch.no_grad():
        for _ in range(steps):
            obs, reward, terminated, _, _ = twin.step(controller(obs))
            total += float(reward.mean())
            terminations += int(terminated.sum())
    return total / steps, terminations


def test_untrained_residual_policy_is_the_expert() -> None:
    torch.manual_seed(0)
    obs = expert_observations()
    expert = load_tuned_threshold()
    agent = ActorCritic(obs.shape[1], ZONES, residual=expert)
    agent.update_obs_stats(obs)
    want, got = interlock(expert(obs), ZONES, obs), agent.act(obs)  # the expert behind the same interlock
    assert 0 < int(want[:, :ZONES].sum()) < want[:, :ZONES].numel()  # both decisions are exercised
    assert torch.equal(got[:, :ZONES], want[:, :ZONES])
    torch.testing.assert_close(got[:, ZONES:], want[:, ZONES:], atol=0.2, rtol=0.0)
    # Where the expert has pump or lamps off, so does the policy: exactly 0, not the 0.1 % its Beta
    # centres on (a lamp at 0.1 % is paid for and counts as lamp hours).
    off = want[:, ZONES:] == 0.0
    assert off.any() and (got[:, ZONES:][off] == 0.0).all()


def test_interlock_never_pumps_against_closed_valves() -> None:
    gen = torch.Generator().manual_seed(0)
    action = torch.cat([(torch.rand(4096, ZONES, generator=gen) < 0.2).float(),
                        torch.rand(4096, 2, generator=gen) * 100.0], dim=1)
    out = interlock(action, ZONES)
    n_open = (out[:, :ZONES] >= 0.5).sum(1)
    assert (n_open == 0).any() and (n_open == 1).any()
    assert (out[n_open == 0, ZONES] == 0).all()
    assert (out[n_open == 1, ZONES] <= SINGLE_VALVE_PUMP_CAP).all()
    running = out[n_open >= 1, ZONES]
    assert (running[running > 0] >= PUMP_MIN_RUNNING_PCT).all()  # the clipper's minimum speed
    many = n_open >= 2
    slow = (action[:, ZONES] > 0) & (action[:, ZONES] < PUMP_MIN_RUNNING_PCT)
    assert (many & slow).any() and (out[many & slow, ZONES] == PUMP_MIN_RUNNING_PCT).all()
    assert torch.equal(out[many & ~slow], action[many & ~slow])
    assert torch.equal(out[:, :ZONES], action[:, :ZONES]) and torch.equal(out[:, -1], action[:, -1])

    agent = ActorCritic(OBS_DIM, ZONES)  # plain mode: act is interlocked too
    det = agent.act(torch.randn(512, OBS_DIM, generator=gen) * 5)
    assert (det[(det[:, :ZONES] < 0.5).all(1), ZONES] == 0).all()


def test_residual_mode_survives_a_state_dict_round_trip() -> None:
    agent = ActorCritic(OBS_DIM, ZONES, residual=load_tuned_threshold(), prior_logit=3.0)
    plain = ActorCritic(OBS_DIM, ZONES)  # what checkpoint.load_member builds
    plain.load_state_dict(agent.state_dict())
    assert plain.is_residual and plain.expert() == agent.expert()
    old = {k: v for k, v in ActorCritic(OBS_DIM, ZONES).state_dict().items() if k != "residual_cfg"}
    restored = ActorCritic(OBS_DIM, ZONES)
    restored.load_state_dict(old)  # checkpoints from before residual mode stay plain
    assert not restored.is_residual


def test_break_even_lighting_survives_a_round_trip_and_older_checkpoints_keep_the_growers_rule() -> None:
    tuned = load_tuned_threshold()
    assert tuned.c0 is not None  # the tuned expert lights by the break-even rule
    agent = ActorCritic(OBS_DIM, ZONES, residual=tuned)
    plain = ActorCritic(OBS_DIM, ZONES)
    plain.load_state_dict(agent.state_dict())
    assert plain.expert() == agent.expert() and plain.expert().c0 == tuned.c0
    older = agent.state_dict()
    older["residual_cfg"] = older["residual_cfg"][:5].clone()  # written before break-even lighting
    restored = ActorCritic(OBS_DIM, ZONES)
    restored.load_state_dict(older)
    expert = restored.expert()
    assert expert is not None and expert.c0 is None \
        and (expert.refill, expert.stop) == (tuned.refill, tuned.stop)


def test_short_residual_training_stays_at_expert_level() -> None:
    cfg = PPOConfig.preset("tiny", residual=True, num_steps=32, total_steps=64 * 32 * 4)
    result = train(cfg)
    assert result.agent.is_residual and result.metrics[-1].bc_coef == 0.0
    # the drift watch: the policy's open rate next to its expert's on the same states
    for m in result.metrics:
        assert 0.0 < m.expert_open_rate < 1.0 and abs(m.valve_open_rate - m.expert_open_rate) < 0.1
    expert = dataclasses.replace(load_tuned_threshold(), zones=ZONES)
    trained, trained_terms = rollout(cfg, result.agent.act)
    reference, _ = rollout(cfg, expert)
    print(f"residual {trained:.4f} tuned expert {reference:.4f}")
    assert trained_terms == 0
    assert trained > reference - 0.02


def test_pump_never_runs_on_one_path_nor_on_a_failed_valve() -> None:
    """A valve can stick closed at any step and feedback tells only afterwards: the pump never runs
    on a single valve, and a valve known to have failed is neither commanded nor counted."""
    spec = ObservationSpec(ZONES)
    sl = spec.slices
    gen = torch.Generator().manual_seed(3)
    n = 4096
    obs = torch.zeros(n, spec.dim)
    obs[:, sl["hour_cos"]] = -1.0  # noon: outside the dark period, which test_interlock covers
    obs[:, sl["target_low"]] = 0.20
    obs[:, sl["target_high"]] = 0.30
    obs[:, sl["moisture"]] = 0.15 + 0.2 * torch.rand(n, ZONES, generator=gen)
    obs[:, sl["valve_open"]] = (torch.rand(n, ZONES, generator=gen) < 0.3).float()
    failed = torch.rand(n, ZONES, generator=gen) < 0.15
    failed[:64] = True  # rows where no second path exists
    obs[:, sl["valve_failed"]] = failed.float()
    action = torch.cat([(torch.rand(n, ZONES, generator=gen) < 0.2).float(),
                        torch.rand(n, 2, generator=gen) * 100.0], dim=1)
    out = interlock(action, ZONES, obs)

    valves_in, valves_out = action[:, :ZONES] >= 0.5, out[:, :ZONES] >= 0.5
    healthy_in = valves_in & ~failed
    assert not (valves_out & failed).any()
    single = (healthy_in.sum(1) == 1) & (action[:, ZONES] > 0) & (~failed).sum(1).ge(2)
    assert single.sum() > 100
    assert (valves_out[single].sum(1) == 2).all()
    assert ((valves_out.sum(1) >= 2) | (out[:, ZONES] <= 85.0)).all()  # one path: relief-safe speed only
    assert ((valves_out.sum(1) > 0) | (out[:, ZONES] == 0)).all()
    assert (valves_out >= healthy_in).all()  # healthy commands are kept
    added = valves_out & ~healthy_in
    level = (obs[:, sl["moisture"]] - 0.20) / 0.10
    lowest_healthy_closed = torch.where(healthy_in | failed, torch.inf, level).argmin(1)
    assert torch.equal(added[single].float().argmax(1), lowest_healthy_closed[single])
    untouched = ~single & ~(valves_in & failed).any(1)
    assert torch.equal(out[untouched], interlock(action, ZONES)[untouched])


def test_prior_kl_is_zero_at_the_expert_and_grows_with_the_adjustment() -> None:
    obs = expert_observations(steps=20)
    expert = dataclasses.replace(load_tuned_threshold(), zones=ZONES)
    agent = ActorCritic(obs.shape[1], ZONES, residual=expert)
    agent.update_obs_stats(obs)
    with torch.no_grad():
        action = agent.get_action_and_value(obs)[0]
        _, logp, entropy, value = agent.get_action_and_value(obs, action)
        ev = agent.evaluate_actions(obs, action, prior_kl_rows=obs.shape[0])
    # evaluate_actions is get_action_and_value's evaluation plus the KL, from the same forward pass
    assert torch.equal(ev.logprob, logp) and torch.equal(ev.entropy, entropy) and torch.equal(ev.value, value)
    # the untrained residual is its prior
    assert ev.prior_kl is not None and float(ev.prior_kl.abs().max()) < 1e-5
    assert agent.evaluate_actions(obs, action).prior_kl is None
    first = agent.evaluate_actions(obs, action, prior_kl_rows=16).prior_kl
    assert first is not None and first.shape == (16,)
    with torch.no_grad():
        agent.actor_head.bias.add_(0.5)  # move every valve logit and the pump/lights modes off the expert's
        moved = agent.evaluate_actions(obs, action, prior_kl_rows=obs.shape[0]).prior_kl
        agent.actor_head.bias.add_(0.5)
        further = agent.evaluate_actions(obs, action, prior_kl_rows=obs.shape[0]).prior_kl
    assert moved is not None and further is not None
    assert bool((moved > 0).all()) and float(further.mean()) > 2.0 * float(moved.mean())
    plain = ActorCritic(obs.shape[1], ZONES)
    try:
        plain.evaluate_actions(obs, action, prior_kl_rows=8)
    except ValueError as exc:
        assert "residual" in str(exc)
    else:
        raise AssertionError("a plain policy has no prior to measure against")


def test_the_prior_kl_is_charged_in_training() -> None:
    cfg = PPOConfig.preset("tiny", residual=True, num_steps=32, total_steps=64 * 32 * 3)
    charged = train(cfg).metrics
    assert all(m.prior_kl > 0 for m in charged[1:])  # the first update starts at the prior itself
    free = train(cfg.replace(prior_kl_coef=0.0)).metrics
    assert all(m.prior_kl == 0.0 for m in free)


def test_lamp_switch_starts_at_the_expert_and_explores_whole_lamp_hours() -> None:
    torch.manual_seed(0)
    obs = expert_observations()
    expert = load_tuned_threshold()
    agent = ActorCritic(obs.shape[1], ZONES, residual=expert, lamp_logit=3.0)
    agent.update_obs_stats(obs)
    want, got = interlock(expert(obs), ZONES, obs), agent.act(obs)
    lamps_on = want[:, -1] > 0
    assert lamps_on.any() and (~lamps_on).any()  # both lamp decisions are exercised
    assert torch.equal(got[:, :ZONES], want[:, :ZONES]) and torch.equal(got[:, -1], want[:, -1])

    # Sampled lamps are on or off, and disagree with the expert at about sigmoid(-3) = 4.7 %.
    action, logprob, _ = agent.sample(obs)
    assert set(action[:, -1].unique().tolist()) <= {0.0, 100.0}
    flipped = ((action[:, -1] >= 50.0) != (expert(obs)[:, -1] >= 50.0)).float().mean()
    assert 0.02 < float(flipped) < 0.08
    # The stored action's log-prob is the sampled one's (the update re-reads what the rollout drew).
    with torch.no_grad():
        torch.testing.assert_close(agent.evaluate_actions(obs, action).logprob, logprob)
        # The KL to the untrained policy is 0 at the start and grows when the head moves the lamps.
        assert float(agent.evaluate_actions(obs, action, prior_kl_rows=len(obs)).prior_kl.abs().max()) < 1e-6
        agent.actor_head.bias[ZONES + 1] = 4.0  # the lights adjustment: lamps on everywhere outside the dark
        assert float(agent.evaluate_actions(obs, action, prior_kl_rows=len(obs)).prior_kl.mean()) > 0.1
        assert (agent.act(obs)[:, -1] > 0).float().mean() > lamps_on.float().mean()


def test_checkpoints_from_before_the_lamp_switch_load_with_beta_lamps() -> None:
    agent = ActorCritic(OBS_DIM, ZONES, residual=load_tuned_threshold())
    older = agent.state_dict()
    older["residual_cfg"] = older["residual_cfg"][:8].clone()  # written before the lamp switch
    loaded = ActorCritic(OBS_DIM, ZONES)
    loaded.load_state_dict(older)
    assert loaded.is_residual and not loaded.lamp_switch
    obs = torch.randn(64, OBS_DIM, generator=torch.Generator().manual_seed(1))
    assert torch.equal(loaded.act(obs), agent.act(obs))

"""PPO with a decaying behaviour-cloning term, on the batched torch twin (CleanRL style).

One iteration: collect ``num_steps`` control steps on ``num_envs`` twin instances into
preallocated [T, B, ...] tensors, compute GAE (termination cuts the bootstrap, truncation
bootstraps from the pre-reset observation), then run clipped-surrogate minibatch epochs.
The BC term pulls the policy towards the threshold expert early on, so exploration starts
from a controller that irrigates instead of from random valve flapping; its weight decays
linearly to zero so PPO can improve on the teacher. With ``cfg.residual`` the network instead
adjusts the threshold tuned behind the interlock (``served_threshold.json``, see
:mod:`policy.networks`), starts at its level and skips expert demonstrations.
Every action goes through :func:`policy.residual.interlock` before the twin, as in serving.

Long runs can be snapshotted every few iterations and resumed from a snapshot: it holds the
weights, optimiser moments, iteration counters, RNG states, reward-scaler statistics and the
twin's in-flight episodes, so a resumed run continues the same trajectory as an
uninterrupted one (bit-identical on CPU for the same device and thread count).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from policy.baselines import ThresholdExpert
from policy.bc import bc_loss, collect_expert_demos, load_demos
from policy.config import PPOConfig
from policy.distributed import context as rank_context
from policy.gae import compute_gae
from policy.networks import ActorCritic
from policy.residual import ExpertPrior, interlock
from policy.tuning import served_expert
from twin import GreenhouseTwin
from twin.spec import ObservationSpec
from twin.types import TwinParams, TwinState

TrainSnapshot = dict[str, Any]
"""Plain tensors, numbers and dicts only, so ``torch.load(weights_only=True)`` can read it back."""
SNAPSHOT_FORMAT = 1


class IterationMetrics(NamedTuple):
    """What one PPO iteration did (losses are means over its minibatches)."""

    iteration: int
    env_steps: int
    """Cumulative env steps (instances x control steps) after this iteration."""
    steps_per_s: float
    """Rollout throughput: env steps per second of collection."""
    mean_reward: float
    """Mean raw (unscaled) reward per env step in the rollout."""
    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    clipfrac: float
    bc_loss: float
    bc_coef: float
    valve_open_rate: float
    """Share of valve commands in the rollout that were 'open' (watch for the never-irrigate collapse)."""
    lr: float
    expert_open_rate: float = -1.0
    """The share of valves the served threshold would open on the same observations (the residual
    prior, in residual mode). A valve open rate falling away from it is the policy drifting drier
    than the fallback controller. -1: not recorded (snapshots from before this field)."""
    prior_kl: float = 0.0
    """Residual mode: mean KL(policy || untrained residual) over the update's samples (0 when not charged)."""


def stagger_clocks(twin: Any, obs: torch.Tensor, steps: int, gen: torch.Generator, controller: ThresholdExpert,
                   zones: int) -> torch.Tensor:
    """Spread the instances' clocks over ``steps`` control steps; returns the observation after.

    Every episode starts at midnight and lasts the same, so instances reset together stay in
    step: each rollout then shows the learner a single time of day (all night, then all noon)
    and the update swings with it. Measured at gamma 0.999, 64-step rollouts, 9.8 M steps: a
    synchronised batch drifted to never irrigating (held-out reward 0.301), a staggered one did
    not (0.689). Here ``controller`` (the served threshold, behind the interlock) runs the batch
    for ``steps`` steps while each instance restarts its first episode at its own seeded step.
    """
    offsets = torch.randint(steps, (obs.shape[0],), generator=gen, device=obs.device)
    fresh_params, fresh_state = twin.params, twin.state
    if isinstance(twin, GreenhouseTwin):  # live records: keep copies of the fresh episodes
        fresh_params = TwinParams(**{k: v.clone() for k, v in fresh_params.arrays().items()})
        fresh_state = TwinState(**{k: v.clone() for k, v in fresh_state.arrays().items()})
    with torch.inference_mode():
        for step in range(steps):
            ids = torch.nonzero(offsets == step).squeeze(1)
            if ids.numel():
                rows_p = TwinParams(**{k: v[ids.to(v.device)] for k, v in fresh_params.arrays().items()})
                rows_s = TwinState(**{k: v[ids.to(v.device)] for k, v in fresh_state.arrays().items()})
                if isinstance(twin, GreenhouseTwin):
                    twin.params.scatter_(ids, rows_p)
                    twin.state.scatter_(ids, rows_s)
                else:  # worker processes hold the instances (policy.parallel): round-trip every row
                    params, state = twin.params, twin.state
                    params.scatter_(ids.cpu(), rows_p)
                    state.scatter_(ids.cpu(), rows_s)
                    twin.restore_episodes(params, state)
            obs, *_ = twin.step(interlock(controller(obs), zones, obs))
    return obs


class TrainResult(NamedTuple):
    agent: ActorCritic
    metrics: list[IterationMetrics]
    config: PPOConfig


def make_twin(cfg: PPOConfig, num_instances: int | None = None, seed: int | None = None,
              instance_offset: int = 0) -> GreenhouseTwin:
    """The torch twin a config trains on (or a differently seeded/sized one for evaluation).

    ``instance_offset`` makes its instances those of rows offset.. of a larger twin (data-parallel ranks)."""
    return GreenhouseTwin(num_instances=num_instances or cfg.num_envs, backend="torch", device=cfg.device,
                          seed=cfg.seed if seed is None else seed, instance_offset=instance_offset,
                          **cfg.twin_kwargs())


def _rng_states(device: torch.device, gen: torch.Generator) -> dict[str, Any]:
    states = {"device_type": device.type, "torch": torch.get_rng_state(), "generator": gen.get_state()}
    if device.type == "cuda":
        states["cuda"] = torch.cuda.get_rng_state(device)
    return states


def _restore_rng(states: dict[str, Any], device: torch.device, gen: torch.Generator) -> None:
    """Restore RNG streams; a snapshot from another device type keeps the fresh streams (states differ in kind)."""
    torch.set_rng_state(states["torch"].cpu())
    if states["device_type"] != device.type:
        return
    gen.set_state(states["generator"].cpu())
    if device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"].cpu(), device)


def train(cfg: PPOConfig, *, progress: Callable[[IterationMetrics], None] | None = None,
          resume: TrainSnapshot | None = None, snapshot: Callable[[TrainSnapshot], None] | None = None,
          snapshot_every: int = 0) -> TrainResult:
    """Train an :class:`ActorCritic` on the twin; deterministic for a given ``cfg.seed``.

    With ``snapshot`` and ``snapshot_every > 0`` the callback receives a :data:`TrainSnapshot`
    after every ``snapshot_every``-th iteration (not after the last: the result is the final
    state). Passing one back as ``resume`` continues from it instead of starting over.
    With ``cfg.workers > 0`` the rollouts run on worker processes (:mod:`policy.parallel`),
    which are stopped and their shared memory released however training ends.
    """
    if cfg.workers > 0:
        from policy.parallel.vector import ShmVectorTwin

        with ShmVectorTwin(cfg.num_envs, cfg.workers, seed=cfg.seed, device=cfg.device,
                           instance_offset=rank_context().rank * cfg.num_envs, **cfg.twin_kwargs()) as vec:
            return _train(cfg, progress=progress, resume=resume, snapshot=snapshot, snapshot_every=snapshot_every,
                          twin=vec)
    return _train(cfg, progress=progress, resume=resume, snapshot=snapshot, snapshot_every=snapshot_every)


def _train(cfg: PPOConfig, *, progress: Callable[[IterationMetrics], None] | None, resume: TrainSnapshot | None,
           snapshot: Callable[[TrainSnapshot], None] | None, snapshot_every: int, twin: Any = None) -> TrainResult:
    """:func:`train` on ``twin`` (None: a fresh in-process torch twin, sharded over ranks)."""
    torch.manual_seed(cfg.seed)
    ctx = rank_context()  # one rank unless torch.distributed is initialised (see policy.distributed)
    resume, snapshot_every = ctx.sync_start(cfg, resume, snapshot_every)
    device = torch.device(cfg.device)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)  # minibatch shuffles and demo draws
    twin = make_twin(cfg, instance_offset=ctx.rank * cfg.num_envs) if twin is None else twin
    zones, obs_dim, act_dim = twin.config.zones, twin.observation_spec.dim, twin.action_spec.dim
    # The residual prior is the threshold tuned behind the interlock the rollouts and the service apply.
    # The service's fallback: the residual prior, the stagger's driver and the open-rate yardstick.
    served = served_expert(zones)
    expert = served if cfg.residual else None
    agent = ActorCritic(obs_dim, zones, cfg.hidden, cfg.shared_torso, residual=expert,
                        prior_logit=cfg.residual_prior_logit).to(device)
    ctx.prepare(agent)
    # foreach: one fused kernel per update step over all parameters instead of one per tensor
    # (the default on CUDA only); on CPU it cuts the update's optimiser time, same arithmetic.
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5, foreach=True)

    # ---- expert demonstrations for the BC term --------------------------------------------
    expert_demos = cfg.bc_demo_steps > 0 and not cfg.residual  # residual starts at the expert
    use_bc = cfg.bc_coef > 0 and (expert_demos or bool(cfg.demo_files))
    if use_bc:
        # Demos are a deterministic function of the seed and the files, so a resumed run rebuilds them.
        sets = [load_demos(path, ObservationSpec(zones)) for path in cfg.demo_files]
        if expert_demos:
            sets.insert(0, collect_expert_demos(twin, ThresholdExpert(zones=zones), cfg.bc_demo_steps))
        demo_obs = torch.cat([d.obs for d in sets]).to(device)
        demo_act = torch.cat([d.action for d in sets]).to(device)
        demo_open_rate = float((demo_act[:, :zones] >= 0.5).float().mean())
    if use_bc and resume is None and not cfg.residual:
        agent.update_obs_stats(demo_obs)
        for _ in range(cfg.bc_pretrain_updates):
            pick = torch.randint(demo_obs.shape[0], (cfg.minibatch_size,), generator=gen, device=device)
            optimizer.zero_grad()
            bc_loss(agent, demo_obs[pick], demo_act[pick], demo_open_rate, cfg.bc_valve_balance).loss.backward()
            ctx.average_gradients(agent)
            nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm, foreach=True)
            optimizer.step()

    # ---- rollout storage --------------------------------------------------------------------
    T, B = cfg.num_steps, cfg.num_envs
    obs_buf = torch.zeros((T, B, obs_dim), device=device)
    act_buf = torch.zeros((T, B, act_dim), device=device)
    logp_buf = torch.zeros((T, B), device=device)
    rew_buf = torch.zeros((T, B), device=device)
    val_buf = torch.zeros((T, B), device=device)
    final_val_buf = torch.zeros((T, B), device=device)
    term_buf = torch.zeros((T, B), dtype=torch.bool, device=device)
    trunc_buf = torch.zeros((T, B), dtype=torch.bool, device=device)
    # The residual expert's decision per observation, kept so the update need not recompute it.
    prior_valves_buf = torch.zeros((T, B, zones), dtype=torch.bool, device=device)
    prior_cont_buf = torch.zeros((T, B, 2), device=device)
    scaler = ctx.reward_scaler(B, cfg.gamma, device) if cfg.scale_rewards else None

    next_obs = twin.reset()
    if resume is None and cfg.stagger_starts:
        next_obs = stagger_clocks(twin, next_obs, int(round(86_400.0 / cfg.dt_s)), gen, served, zones)
    metrics: list[IterationMetrics] = []
    env_steps, first_iteration = 0, 1
    if resume is None:
        agent.update_obs_stats(next_obs)
    else:
        if resume.get("format") != SNAPSHOT_FORMAT or resume["num_envs"] != B:
            raise ValueError("training snapshot does not match this config (format or num_envs)")
        agent.load_state_dict(resume["agent"])
        optimizer.load_state_dict(resume["optimizer"])
        _restore_rng(resume["rng"], device, gen)
        if scaler is not None and resume["scaler"] is not None:
            scaler.stats.load_state_dict(resume["scaler"]["stats"])
            scaler.returns = resume["scaler"]["returns"].to(device)
        params = TwinParams(**{k: v.to(device) for k, v in resume["twin_params"].items()})
        state = TwinState(**{k: v.to(device) for k, v in resume["twin_state"].items()})
        if isinstance(twin, GreenhouseTwin):
            all_ids = torch.arange(B, device=device)
            twin.params.scatter_(all_ids, params)
            twin.state.scatter_(all_ids, state)
        else:  # worker processes hold the instances (policy.parallel)
            twin.restore_episodes(params, state)
        next_obs = resume["next_obs"].to(device)
        metrics = [IterationMetrics(**m) for m in resume["metrics"]]
        env_steps, first_iteration = int(resume["env_steps"]), int(resume["iteration"]) + 1
    for iteration in range(first_iteration, cfg.num_iterations + 1):
        lr = cfg.lr * (1.0 - (iteration - 1) / cfg.num_iterations) if cfg.anneal_lr else cfg.lr
        for group in optimizer.param_groups:
            group["lr"] = lr

        # ---- collect ------------------------------------------------------------------------
        start = time.perf_counter()
        with torch.inference_mode():  # nothing here is differentiated: skip even no_grad's bookkeeping
            for t in range(T):
                obs_buf[t] = next_obs
                prior = agent.prior(next_obs)
                if prior is not None:
                    prior_valves_buf[t], prior_cont_buf[t] = prior
                action, logp, value = agent.sample(next_obs, prior)
                # The twin sees the interlocked action (as in serving); PPO keeps the sampled one.
                next_obs, reward, terminated, truncated, info = twin.step(interlock(action, zones, next_obs))
                act_buf[t], logp_buf[t], val_buf[t] = action, logp, value
                rew_buf[t], term_buf[t], trunc_buf[t] = reward, terminated, truncated
                final_val_buf[t] = 0.0
                if bool(truncated.any()):
                    final_val_buf[t] = torch.where(truncated, agent.get_value(info["final_obs"]), 0.0)
            last_value = agent.get_value(next_obs)
        steps_per_s = T * B / (time.perf_counter() - start)
        env_steps += T * B

        # ---- advantages ---------------------------------------------------------------------
        rewards = scaler(rew_buf, term_buf | trunc_buf) if scaler is not None else rew_buf
        advantages, returns = compute_gae(rewards, val_buf, term_buf, trunc_buf, final_val_buf, last_value,
                                          cfg.gamma, cfg.gae_lambda)

        # ---- optimise -----------------------------------------------------------------------
        b_obs, b_act = obs_buf.reshape(-1, obs_dim), act_buf.reshape(-1, act_dim)
        b_logp, b_adv, b_ret = logp_buf.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
        b_prior_valves, b_prior_cont = prior_valves_buf.reshape(-1, zones), prior_cont_buf.reshape(-1, 2)
        bc_coef = cfg.bc_coef * max(0.0, 1.0 - (env_steps - T * B) / cfg.bc_decay_steps) if use_bc else 0.0
        actor_on = 1.0 if iteration > cfg.critic_warmup_iterations else 0.0
        sums = torch.zeros(8, device=device)  # pg, v, entropy, kl, clipfrac, bc, prior kl, count
        # The KL leash on a quarter of each (shuffled) minibatch: unbiased, a quarter of the cost.
        kl_rows = max(1, cfg.minibatch_size // 4) if agent.is_residual and cfg.prior_kl_coef > 0 else 0
        for _ in range(cfg.update_epochs):
            perm = torch.randperm(cfg.batch_size, generator=gen, device=device)
            for mb in perm.split(cfg.minibatch_size):
                # index_select takes the same rows as b_x[mb], without advanced indexing's overhead.
                mb_obs, mb_act, mb_logp, adv, mb_ret = (x.index_select(0, mb)
                                                        for x in (b_obs, b_act, b_logp, b_adv, b_ret))
                prior = ExpertPrior(b_prior_valves.index_select(0, mb), b_prior_cont.index_select(0, mb)) \
                    if agent.is_residual else None
                ev = agent.evaluate_actions(mb_obs, mb_act, prior, prior_kl_rows=kl_rows)
                new_logp, entropy, new_value = ev.logprob, ev.entropy, ev.value
                log_ratio = new_logp - mb_logp
                ratio = log_ratio.exp()
                with torch.no_grad():
                    approx_kl = ((ratio - 1.0) - log_ratio).mean()
                    clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

                if cfg.norm_adv:
                    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
                pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
                v_loss = 0.5 * (new_value - mb_ret).square().mean()
                entropy_mean = entropy.mean()
                loss = actor_on * (pg_loss - cfg.ent_coef * entropy_mean) + cfg.vf_coef * v_loss
                prior_kl = torch.zeros((), device=device)
                if ev.prior_kl is not None:
                    prior_kl = ev.prior_kl.mean()
                    loss = loss + cfg.prior_kl_coef * prior_kl

                bc_value = torch.zeros((), device=device)
                if bc_coef > 0:
                    pick = torch.randint(demo_obs.shape[0], (mb.numel(),), generator=gen, device=device)
                    bc_value = bc_loss(agent, demo_obs.index_select(0, pick), demo_act.index_select(0, pick),
                                       demo_open_rate, cfg.bc_valve_balance).loss
                    loss = loss + bc_coef * bc_value

                optimizer.zero_grad()
                loss.backward()
                ctx.average_gradients(agent)
                nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm, foreach=True)
                optimizer.step()
                sums += torch.stack([pg_loss.detach(), v_loss.detach(), entropy_mean.detach(), approx_kl,
                                     clipfrac, bc_value.detach(), prior_kl.detach(), torch.ones((), device=device)])

        # Normaliser moves only between iterations, so stored log-probs match the update's.
        agent.update_obs_stats(b_obs)
        pg, vl, ent, kl, cf, bc, pkl, _ = (sums / sums[-1]).tolist()
        m = ctx.reduce_metrics(IterationMetrics(
            iteration=iteration, env_steps=env_steps, steps_per_s=steps_per_s,
            mean_reward=float(rew_buf.mean()), policy_loss=pg, value_loss=vl, entropy=ent, approx_kl=kl,
            clipfrac=cf, bc_loss=bc, bc_coef=bc_coef,
            valve_open_rate=float((act_buf[..., :zones] >= 0.5).float().mean()), lr=lr,
            expert_open_rate=float(prior_valves_buf.float().mean() if agent.is_residual
                                   else (served(b_obs)[:, :zones] >= 0.5).float().mean()), prior_kl=pkl))
        metrics.append(m)
        if progress is not None and ctx.is_main:
            progress(m)
        if (snapshot is not None or ctx.active) and snapshot_every > 0 and iteration % snapshot_every == 0 \
                and iteration < cfg.num_iterations:
            snap: TrainSnapshot = {
                "format": SNAPSHOT_FORMAT, "iteration": iteration, "env_steps": env_steps, "num_envs": B,
                "agent": agent.state_dict(), "optimizer": optimizer.state_dict(),
                "rng": _rng_states(device, gen),
                "scaler": None if scaler is None else {"stats": scaler.stats.state_dict(),
                                                       "returns": scaler.returns.clone()},
                **ctx.gather_instances(twin, next_obs),  # every rank's instances on a multi-rank run
                "metrics": [m._asdict() for m in metrics],
            }
            if snapshot is not None and ctx.is_main:
                snapshot(snap)
    return TrainResult(agent, metrics, cfg)

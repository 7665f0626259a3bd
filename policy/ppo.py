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
The loop is written against :class:`policy.rollout.VectorTwin`, which the in-process torch twin
and the worker processes of :mod:`policy.parallel` both implement.

Long runs can be snapshotted every few iterations and resumed from a snapshot: it holds the
weights, optimiser moments, iteration counters, RNG states, reward-scaler statistics and the
twin's in-flight episodes, so a resumed run continues the same trajectory as an
uninterrupted one (bit-identical on CPU for the same device and thread count).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import nn

from policy.baselines import ThresholdExpert
from policy.bc import DemoBatch, bc_loss, collect_expert_demos, lamp_bc_loss, load_demos
from policy.config import PPOConfig
from policy.distributed import RankContext
from policy.distributed import context as rank_context
from policy.gae import compute_gae
from policy.networks import ActorCritic
from policy.residual import ExpertPrior, interlock
from policy.rollout import Rollout, VectorTwin, collect
from policy.shaping import FruitPotential, shaped_rewards
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
    than the fallback controller. -1: not recorded (snapshots that lack this field)."""
    prior_kl: float = 0.0
    """Residual mode: mean KL(policy || untrained residual) over the update's samples (0 when not charged)."""


def stagger_clocks(twin: VectorTwin, obs: torch.Tensor, steps: int, gen: torch.Generator,
                   controller: ThresholdExpert, zones: int) -> torch.Tensor:
    """Spread the instances' clocks over ``steps`` control steps; returns the observation after.

    Every episode starts at midnight and lasts the same, so instances reset together stay in
    step: each rollout then shows the learner a single time of day (all night, then all noon)
    and the update swings with it. Measured at gamma 0.999, 64-step rollouts, 9.8 M steps: a
    synchronised batch drifted to never irrigating (held-out reward 0.301), a staggered one did
    not (0.689). Here ``controller`` (the served threshold, behind the interlock) runs the batch
    for ``steps`` steps while each instance restarts its first episode at its own seeded step.
    """
    offsets = torch.randint(steps, (obs.shape[0],), generator=gen, device=obs.device)
    fresh_params, fresh_state = twin.episodes()
    with torch.inference_mode():
        for step in range(steps):
            ids = torch.nonzero(offsets == step).squeeze(1)
            if ids.numel():
                twin.restore_episodes(TwinParams(**{k: v[ids.to(v.device)]
                                                    for k, v in fresh_params.arrays().items()}),
                                      TwinState(**{k: v[ids.to(v.device)]
                                                   for k, v in fresh_state.arrays().items()}),
                                      ids)
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
    """Restore RNG streams; a snapshot from another device type keeps the fresh streams (states differ in
    kind)."""
    torch.set_rng_state(states["torch"].cpu())
    if states["device_type"] != device.type:
        return
    gen.set_state(states["generator"].cpu())
    if device.type == "cuda":
        torch.cuda.set_rng_state(states["cuda"].cpu(), device)


Validator = Callable[[int, int, ActorCritic], None]
"""Called with (iteration, env steps, agent) every ``cfg.validate_every`` iterations and after the last."""


def train(cfg: PPOConfig, *, progress: Callable[[IterationMetrics], None] | None = None,
          resume: TrainSnapshot | None = None, snapshot: Callable[[TrainSnapshot], None] | None = None,
          snapshot_every: int = 0, validate: Validator | None = None,
          init_state: dict[str, torch.Tensor] | None = None) -> TrainResult:
    """Train an :class:`ActorCritic` on the twin; deterministic for a given ``cfg.seed``.

    With ``snapshot`` and ``snapshot_every > 0`` the callback receives a :data:`TrainSnapshot`
    after every ``snapshot_every``-th iteration (not after the last: the result is the final
    state). Passing one back as ``resume`` continues from it instead of starting over.
    ``init_state`` (an agent's ``state_dict``) fine-tunes a trained policy instead of a fresh one
    (the nightly retraining starts from the incumbent); its BC warm start is skipped.
    With ``cfg.workers > 0`` the rollouts run on worker processes (:mod:`policy.parallel`),
    which are stopped and their shared memory released however training ends. On a
    ``torchrun`` rank the twin holds that rank's slice of the run's instances.
    """
    offset = rank_context().rank * cfg.num_envs
    if cfg.workers > 0:
        from policy.parallel.vector import ShmVectorTwin

        with ShmVectorTwin(cfg.num_envs, cfg.workers, seed=cfg.seed, device=cfg.device,
                           instance_offset=offset, **cfg.twin_kwargs()) as vec:
            return _train(cfg, vec, progress, resume, snapshot, snapshot_every, validate, init_state)
    twin: VectorTwin = make_twin(cfg, instance_offset=offset)
    return _train(cfg, twin, progress, resume, snapshot, snapshot_every, validate, init_state)


class Demos(NamedTuple):
    """Demonstrations the BC term clones: expert rollouts and operator files."""

    obs: torch.Tensor
    action: torch.Tensor
    open_rate: float
    """Share of open valves in the demos (the BC loss's class balance)."""


UPDATE_METRICS = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "bc_loss", "prior_kl")
"""The :class:`IterationMetrics` an update reports, each a mean over its minibatches."""


def _train(cfg: PPOConfig, twin: VectorTwin, progress: Callable[[IterationMetrics], None] | None,
           resume: TrainSnapshot | None, snapshot: Callable[[TrainSnapshot], None] | None,
           snapshot_every: int, validate: Validator | None = None,
           init_state: dict[str, torch.Tensor] | None = None) -> TrainResult:
    """The loop of :func:`train` on ``twin``: setup, then per iteration collect, GAE, update, log."""
    # ---- setup: seeds, ranks, agent, optimiser, BC warm start ------------------------------------
    torch.manual_seed(cfg.seed)
    ctx = rank_context()  # one rank unless torch.distributed is initialised (see policy.distributed)
    resume, snapshot_every, fine_tuning = ctx.sync_start(cfg, resume, snapshot_every, init_state is not None)
    device = torch.device(cfg.device)
    gen = torch.Generator(device=device).manual_seed(cfg.seed)  # minibatch shuffles and demo draws
    zones = twin.config.zones
    # The service's fallback, tuned behind the interlock the rollouts and the service apply:
    # the residual prior, the stagger's driver and the open-rate yardstick.
    served = served_expert(zones)
    agent = ActorCritic(twin.observation_spec.dim, zones, cfg.hidden, cfg.shared_torso,
                        residual=served if cfg.residual else None, prior_logit=cfg.residual_prior_logit,
                        lamp_logit=cfg.residual_lamp_logit, lamp_torso=cfg.lamp_torso).to(device)
    if init_state is not None:
        agent.load_state_dict(init_state)
    if cfg.learn == "lamps":  # irrigation stays the start's: no gradient reaches its torso or head
        agent.actor_torso.requires_grad_(False)
        agent.actor_head.requires_grad_(False)
    ctx.prepare(agent)
    # foreach: one fused kernel per update step over all parameters instead of one per tensor
    # (the default on CUDA only); on CPU it cuts the update's optimiser time, same arithmetic.
    optimizer = torch.optim.Adam(agent.parameters(), lr=cfg.lr, eps=1e-5, foreach=True)
    demos = _demonstrations(cfg, twin, device)
    if demos is not None and resume is None and not fine_tuning and not cfg.residual:
        _pretrain(cfg, agent, optimizer, demos.obs, cfg.bc_pretrain_updates, gen,
                  lambda pick: bc_loss(agent, demos.obs[pick], demos.action[pick], demos.open_rate,
                                       cfg.bc_valve_balance).loss)
    if cfg.lamp_demo_files and resume is None and not fine_tuning:
        # The lamp switch cloned from hindsight demonstrations (policy.hindsight), the lamps alone.
        lamp_obs, lamp_action = _stacked([load_demos(p, ObservationSpec(zones)) for p in cfg.lamp_demo_files],
                                         device)
        _pretrain(cfg, agent, optimizer, lamp_obs, cfg.lamp_bc_updates, gen,
                  lambda pick: lamp_bc_loss(agent, lamp_obs[pick], lamp_action[pick]))

    # ---- storage and the first observation ---------------------------------------------------
    T, B = cfg.num_steps, cfg.num_envs
    rollout = Rollout.zeros(T, B, twin.observation_spec.dim, twin.action_spec.dim, zones, device)
    scaler = (ctx.reward_scaler(B, cfg.gamma, device) if cfg.scale_rewards and not cfg.fixed_reward_scale
              else None)
    potential = FruitPotential(twin.config) if cfg.shaping == "fruit_value" else None
    # The normaliser's statistics are the start's when PPO begins from a cloned or trained policy;
    # otherwise the warm-up's rollouts set them (see PPOConfig.freeze_obs_norm).
    cloned = (demos is not None and not cfg.residual) or bool(cfg.lamp_demo_files) or fine_tuning
    obs_norm_until = (0 if cloned else cfg.critic_warmup_iterations) if cfg.freeze_obs_norm else None
    next_obs = twin.reset()
    if resume is None:
        if cfg.stagger_starts:
            next_obs = stagger_clocks(twin, next_obs, int(round(86_400.0 / cfg.dt_s)), gen, served, zones)
        agent.update_obs_stats(next_obs)
        metrics: list[IterationMetrics] = []
        env_steps, first_iteration = 0, 1
        if cfg.lamp_demo_files and not fine_tuning and validate is not None and ctx.is_main \
                and cfg.validate_every > 0:
            validate(0, 0, agent)  # the cloned start is a checkpoint too: PPO must beat it to replace it
    else:
        next_obs, metrics, env_steps = _restore(resume, cfg, twin, agent, optimizer, gen, scaler, device)
        first_iteration = int(resume["iteration"]) + 1
    # The leash's target when it is the start: frozen after the cloning and the first observation
    # statistics (it maps raw observations as the start did); a resumed run reloads it.
    reference = _frozen(agent, resume.get("reference") if resume is not None else None) \
        if cfg.residual and cfg.prior_kl_to == "start" else None

    for iteration in range(first_iteration, cfg.num_iterations + 1):
        lr = cfg.lr * (1.0 - (iteration - 1) / cfg.num_iterations) if cfg.anneal_lr else cfg.lr
        for group in optimizer.param_groups:
            group["lr"] = lr

        # ---- rollout, then advantages ----------------------------------------------------------
        next_obs, last_value, steps_per_s = collect(agent, twin, rollout, next_obs, potential)
        env_steps += T * B
        rewards = rollout.rewards
        if potential is not None:
            rewards = shaped_rewards(rewards, rollout.potentials,
                                     _next_potentials(rollout, potential(next_obs)),
                                     rollout.terminated, cfg.gamma)
        if scaler is not None:
            rewards = scaler(rewards, rollout.dones)
        elif cfg.fixed_reward_scale:
            rewards = rewards * (1.0 - cfg.gamma)
        advantages, returns = compute_gae(rewards, rollout.values, rollout.terminated, rollout.truncated,
                                          rollout.final_values, last_value, cfg.gamma, cfg.gae_lambda)

        # ---- update ----------------------------------------------------------------------------
        bc_coef = (cfg.bc_coef * max(0.0, 1.0 - (env_steps - T * B) / cfg.bc_decay_steps) if demos is not None
                   else 0.0)
        stats = _update(cfg, agent, optimizer, rollout, advantages, returns, demos, bc_coef,
                        actor_on=iteration > cfg.critic_warmup_iterations, gen=gen, reference=reference)
        # The normaliser moves only between iterations, so stored log-probs match the update's.
        b_obs = rollout.obs.reshape(-1, rollout.obs.shape[-1])
        if obs_norm_until is None or iteration <= obs_norm_until:
            agent.update_obs_stats(b_obs)

        # ---- logging and snapshots -------------------------------------------------------------
        expert_open = rollout.prior_valves.float().mean() if agent.is_residual \
            else (served(b_obs)[:, :zones] >= 0.5).float().mean()
        m = ctx.reduce_metrics(IterationMetrics(
            iteration=iteration, env_steps=env_steps, steps_per_s=steps_per_s,
            mean_reward=float(rollout.rewards.mean()), **stats, bc_coef=bc_coef,
            valve_open_rate=float((rollout.actions[..., :zones] >= 0.5).float().mean()), lr=lr,
            expert_open_rate=float(expert_open)))
        metrics.append(m)
        if progress is not None and ctx.is_main:
            progress(m)
        if validate is not None and ctx.is_main and cfg.validate_every > 0 \
                and (iteration % cfg.validate_every == 0 or iteration == cfg.num_iterations):
            validate(iteration, env_steps, agent)
        if (snapshot is not None or ctx.active) and snapshot_every > 0 and iteration % snapshot_every == 0 \
                and iteration < cfg.num_iterations:
            snap = _snapshot(iteration, env_steps, agent, optimizer, gen, scaler, twin, next_obs, metrics,
                             device, reference)
            if snapshot is not None and ctx.is_main:
                snapshot(snap)
    return TrainResult(agent, metrics, cfg)


def _next_potentials(rollout: Rollout, last: torch.Tensor) -> torch.Tensor:
    """Phi of each step's successor [T, B]: the next stored observation's, the pre-reset one's where
    the episode was truncated, and ``last`` (Phi of the observation after the rollout) at the end."""
    following = torch.cat([rollout.potentials[1:], last[None]], dim=0)
    return torch.where(rollout.truncated, rollout.final_potentials, following)


def _demonstrations(cfg: PPOConfig, twin: VectorTwin, device: torch.device) -> Demos | None:
    """The BC term's demonstrations (None without a BC term): a deterministic function of the seed
    and the files, so a resumed run rebuilds the same ones. Expert rollouts reset and step ``twin``."""
    zones = twin.config.zones
    expert_demos = cfg.bc_demo_steps > 0 and not cfg.residual  # residual starts at the expert
    if not (cfg.bc_coef > 0 and (expert_demos or bool(cfg.demo_files))):
        return None
    sets = [load_demos(path, ObservationSpec(zones)) for path in cfg.demo_files]
    if expert_demos:
        sets.insert(0, collect_expert_demos(twin, ThresholdExpert(zones=zones), cfg.bc_demo_steps))
    obs, action = _stacked(sets, device)
    return Demos(obs, action, float((action[:, :zones] >= 0.5).float().mean()))


def _stacked(sets: list[DemoBatch], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(obs, action) of the demonstration sets one after another, on ``device``."""
    return torch.cat([d.obs for d in sets]).to(device), torch.cat([d.action for d in sets]).to(device)


def _pretrain(cfg: PPOConfig, agent: ActorCritic, optimizer: torch.optim.Optimizer, obs: torch.Tensor,
              updates: int, gen: torch.Generator, loss_of: Callable[[torch.Tensor], torch.Tensor]) -> None:
    """Pure imitation steps before the first rollout, so PPO starts from the teacher: ``updates``
    minibatches of rows drawn from ``obs``, ``loss_of(rows)`` the loss on the rows drawn."""
    ctx = rank_context()
    agent.update_obs_stats(obs)
    for _ in range(updates):
        pick = torch.randint(obs.shape[0], (cfg.minibatch_size,), generator=gen, device=obs.device)
        optimizer.zero_grad()
        loss_of(pick).backward()
        _step(cfg, agent, optimizer, ctx)


def _frozen(agent: ActorCritic, state: dict[str, torch.Tensor] | None = None) -> ActorCritic:
    """A gradient-free copy of ``agent`` (with ``state``'s weights when given): the leash's target."""
    reference = copy.deepcopy(agent)
    if state is not None:
        reference.load_state_dict(state)
    reference.requires_grad_(False)
    return reference


def _step(cfg: PPOConfig, agent: ActorCritic, optimizer: torch.optim.Optimizer, ctx: RankContext) -> None:
    """Average the gradients over ranks, clip their norm and take the optimiser step."""
    ctx.average_gradients(agent)
    nn.utils.clip_grad_norm_(agent.parameters(), cfg.max_grad_norm, foreach=True)
    optimizer.step()


def _update(cfg: PPOConfig, agent: ActorCritic, optimizer: torch.optim.Optimizer, rollout: Rollout,
            advantages: torch.Tensor, returns: torch.Tensor, demos: Demos | None, bc_coef: float, *,
            actor_on: bool, gen: torch.Generator, reference: ActorCritic | None = None) -> dict[str, float]:
    """Clipped-surrogate PPO epochs over shuffled minibatches of the rollout, plus the decaying BC
    term and, in residual mode, the KL leash to the expert."""
    ctx = rank_context()
    device = rollout.obs.device
    zones = agent.zones
    b_obs = rollout.obs.reshape(-1, rollout.obs.shape[-1])
    b_act = rollout.actions.reshape(-1, rollout.actions.shape[-1])
    b_logp, b_adv, b_ret = rollout.logprobs.reshape(-1), advantages.reshape(-1), returns.reshape(-1)
    b_prior_valves, b_prior_cont = rollout.prior_valves.reshape(-1, zones), rollout.prior_cont.reshape(-1, 2)
    sums = torch.zeros(len(UPDATE_METRICS) + 1, device=device)  # UPDATE_METRICS, then the minibatch count
    # The KL leash on a quarter of each (shuffled) minibatch: unbiased, a quarter of the cost.
    kl_rows = (max(1, cfg.minibatch_size // 4) if agent.is_residual and cfg.prior_kl_coef > 0 and actor_on
               else 0)
    for _ in range(cfg.update_epochs):
        perm = torch.randperm(cfg.batch_size, generator=gen, device=device)
        for mb in perm.split(cfg.minibatch_size):
            # index_select takes the same rows as b_x[mb], without advanced indexing's overhead.
            mb_obs, mb_act, mb_logp, adv, mb_ret = (x.index_select(0, mb)
                                                    for x in (b_obs, b_act, b_logp, b_adv, b_ret))
            prior = ExpertPrior(b_prior_valves.index_select(0, mb), b_prior_cont.index_select(0, mb)) \
                if agent.is_residual else None
            ev = agent.evaluate_actions(mb_obs, mb_act, prior, prior_kl_rows=kl_rows, reference=reference)
            log_ratio = ev.logprob - mb_logp
            ratio = log_ratio.exp()
            with torch.no_grad():
                approx_kl = ((ratio - 1.0) - log_ratio).mean()  # http://joschu.net/blog/kl-approx.html
                clipfrac = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()

            if cfg.norm_adv:
                adv = (adv - adv.mean()) / (adv.std() + 1e-8)
            pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - cfg.clip_coef, 1 + cfg.clip_coef)).mean()
            v_loss = 0.5 * (ev.value - mb_ret).square().mean()
            entropy = ev.entropy.mean()
            # Off, the actor's terms stay out of the graph (not multiplied by 0): its parameters then get
            # no gradient at all, and Adam leaves them where they are instead of coasting on the moments
            # the cloning left.
            loss = cfg.vf_coef * v_loss
            if actor_on:
                loss = loss + pg_loss - cfg.ent_coef * entropy
            prior_kl = torch.zeros((), device=device)
            if ev.prior_kl is not None:
                prior_kl = ev.prior_kl.mean()
                loss = loss + cfg.prior_kl_coef * prior_kl
            bc_value = torch.zeros((), device=device)
            if bc_coef > 0 and actor_on:
                assert demos is not None
                pick = torch.randint(demos.obs.shape[0], (mb.numel(),), generator=gen, device=device)
                bc_value = bc_loss(agent, demos.obs.index_select(0, pick), demos.action.index_select(0, pick),
                                   demos.open_rate, cfg.bc_valve_balance).loss
                loss = loss + bc_coef * bc_value

            optimizer.zero_grad()
            loss.backward()
            _step(cfg, agent, optimizer, ctx)
            sums += torch.stack([pg_loss.detach(), v_loss.detach(), entropy.detach(), approx_kl, clipfrac,
                                 bc_value.detach(), prior_kl.detach(), torch.ones((), device=device)])
    return dict(zip(UPDATE_METRICS, (sums[:-1] / sums[-1]).tolist(), strict=True))


def _snapshot(iteration: int, env_steps: int, agent: ActorCritic, optimizer: torch.optim.Optimizer,
              gen: torch.Generator, scaler: Any, twin: VectorTwin, next_obs: torch.Tensor,
              metrics: list[IterationMetrics], device: torch.device, reference: ActorCritic | None = None
              ) -> TrainSnapshot:
    """Everything a resumed run needs to continue this one's trajectory (the leash's frozen target too)."""
    return {
        "format": SNAPSHOT_FORMAT, "iteration": iteration, "env_steps": env_steps,
        "num_envs": next_obs.shape[0],
        "agent": agent.state_dict(), "optimizer": optimizer.state_dict(), "rng": _rng_states(device, gen),
        "scaler": None if scaler is None else {"stats": scaler.stats.state_dict(),
                                               "returns": scaler.returns.clone()},
        **rank_context().gather_instances(twin, next_obs),  # every rank's instances on a multi-rank run
        "metrics": [m._asdict() for m in metrics],
        "reference": None if reference is None else reference.state_dict(),
    }


def _restore(resume: TrainSnapshot, cfg: PPOConfig, twin: VectorTwin, agent: ActorCritic,
             optimizer: torch.optim.Optimizer, gen: torch.Generator, scaler: Any, device: torch.device
             ) -> tuple[torch.Tensor, list[IterationMetrics], int]:
    """Load a :data:`TrainSnapshot` into the run; returns (next observation, metrics so far, env steps)."""
    if resume.get("format") != SNAPSHOT_FORMAT or resume["num_envs"] != cfg.num_envs:
        raise ValueError("training snapshot does not match this config (format or num_envs)")
    agent.load_state_dict(resume["agent"])
    optimizer.load_state_dict(resume["optimizer"])
    _restore_rng(resume["rng"], device, gen)
    if scaler is not None and resume["scaler"] is not None:
        scaler.stats.load_state_dict(resume["scaler"]["stats"])
        scaler.returns = resume["scaler"]["returns"].to(device)
    twin.restore_episodes(TwinParams(**{k: v.to(device) for k, v in resume["twin_params"].items()}),
                          TwinState(**{k: v.to(device) for k, v in resume["twin_state"].items()}))
    metrics = [IterationMetrics(**m) for m in resume["metrics"]]
    return resume["next_obs"].to(device), metrics, int(resume["env_steps"])

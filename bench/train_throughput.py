"""Training throughput: the project's PPO trainer versus Stable-Baselines3 PPO on the same twin.

Both learn the same greenhouse (10-minute steps, 14-day episodes, the 'small' preset's twin):

* ours: :func:`policy.ppo.train`, preset ``small``, the recipe of the shipped ensemble (1,024
  torch-twin instances x 64 steps per iteration, 4 epochs of 4 minibatches, residual on the
  threshold tuned behind the interlock; ``--set residual=false`` for the behaviour-cloning warm
  start instead), learning included, trained as ``greentwin train --members 5`` trains it: members
  with seeds 0..4 back to back (``--ours-members``) within the time cap;
* SB3: ``PPO("MlpPolicy")`` on a ``DummyVecEnv`` of 16 single-instance ``GreenhouseEnv``
  (``twin/gym_adapters.py``) behind ``VecNormalize`` (observations and rewards, as our trainer
  normalises both), ``n_steps=256`` per env so it updates every 4096 steps; SB3 defaults otherwise
  (batch 64, 10 epochs, 64-64 tanh networks like ours).

Env-steps/s is env steps over training wall time, evaluations excluded (their time is paused).

Expert level, defined once and applied to both: the deterministic policy is scored on the held-out
suite ``held_out_suite(n=2, days=7, instances=16)`` (32 greenhouses, healthy mixed soils and faulty
sandy soils; flags change it) with ``policy.evaluate.evaluate`` and ``policy.tuning.score``: mean
reward per greenhouse-step minus 1.0 x the share of greenhouses ending in a hard termination, the
objective the tuned threshold was chosen by. A run reaches expert level at the first evaluation
whose score is at least the tuned threshold controller's (``policy/tuned_threshold.json``) on the
same suite. Seven days, because over three a controller that never irrigates outscores the expert
(the soil starts inside its band); the never-irrigate score is printed as the floor. Runs are
evaluated every ``--eval-every`` seconds of training time and stop at their time cap.

Each trainer runs with the torch thread count that is fastest for it on this machine, and the
table says which: SB3 on one thread (``--sb3-threads``; on a shared two-core machine, OpenMP
threads of its 64-sample minibatches wait for time slices and slow it down tenfold), ours on every
core (``--ours-threads``, default: torch's own choice), since its 4,096-sample minibatches and
batched twin do use them. ``--threads N`` sets both.

Finally a profile of the trainer's iteration at the small preset: twin step vs policy forward
vs PPO update (wrapped calls, first iteration discarded as warm-up).

    python bench/train_throughput.py [--ours-seconds 150] [--ours-members 5] [--sb3-seconds 180]
                                     [--eval-every 40] [--profile-iterations 4] [--device cpu|cuda|auto]
                                     [--quick] [--json FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from policy.config import PPOConfig
from policy.evaluate import ControllerMetrics, Scenario, evaluate, evaluate_many, held_out_suite
from policy.networks import ActorCritic
from policy.processes import usable_cores
from policy.train_cli import parse_overrides, resolve_device
from policy.tuning import load_tuned_threshold, score
from twin.spec import ObservationSpec

Controller = Callable[[np.ndarray], Any]


class TrainClock:
    """Wall time since start, minus the spans spent in :meth:`paused` (evaluations)."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.paused_s = 0.0

    def elapsed(self) -> float:
        return time.perf_counter() - self.start - self.paused_s

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.paused_s += time.perf_counter() - t0


@dataclass
class EvalPoint:
    train_s: float
    env_steps: int
    score: float
    reward_mean: float
    hard_terminations: int


@dataclass
class RunReport:
    name: str
    setup: str
    env_steps: int = 0
    train_s: float = 0.0
    evals: list[EvalPoint] = field(default_factory=list)

    @property
    def steps_per_s(self) -> float:
        return self.env_steps / max(self.train_s, 1e-9)

    def first_at_least(self, target: float) -> EvalPoint | None:
        return next((e for e in self.evals if e.score >= target), None)


class Evaluator:
    """The one evaluation both trainers' policies (and the expert) go through."""

    def __init__(self, scenarios: list[Scenario]) -> None:
        self.scenarios = scenarios
        self.greenhouses = sum(s.instances for s in scenarios)

    def __call__(self, controller: Controller) -> tuple[float, ControllerMetrics]:
        metrics = evaluate(controller, self.scenarios)
        return score(metrics, self.greenhouses), metrics

    def point(self, controller: Controller, train_s: float, env_steps: int) -> EvalPoint:
        s, m = self(controller)
        return EvalPoint(train_s, env_steps, s, m.reward_mean, m.hard_terminations)


def _never_irrigate(obs: np.ndarray) -> np.ndarray:
    """Valves shut, pump and lights off: the floor an expert-level policy must clear."""
    return np.zeros((obs.shape[0], ObservationSpec(6).zones + 2), dtype=np.float32)


class _Stop(Exception):
    """Raised from a training callback when the run's time cap is reached."""


# ---- ours ----------------------------------------------------------------------------------------


def run_ours(cfg: PPOConfig, seconds: float, eval_every: float, evaluator: Evaluator,
             members: int) -> RunReport:
    """The shipped recipe as ``greentwin train --members K`` runs it: members with seeds seed, seed+1, ...
    one after another, until ``members`` are trained or ``seconds`` of training time have passed.

    One member of preset small trains in about ten seconds, so a single run's rate would be mostly
    the process's one-time start (about 2 s of first-use initialisation); the ensemble is the real job.
    """
    from policy.ppo import IterationMetrics, TrainSnapshot, train

    report = RunReport("ours", f"policy.ppo preset small{' residual' if cfg.residual else ''}, "
                               f"up to {members} "
                               f"members: {cfg.num_envs} torch-twin instances x {cfg.num_steps} "
                               f"steps/iteration, "
                               f"{cfg.update_epochs} epochs x {cfg.num_minibatches} minibatches, "
                               f"{cfg.device}, "
                               f"{torch.get_num_threads()} threads")
    eval_agent = ActorCritic(ObservationSpec(6).dim, 6, cfg.hidden, cfg.shared_torso).to(cfg.device)
    clock = TrainClock()
    last_eval = -float("inf")
    done_steps = 0  # env steps of the members already trained

    def act(obs: np.ndarray) -> torch.Tensor:
        return eval_agent.act(torch.as_tensor(obs, dtype=torch.float32, device=cfg.device))

    def on_progress(m: IterationMetrics) -> None:
        report.env_steps, report.train_s = done_steps + m.env_steps, clock.elapsed()

    def on_snapshot(snap: TrainSnapshot) -> None:
        nonlocal last_eval
        t = clock.elapsed()
        if t - last_eval >= eval_every or t >= seconds:
            last_eval = t
            with clock.paused():
                eval_agent.load_state_dict(snap["agent"])
                report.evals.append(evaluator.point(act, t, report.env_steps))
                _print_eval(report, report.evals[-1])
        if t >= seconds:
            raise _Stop

    for k in range(members):
        try:
            result = train(cfg.replace(seed=cfg.seed + k), progress=on_progress, snapshot=on_snapshot,
                           snapshot_every=1)
        except _Stop:
            return report
        done_steps = report.env_steps
        with clock.paused():
            eval_agent.load_state_dict(result.agent.state_dict())
            report.evals.append(evaluator.point(act, report.train_s, report.env_steps))
            _print_eval(report, report.evals[-1], f"member {k} done")
        if clock.elapsed() >= seconds:
            break
    return report


# ---- Stable-Baselines3 ---------------------------------------------------------------------------


def run_sb3(seconds: float, eval_every: float, evaluator: Evaluator, n_envs: int, n_steps: int,
            twin_kwargs: dict[str, Any], seed: int, normalize: bool) -> RunReport:
    from stable_baselines3 import PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.vec_env import DummyVecEnv, VecNormalize

    from twin.gym_adapters import GreenhouseEnv

    report = RunReport("SB3", f"PPO MlpPolicy, DummyVecEnv x {n_envs} GreenhouseEnv"
                              f"{', VecNormalize' if normalize else ''}, n_steps {n_steps}, cpu, "
                              f"{torch.get_num_threads()} threads")
    clock = TrainClock()
    venv: Any = DummyVecEnv([functools.partial(GreenhouseEnv, seed=seed + i, **twin_kwargs)
                             for i in range(n_envs)])
    if normalize:
        venv = VecNormalize(venv, gamma=0.99)
    model = PPO("MlpPolicy", venv, n_steps=n_steps, seed=seed, device="cpu", verbose=0)

    def act(obs: np.ndarray) -> np.ndarray:
        x = venv.normalize_obs(obs) if normalize else obs
        return model.predict(x, deterministic=True)[0]

    class Budget(BaseCallback):
        """Evaluates between updates every ``eval_every`` s of training; stops at the time cap."""

        last_eval = 0.0

        def _on_rollout_start(self) -> None:
            t = clock.elapsed()
            if self.num_timesteps > 0 and t - self.last_eval >= eval_every:
                self.last_eval = t
                with clock.paused():
                    report.evals.append(evaluator.point(act, t, self.num_timesteps))
                    _print_eval(report, report.evals[-1])

        def _on_step(self) -> bool:
            return clock.elapsed() < seconds

    model.learn(total_timesteps=10**12, callback=Budget())
    report.env_steps, report.train_s = int(model.num_timesteps), clock.elapsed()
    report.evals.append(evaluator.point(act, report.train_s, report.env_steps))
    _print_eval(report, report.evals[-1])
    venv.close()
    return report


def _print_eval(report: RunReport, e: EvalPoint, note: str = "") -> None:
    print(f"  {report.name:<5} {e.train_s:7.1f} s {e.env_steps:>10,} steps  score {e.score:7.3f}  "
          f"reward {e.reward_mean:7.3f}  "
          f"hard terminations {e.hard_terminations}{'  ' + note if note else ''}",
          flush=True)


# ---- profile -------------------------------------------------------------------------------------


class _Timers:
    """Wall time of wrapped calls by label; a call inside another timed call is not counted twice."""

    def __init__(self, sync: Callable[[], None]) -> None:
        self.sync = sync
        self.totals: dict[str, float] = defaultdict(float)
        self.depth = 0

    def wrap(self, fn: Callable[..., Any], label: Callable[[], str] | str) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self.depth:
                return fn(*args, **kwargs)
            self.depth += 1
            self.sync()
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.sync()
                self.totals[label() if callable(label) else label] += time.perf_counter() - t0
                self.depth -= 1
        return timed


@contextlib.contextmanager
def _patched(patches: list[tuple[Any, str, Any]]) -> Iterator[None]:
    saved = [(obj, name, getattr(obj, name)) for obj, name, _ in patches]
    try:
        for obj, name, value in patches:
            setattr(obj, name, value)
        yield
    finally:
        for obj, name, value in saved:
            setattr(obj, name, value)


def profile_trainer(cfg: PPOConfig, iterations: int) -> dict[str, float]:
    """Mean seconds per iteration by phase over iterations 2..N of ``train(cfg)``."""
    import policy.ppo as ppo
    from policy.normalize import InstanceRewardScaler
    from twin.env import GreenhouseTwin

    cuda = cfg.device.startswith("cuda")
    timers = _Timers(torch.cuda.synchronize if cuda else lambda: None)

    def forward_label() -> str:
        return "update: PPO forward" if torch.is_grad_enabled() else "rollout: policy forward"

    patches = [
        (GreenhouseTwin, "step", timers.wrap(GreenhouseTwin.step, "rollout: twin step")),
        (ActorCritic, "get_action_and_value", timers.wrap(ActorCritic.get_action_and_value, forward_label)),
        (ActorCritic, "evaluate_actions", timers.wrap(ActorCritic.evaluate_actions, forward_label)),
        (ActorCritic, "sample", timers.wrap(ActorCritic.sample, forward_label)),
        (ActorCritic, "prior", timers.wrap(ActorCritic.prior, "rollout: expert prior")),
        (ActorCritic, "get_value", timers.wrap(ActorCritic.get_value, forward_label)),
        (ActorCritic, "update_obs_stats", timers.wrap(ActorCritic.update_obs_stats, "normaliser update")),
        (InstanceRewardScaler, "__call__",
         timers.wrap(InstanceRewardScaler.__call__, "reward scaling + GAE")),
        (ppo, "compute_gae", timers.wrap(ppo.compute_gae, "reward scaling + GAE")),
        (ppo, "bc_loss", timers.wrap(ppo.bc_loss, "update: BC forward")),
        (torch.Tensor, "backward", timers.wrap(torch.Tensor.backward, "update: backward")),
        (torch.nn.utils, "clip_grad_norm_",
         timers.wrap(torch.nn.utils.clip_grad_norm_, "update: clip + Adam step")),
        (torch.optim.Adam, "step", timers.wrap(torch.optim.Adam.step, "update: clip + Adam step")),
    ]
    rows: list[dict[str, float]] = []
    t_prev = time.perf_counter()

    def on_progress(m: Any) -> None:
        nonlocal t_prev
        now = time.perf_counter()
        row = dict(timers.totals)
        row["iteration"] = now - t_prev
        row["rollout: total"] = cfg.batch_size / m.steps_per_s
        rows.append(row)
        timers.totals.clear()
        t_prev = now

    with _patched(patches):
        ppo.train(cfg.replace(total_steps=cfg.batch_size * iterations), progress=on_progress)
    steady = rows[1:] or rows
    keys = sorted({k for r in steady for k in r})
    return {k: sum(r.get(k, 0.0) for r in steady) / len(steady) for k in keys}


def print_profile(cfg: PPOConfig, mean: dict[str, float]) -> None:
    it, roll = mean["iteration"], mean["rollout: total"]
    g = mean.get
    rows = [
        ("rollout: twin step", g("rollout: twin step", 0.0)),
        ("rollout: policy forward (sampling)", g("rollout: policy forward", 0.0)),
        ("rollout: expert prior (residual)", g("rollout: expert prior", 0.0)),
        ("rollout: other (interlock, buffers)", roll - g("rollout: twin step", 0.0)
         - g("rollout: policy forward", 0.0) - g("rollout: expert prior", 0.0)),
        ("reward scaling + GAE", g("reward scaling + GAE", 0.0)),
        ("update: PPO forward", g("update: PPO forward", 0.0)),
        ("update: BC forward", g("update: BC forward", 0.0)),
        ("update: backward", g("update: backward", 0.0)),
        ("update: clip + Adam step", g("update: clip + Adam step", 0.0)),
        ("normaliser update", g("normaliser update", 0.0)),
    ]
    rows.append(("other (minibatch indexing, losses, metrics)", it - sum(v for _, v in rows)))
    update = sum(v for k, v in rows if k.startswith("update"))
    print(f"\nper-iteration profile, preset small "
          f"({cfg.num_envs} x {cfg.num_steps} = {cfg.batch_size} env steps, "
          f"{cfg.update_epochs * cfg.num_minibatches} minibatch updates of {cfg.minibatch_size}, "
          f"{cfg.device}, "
          f"{torch.get_num_threads()} threads): {it * 1e3:.0f} ms/iteration")
    for name, v in rows:
        print(f"  {name:<46} {v * 1e3:8.1f} ms {100 * v / it:5.1f} %")
    print(f"  {'= rollout (twin + forward + other)':<46} {roll * 1e3:8.1f} ms {100 * roll / it:5.1f} %")
    print(f"  {'= PPO update (forward + BC + backward + Adam)':<46} {update * 1e3:8.1f} ms "
          f"{100 * update / it:5.1f} %")


# ---- main ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def _threads(n: int) -> Iterator[None]:
    """Torch intra-op threads set to ``n`` for one trainer's run, restored after."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ours-seconds", type=float, default=150.0, help="training time cap of our trainer")
    parser.add_argument("--ours-members", type=int, default=5,
                        help="ensemble members our trainer trains back to back (seeds 0, 1, ...) "
                             "within its cap")
    parser.add_argument("--sb3-seconds", type=float, default=180.0, help="training time cap of SB3")
    parser.add_argument("--eval-every", type=float, default=40.0,
                        help="seconds of training between evaluations")
    parser.add_argument("--eval-scenarios", type=int, default=2, help="held-out scenarios")
    parser.add_argument("--eval-instances", type=int, default=16, help="greenhouses per scenario")
    parser.add_argument("--eval-days", type=float, default=7.0, help="evaluation episode length [days]")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a field of our PPOConfig, as in greentwin train (e.g. residual=true)")
    parser.add_argument("--device", choices=["auto", "cpu", "cuda"], default="cpu",
                        help="torch device of our trainer (auto: cuda when present); SB3 stays on the CPU")
    parser.add_argument("--sb3-envs", type=int, default=16)
    parser.add_argument("--sb3-n-steps", type=int, default=256, help="SB3 rollout length per env")
    parser.add_argument("--no-vecnormalize", action="store_true", help="SB3 on raw observations and rewards")
    parser.add_argument("--profile-iterations", type=int, default=4,
                        help="trainer iterations profiled (0: skip)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads for both trainers")
    parser.add_argument("--ours-threads", type=int, default=None,
                        help="torch threads for our trainer (default: torch's default, every core)")
    parser.add_argument("--sb3-threads", type=int, default=1,
                        help="torch threads for SB3 (default 1: fastest)")
    parser.add_argument("--skip", choices=["ours", "sb3"], action="append", default=[],
                        help="leave a run out")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: 30 s caps, 1 scenario x 8 greenhouses x 2 days, "
                             "2 profiled iterations")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args()
    if args.quick:
        args.ours_seconds, args.sb3_seconds, args.eval_every = 30.0, 30.0, 15.0
        args.eval_scenarios, args.eval_instances, args.eval_days, args.profile_iterations = 1, 8, 2.0, 2
    default_threads = torch.get_num_threads()
    ours_threads = args.threads or args.ours_threads or default_threads
    sb3_threads = args.threads or args.sb3_threads
    torch.set_num_threads(sb3_threads)  # the shared evaluations run on one setting for everyone

    cfg = PPOConfig.preset("small", seed=0, device=resolve_device(args.device),
                           **parse_overrides(args.overrides))
    evaluator = Evaluator(held_out_suite(args.eval_scenarios, days=args.eval_days,
                                         instances=args.eval_instances))
    expert = load_tuned_threshold()
    expert_m, dry_m = evaluate_many([expert, _never_irrigate], evaluator.scenarios)
    expert_score = score(expert_m, evaluator.greenhouses)
    print(f"expert: tuned threshold (refill {expert.refill:g}, stop {expert.stop:g}, "
          f"pump {expert.pump_pct:g} %) "
          f"score {expert_score:.3f} (reward {expert_m.reward_mean:.3f}, hard terminations "
          f"{expert_m.hard_terminations}) on {evaluator.greenhouses} held-out greenhouses "
          f"x {args.eval_days:g} d; "
          f"never irrigating scores {score(dry_m, evaluator.greenhouses):.3f}; expert level = a policy score "
          f">= {expert_score:.3f} on the same suite; torch threads: ours {ours_threads}, SB3 {sb3_threads}")
    if score(dry_m, evaluator.greenhouses) >= expert_score:
        print("warning: never irrigating matches the expert on this suite; it is too short to rank policies")

    reports: list[RunReport] = []
    if "ours" not in args.skip:
        print(f"\ntraining ours for up to {args.ours_seconds:g} s ...", flush=True)
        with _threads(ours_threads):
            reports.append(run_ours(cfg, args.ours_seconds, args.eval_every, evaluator, args.ours_members))
    if "sb3" not in args.skip:
        print(f"\ntraining SB3 for up to {args.sb3_seconds:g} s ...", flush=True)
        with _threads(sb3_threads):
            reports.append(run_sb3(args.sb3_seconds, args.eval_every, evaluator, args.sb3_envs,
                                   args.sb3_n_steps, cfg.twin_kwargs(), cfg.seed, not args.no_vecnormalize))

    print("\nenv-steps/s of training (learning included, evaluations excluded):")
    for r in reports:
        print(f"  {r.name:<5} {r.steps_per_s:>10,.0f}   "
              f"({r.env_steps:,} steps in {r.train_s:.1f} s; {r.setup})")
    if len(reports) == 2:
        print(f"  ratio ours / SB3: {reports[0].steps_per_s / reports[1].steps_per_s:.1f}x")
    # A neighbour's load slows torch's threads many times over: the ratio is only read beside it.
    load = os.getloadavg()
    print(f"  load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1, 5, 15 min) on "
          f"{usable_cores()} usable cores")
    print(f"\ntime to expert level (score >= {expert_score:.3f}):")
    for r in reports:
        hit = r.first_at_least(expert_score)
        best = max(r.evals, key=lambda e: e.score)
        if hit is None:
            print(f"  {r.name:<5} not reached within {r.train_s:.0f} s ({r.env_steps:,} steps); best score "
                  f"{best.score:.3f} at {best.train_s:.0f} s")
        else:
            print(f"  {r.name:<5} {hit.train_s:.1f} s ({hit.env_steps:,} env steps), score {hit.score:.3f}; "
                  f"best {best.score:.3f}")

    profile: dict[str, float] = {}
    if args.profile_iterations > 0:
        with _threads(ours_threads):
            profile = profile_trainer(cfg.replace(bc_pretrain_updates=20), max(2, args.profile_iterations))
            print_profile(cfg, profile)

    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"expert_score": expert_score, "runs": [{**asdict(r), "steps_per_s": r.steps_per_s}
                                                             for r in reports], "profile_s": profile,
                       "threads": {"ours": ours_threads, "sb3": sb3_threads}, "load_average": list(load)},
                      fh, indent=2)


if __name__ == "__main__":
    main()

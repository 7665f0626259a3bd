"""``greentwin simulate`` and ``greentwin validate-env``: the twin driven by the policy's baseline
controllers.

A command, not part of the twin: the twin knows no controller, so this lives with the other commands.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import numpy as np

from twin.checks import SpecViolation, check_observation
from twin.dynamics import TERMINATION_REASONS
from twin.env import GreenhouseTwin


@dataclass
class EpisodeTally:
    """Per-instance running sums, closed into one summary row per finished episode."""

    b: int
    reward: np.ndarray = field(init=False)
    water_l: np.ndarray = field(init=False)
    energy_kwh: np.ndarray = field(init=False)
    in_band: np.ndarray = field(init=False)
    steps: np.ndarray = field(init=False)
    finished: list[dict[str, float | str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.reward, self.water_l, self.energy_kwh, self.in_band, self.steps = (
            np.zeros(self.b) for _ in range(5))

    def add(self, twin: GreenhouseTwin, reward: np.ndarray, info: dict, done: np.ndarray,
            reasons: np.ndarray) -> None:
        self.reward += reward
        self.water_l += info["water_l"].sum(axis=1)
        self.energy_kwh += info["energy_kwh"]
        self.in_band += info["reward_terms"]["moisture"] == 0.0  # no penalty: every zone in band
        self.steps += 1
        for i in np.flatnonzero(done):
            area = twin.config.zones * twin.config.hydraulics.zone_area_m2
            self.finished.append({"instance": int(i), "steps": int(self.steps[i]),
                                  "return": float(self.reward[i]),
                                  "water_l_m2": float(self.water_l[i] / area),
                                  "energy_kwh": float(self.energy_kwh[i]),
                                  "in_band_pct": float(100 * self.in_band[i] / self.steps[i]),
                                  "end": TERMINATION_REASONS[int(reasons[i])] if reasons[i] else "horizon"})
            for arr in (self.reward, self.water_l, self.energy_kwh, self.in_band, self.steps):
                arr[i] = 0.0


def _run(twin: GreenhouseTwin, controller, steps: int) -> EpisodeTally:  # type: ignore[no-untyped-def]
    tally = EpisodeTally(twin.num_instances)
    obs = twin.reset()
    for _ in range(steps):
        obs, reward, term, trunc, info = twin.step(controller(obs))
        b = twin.backend
        done = b.to_numpy(term | trunc)
        tally.add(twin, b.to_numpy(reward).astype(np.float64),
                  {"water_l": b.to_numpy(info["water_l"]), "energy_kwh": b.to_numpy(info["energy_kwh"]),
                   "reward_terms": {"moisture": b.to_numpy(info["reward_terms"]["moisture"])}},
                  done, b.to_numpy(info["termination_reason"]))
    return tally


def _print_summary(title: str, tally: EpisodeTally, limit: int = 8) -> None:
    rows = tally.finished
    print(f"\n{title}: {len(rows)} finished episodes")
    if not rows:
        return
    print(f"{'inst':>5} {'steps':>6} {'return':>9} {'water L/m2':>11} {'energy kWh':>11} "
          f"{'in band %':>10}  end")
    for r in rows[:limit]:
        print(f"{r['instance']:>5} {r['steps']:>6} {r['return']:>9.1f} {r['water_l_m2']:>11.1f} "
              f"{r['energy_kwh']:>11.1f} {r['in_band_pct']:>10.1f}  {r['end']}")
    if len(rows) > limit:
        print(f"  ... {len(rows) - limit} more")
    hard = sum(r["end"] != "horizon" for r in rows)
    print(f"mean return {np.mean([r['return'] for r in rows]):.1f}, hard terminations {hard}")


def simulate(args: argparse.Namespace) -> int:
    """Run the expert rule controller on a batch of twins and print what happened."""
    from policy.baselines import ThresholdExpert

    twin = GreenhouseTwin(args.instances, backend=args.backend, seed=args.seed, episode_days=args.days)
    steps = twin.config.horizon_steps
    t0 = time.perf_counter()
    tally = _run(twin, ThresholdExpert(zones=twin.config.zones), steps)
    elapsed = time.perf_counter() - t0
    _print_summary(f"expert controller, {args.instances} greenhouses x {args.days:g} days", tally)
    print(f"\n{args.instances * steps:,} instance-steps in {elapsed:.1f} s "
          f"({args.instances * steps / elapsed:,.0f} instance-steps/s, backend {args.backend})")
    return 0


def validate_env(args: argparse.Namespace) -> int:
    """Check specs on every return, determinism, and run random and expert smoke episodes."""
    from policy.baselines import RandomController, ThresholdExpert
    from twin.config import FaultConfig

    failures: list[str] = []
    episode_days = args.steps * 600 / 86400 / 2  # two episodes per run
    twin = GreenhouseTwin(args.instances, backend=args.backend, seed=args.seed, validate=True,
                          faults=FaultConfig.all_on(0.02), sensor_noise=0.05, episode_days=episode_days)
    spec = twin.observation_spec
    print(f"observation: {spec.dim} features (layout version {spec.to_dict()['version']}), "
          f"action: {twin.action_spec.dim} ({', '.join(twin.action_spec.names)})")
    try:
        check_observation(twin, twin.reset())
        random_tally = _run(twin, RandomController(twin.config.zones, seed=args.seed), args.steps)
        expert_tally = _run(twin, ThresholdExpert(zones=twin.config.zones), args.steps)
        print("spec checks: every observation (bounds, 0/1 flags, clock, lamp hours since midnight), "
              "reward (the five EUR terms over V_ref, the climate term minus the heat and CO2 bills), step "
              "info (fruit, revenue, costs, damage, heat and CO2 used and their cost, lamp kWh, price, PAR) "
              "and flag matched its spec")
    except SpecViolation as exc:
        failures.append(f"spec: {exc}")
        random_tally = expert_tally = EpisodeTally(args.instances)

    def trajectory(seed: int) -> np.ndarray:
        t = GreenhouseTwin(4, backend=args.backend, seed=seed, faults=FaultConfig.all_on(0.02))
        obs = [t.backend.to_numpy(t.reset())]
        rng = np.random.default_rng(0)
        for _ in range(50):
            a = rng.uniform(t.action_spec.low, t.action_spec.high, (4, t.action_spec.dim)).astype(np.float32)
            obs.append(t.backend.to_numpy(t.step(a)[0]))
        return np.stack(obs)

    same = np.array_equal(trajectory(args.seed), trajectory(args.seed))
    differs = not np.array_equal(trajectory(args.seed), trajectory(args.seed + 1))
    print(f"determinism: same seed identical={same}, other seed differs={differs}")
    if not (same and differs):
        failures.append("determinism")
    _print_summary("random policy", random_tally)
    _print_summary("expert rule controller", expert_tally)
    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print("\nvalidate-env: OK")
    return 0

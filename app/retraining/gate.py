"""Stage 4: the promotion gate. The candidate against the incumbent and ``served`` (the threshold the
service falls back to) on the held-out suite and on a replay of each greenhouse's recent window in
its calibrated twin (its fitted soils, episodes starting from its logged states).

Promoted only if the candidate earns more profit than the incumbent, with the paired bootstrap
interval of the per-scenario difference above zero, and is no worse in yield, stress hours, hard
terminations and safety clips (the interlock's interventions on its voted actions: what the
service's safety layer would have had to correct), each beyond a stated margin (:data:`NO_WORSE`).
Otherwise the verdict says which test failed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policy.compare import paired_bootstrap
from policy.ensemble import load_ensemble
from policy.evaluate import ControllerMetrics, Scenario, ensemble_vote, evaluate_all, held_out_suite
from policy.residual import interlock
from policy.tuning import served_expert
from twin.config import DEFAULT_ZONES, StartState, TwinConfig

NO_WORSE = (("yield_kg_m2", 1.0, 0.0, 1e-3), ("stress_hours", -1.0, 1.0 / 6.0, 0.0),
            ("hard_terminations", -1.0, 0.0, 0.0), ("safety_clips", -1.0, 0.0, 0.0))
"""Metrics the candidate may not be worse in: the sign of "better", then the margin within which a
difference is no difference, absolute and relative to the incumbent's value (yield: 0.1 %; stress:
one 10-minute step per greenhouse; counts: none). Without a margin, a yield lower in the fifth
digit refused a candidate that earned more."""


def worse_metrics(candidate: dict[str, Any], incumbent: dict[str, Any]) -> list[str]:
    """The :data:`NO_WORSE` metrics in which ``candidate`` is worse than ``incumbent`` beyond its margin."""
    out = []
    for key, sign, absolute, relative in NO_WORSE:
        c, i = float(candidate[key]), float(incumbent[key])
        if sign * (c - i) < -(absolute + relative * abs(i) + 1e-9):
            out.append(f"{key} worse ({c:.6g} vs {i:.6g})")
    return out


@dataclass(frozen=True)
class ReplayScenario(Scenario):
    """A greenhouse's recent window in its calibrated twin: its zones' fitted soils and root depth."""

    soils: tuple[str, ...] = ()
    zone_soils: tuple[tuple[float, float, float, float], ...] = ()
    root_m: float = 0.0
    label: str = ""
    start_states: tuple[StartState, ...] = ()
    """The window's logged states its episodes start from (none: random starts)."""

    @property
    def name(self) -> str:
        return f"replay {self.label}, {self.instances} x {self.days:g} d"

    def config(self) -> TwinConfig:
        cfg = super().config()
        crop = dataclasses.replace(cfg.crop, root_depth_m=(self.root_m, self.root_m)) if self.root_m > 0 \
            else cfg.crop
        return dataclasses.replace(cfg, fixed_soils=self.soils, zone_soils=self.zone_soils, crop=crop,
                                   start_states=self.start_states or None)


class Counted:
    """A controller behind the interlock that counts the steps where the interlock changed its action."""

    def __init__(self, act: Any, zones: int) -> None:
        self.act = act
        self.zones = zones
        self.clips = 0

    def __call__(self, obs: Any) -> np.ndarray:
        obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        raw = torch.as_tensor(np.asarray(self.act(obs)), dtype=torch.float32)
        safe = interlock(raw, self.zones, obs_t)
        self.clips += int((safe != raw).any(dim=1).sum())
        return safe.numpy()


def _voter(directory: Path, zones: int) -> Any:
    ensemble = load_ensemble(directory, expected_zones=zones)
    return lambda obs: ensemble_vote(ensemble.propose(obs), zones)


def replay_scenarios(calibrations: list[dict[str, Any]], days: float, instances: int,
                     seed: int) -> list[Scenario]:
    """One scenario per calibrated greenhouse of the default layout (weather drawn from ``seed``)."""
    out: list[Scenario] = []
    for i, c in enumerate(calibrations):
        soils = tuple(z["soil"] for z in c["zones"])
        if len(soils) != DEFAULT_ZONES:
            continue
        out.append(ReplayScenario(seed=seed + i, days=days, instances=instances, soils=soils,
                                  zone_soils=tuple(tuple(float(v) for v in s) for s in c["zone_soils"]),  # type: ignore[misc]
                                  root_m=float(c["root_mm"]) / 1000.0, label=str(c["greenhouse_id"]),
                                  start_states=tuple(StartState.of(s) for s in c.get("start_states") or ())))
    return out


def _suite(controllers: dict[str, Counted],
           scenarios: list[Scenario]) -> tuple[dict[str, Any], dict[str, list[float]]]:
    for c in controllers.values():
        c.clips = 0
    per: dict[str, list[ControllerMetrics]] = {}
    metrics = evaluate_all(controllers, scenarios, by_scenario=per)  # type: ignore[arg-type]
    for name, c in controllers.items():
        metrics[name] = {**metrics[name], "safety_clips": c.clips}
    return metrics, {n: [m.profit_eur_m2 for m in ms] for n, ms in per.items()}


def run_gate(candidate: Path, incumbent: Path, calibrations: list[dict[str, Any]], *, scenarios: int,
             days: float, instances: int, replay_days: float, seed: int = 0) -> dict[str, Any]:
    """Evaluate and decide; returns ``{"promote": bool, "reason": str, "suites": ...,
    "profit_diff": ...}``."""
    z = DEFAULT_ZONES
    controllers = {"candidate": Counted(_voter(candidate, z), z),
                   "incumbent": Counted(_voter(incumbent, z), z), "served": Counted(served_expert(z), z)}
    suites: dict[str, Any] = {}
    profits: dict[str, list[float]] = {n: [] for n in controllers}
    plan = [("held_out", held_out_suite(scenarios, days=days, instances=instances))]
    replay = replay_scenarios(calibrations, replay_days, instances, seed=20_000 + seed)
    if replay:
        plan.append(("replay", replay))
    for name, suite in plan:
        metrics, per = _suite(controllers, suite)
        suites[name] = {"scenarios": [s.name for s in suite], "metrics": metrics}
        for n in controllers:
            profits[n] += per[n]
    diff = paired_bootstrap(profits["candidate"], profits["incumbent"], seed=seed)
    # EUR/m2 to the cent's hundredth: a short window's differences are small
    shown = (f"{diff.mean:+.5f} EUR/m2 (95 % CI {diff.low:+.5f} .. {diff.high:+.5f}, "
             f"{diff.n} scenarios)")
    reasons = []
    if not (diff.mean > 0 and diff.low > 0):
        reasons.append(f"profit vs incumbent {shown} is not above zero")
    for name, result in suites.items():
        cand, inc = result["metrics"]["candidate"], result["metrics"]["incumbent"]
        reasons += [f"{name}: {why}" for why in worse_metrics(cand, inc)]
    verdict = f"profit up {shown}, nothing worse" if not reasons else "; ".join(reasons)
    return {"promote": not reasons, "reason": verdict, "profit_diff": diff.as_dict(), "suites": suites}

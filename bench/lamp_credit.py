"""Lamp or valve credit on paired flips: what GAE tells the learner about one decision of the clone,
against what that decision truly earns, with and without fruit-potential shaping.

    python bench/lamp_credit.py [--actuator lamps|valves] [--ensemble policy/shipped] [--member 0]
                                [--first-seed 200] [--scenarios 4] [--greenhouses 16] [--flips 128]
                                [--controls 8] [--days 30] [--window 3-25] [--seed 0] [--threads 1]
                                [--json FILE]

With ``--actuator valves`` a flip inverts one zone's irrigation at one step instead of the lamp
switch: a zone the clone waters is shut, a zone it leaves is opened (the pump started at the served
rule's speed if it stood), and the interlock then does what it does to any action (a second path
beside a lone valve, no pump without one). The points are drawn among the zones the interlock lets
water (not latched failed) at any hour; 'open' and 'shut' take the place of 'lit' and 'unlit'.

The member drives every greenhouse with its deterministic served action (after the interlock).
A flip point is one (greenhouse, 10-minute step) in the lamp window (outside the crop's dark
period, where the interlock lets the lamps burn) and within ``--window`` days; ``--flips`` points
where the clone lights and as many where it does not are drawn uniformly from a first run of the
clone alone. In a second run each flip is a twin row with the same instance id as its greenhouse's
trunk row: the twin's random draws (weather, prices, sensor noise, faults) depend on the seed,
the instance id and the step only, so both rows face the same greenhouse. Up to its flip step the
branch row is its trunk (the same inputs give the same outputs: the policy is asked once per
distinct observation); at the flip step only the lamp switch is inverted; afterwards both follow
the clone to the episode end. The trunk is branch A (the clone's choice), the flipped row branch
B, and every figure is A - B: positive means the measure favours the clone's choice.

Per flip: the true return to the episode end; its gamma-discounted value; the GAE advantage at the
flip step (:func:`policy.gae.compute_gae`, the trainer's own) with the member's critic, on the
twin's rewards and on rewards shaped with the crop's fruit potential
(:func:`policy.shaping.shaped_rewards`, :class:`policy.shaping.FruitPotential`); and both again
with a null critic (V = 0). No critic trained on shaped rewards exists yet, so the shaped credit
is shown under both critics. The episode end is a truncation: GAE bootstraps with V of the final
observation and the shaping with Phi of it. A hard termination ends GAE's trajectory (as a
training rollout would); the greenhouse goes on without its pump, as in the evaluator, so the true
return counts what the failure costs. Control pairs (``--controls``) invert nothing: every figure
of theirs is exactly zero when the pairing is exact.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policy.checkpoint import load_member, read_ensemble_manifest
from policy.evaluate import FAULT_RATE, Scenario, scenarios_from_seeds
from policy.gae import compute_gae
from policy.networks import ActorCritic
from policy.residual import interlock
from policy.shaping import FruitPotential, shaped_rewards
from policy.tuning import served_expert
from safety.interlock import DARK_PERIOD_H, hour_from_phase
from twin.backend import make_backend
from twin.config import in_window
from twin.dynamics import TwinModel
from twin.spec import ObservationSpec

DEFAULT_ENSEMBLE = Path(__file__).resolve().parents[1] / "policy" / "shipped"
MEASURES = ("true", "discounted", "gae", "gae_shaped", "gae_null", "gae_null_shaped")
"""The per-flip figures the table summarises, in its row order."""
LABELS = {
    "true": "true return to episode end",
    "discounted": "discounted return (gamma)",
    "gae": "GAE, member critic",
    "gae_shaped": "GAE shaped, member critic",
    "gae_null": "GAE, null critic (V = 0)",
    "gae_null_shaped": "GAE shaped, null critic (V = 0)",
}
FAULTS = ("suite", "off", "on")
CLASSES = {"lamps": ("lit", "unlit"), "valves": ("open", "shut")}
"""Per actuator, the names of the clone's two decisions (on first)."""
CHECKS = ("gl_discounted", "shaped_discounted", "potential_term")
"""Per-flip figures kept for the identities a test checks: the (gamma lambda)-discounted reward
difference, the gamma-discounted shaped return difference, and gamma^k (Phi_A - Phi_B) at the end."""


@dataclass(frozen=True)
class FlipPoint:
    """Where one branch leaves its trunk: a greenhouse of a scenario at a control step."""

    scenario: int
    """Index into the run's scenarios."""
    greenhouse: int
    step: int
    kind: str
    """The clone's decision in the first run ('lit', 'unlit'; for a valve 'open', 'shut') or 'control'
    (nothing inverted)."""
    zone: int = 0
    """The zone whose valve a valve flip inverts (0 for the lamps)."""


@dataclass
class FlipResult:
    """One pair's figures, A (the clone's choice) minus B (the inverted one), in reward units."""

    seed: int
    greenhouse: int
    step: int
    day: float
    hour: float
    kind: str
    zone: int
    """The zone of a valve flip (0 for the lamps)."""
    faulty: bool
    """The scenario has faults on (its true returns carry the irrigation's divergence after a fault)."""
    clone_on: bool
    """The clone's decision at the flip step in the paired run, lamps lit or the zone watered (the
    class it is counted in)."""
    undone: bool
    """The interlock undid the flip (a valve shut beside a single other one comes back as its second
    path): both rows ran the same, so the pair is left out of the classes."""
    terminated: bool
    """Either branch hit a hard termination after the flip (GAE's trajectory ends there)."""
    true: float
    discounted: float
    gae: float
    gae_shaped: float
    gae_null: float
    gae_null_shaped: float
    gl_discounted: float
    shaped_discounted: float
    potential_term: float


@dataclass(frozen=True)
class Settings:
    """What one measurement depends on (every draw follows ``seed``)."""

    actuator: str = "lamps"
    """'lamps': flip the lamp switch; 'valves': flip one zone's irrigation."""
    ensemble: str = str(DEFAULT_ENSEMBLE)
    member: int = 0
    first_seed: int = 200
    scenarios: int = 4
    greenhouses: int = 16
    flips: int = 128
    controls: int = 8
    days: float = 30.0
    window: tuple[float, float] = (3.0, 25.0)
    seed: int = 0
    faults: str = "suite"
    """'suite': faults on every other scenario as the evaluation suites cycle them; 'off'; 'on' (every
    one)."""
    gamma: float | None = None
    """None: the member's training gamma."""
    lam: float | None = None
    """None: the member's training GAE lambda."""


def act_and_value(agent: ActorCritic, obs: np.ndarray,
                  value: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
    """The served action [B, Z+2] and V [B] (None unless ``value``) per row, the network asked once
    per distinct row.

    A CPU matrix product's rounding depends on the batch's shape and a row's place in it, so two
    equal rows of one batch can get different outputs; asking per distinct row gives equal rows
    equal answers, which is what makes a branch that inverts nothing stay its trunk bit for bit.
    """
    rows = np.ascontiguousarray(obs, dtype=np.float32)
    keys = rows.view(np.dtype((np.void, rows.itemsize * rows.shape[1]))).ravel()
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    x = torch.from_numpy(rows[first])
    inverse = inverse.ravel()
    with torch.inference_mode():
        action = agent.act(x).numpy()[inverse]
        v = agent.get_value(x).numpy()[inverse].astype(np.float64) if value else None
    return action, v


def lamp_window(obs: np.ndarray, spec: ObservationSpec) -> np.ndarray:
    """[B] bool: the observation's clock lies outside the dark period, where the lamp switch acts
    (the interlock turns the lamps off inside it, so a flip there would be undone)."""
    sl = spec.slices
    hour = hour_from_phase(obs[:, sl["hour_sin"].start], obs[:, sl["hour_cos"].start])
    return ~in_window(hour, *DARK_PERIOD_H)


def twin_model(scenario: Scenario) -> TwinModel:
    """The scenario's numpy twin, as the evaluator builds it (pure: both runs share it)."""
    return TwinModel(scenario.config(), make_backend("numpy", "cpu"), scenario.seed)


def decided_on(action: np.ndarray, zones: int, actuator: str) -> np.ndarray:
    """[B, A] bool, the clone's decision per flippable target: the lamps lit ([B, 1]), or each zone
    watered (its valve open with the pump running, [B, Z])."""
    if actuator == "lamps":
        return action[:, zones + 1:zones + 2] >= 50.0
    return (action[:, :zones] >= 0.5) & (action[:, zones:zones + 1] > 0.0)


def flippable(obs: np.ndarray, spec: ObservationSpec, actuator: str) -> np.ndarray:
    """[B, A] bool: where a flip would stand: the lamps outside the dark period, a valve not latched
    failed (the interlock closes a failed valve again)."""
    if actuator == "lamps":
        return lamp_window(obs, spec)[:, None]
    return obs[:, spec.slices["valve_failed"]] < 0.5


def flip_valves(action: np.ndarray, obs: np.ndarray, zone: np.ndarray, pump_pct: float) -> np.ndarray:
    """Each row's ``zone`` inverted: a watered zone shut, a dry-left one opened (the pump started at
    ``pump_pct`` if it stood), then the interlock as on any action."""
    z = action.shape[1] - 2
    out = action.copy()
    rows = np.arange(out.shape[0])
    watered = decided_on(out, z, "valves")[rows, zone]
    out[rows, zone] = np.where(watered, 0.0, 1.0)
    out[:, z] = np.where(~watered & (out[:, z] <= 0.0), pump_pct, out[:, z])
    return interlock(torch.from_numpy(out.astype(np.float32)), z, torch.from_numpy(obs)).numpy()


def clone_decisions(agent: ActorCritic, scenario: Scenario, model: TwinModel,
                    actuator: str = "lamps") -> tuple[np.ndarray, np.ndarray]:
    """The clone alone on the scenario's greenhouses: ([H, N, A] its decision, [H, N, A] where a flip
    would stand), A = 1 for the lamps, Z for the valves."""
    b = model.backend
    n, z, horizon = scenario.instances, model.cfg.zones, model.cfg.horizon_steps
    params, state, obs = model.reset(b.asarray(np.arange(n), dtype=b.int), b.zeros((n,), dtype=b.int))
    width = 1 if actuator == "lamps" else z
    on = np.zeros((horizon, n, width), dtype=bool)
    window = np.zeros((horizon, n, width), dtype=bool)
    pump_ok = np.ones(n, dtype=bool)
    for step in range(horizon):
        action, _ = act_and_value(agent, obs, value=False)
        action[~pump_ok, : z + 1] = 0.0  # a damaged pump irrigates no more (as the evaluator)
        on[step] = decided_on(action, z, actuator)
        window[step] = flippable(obs, model.obs_spec, actuator)
        if actuator == "valves":
            window[step] &= pump_ok[:, None]
        state, out = model.step(params, state, b.asarray(action, dtype=b.float))
        obs = out.obs
        pump_ok &= ~out.terminated
    return on, window


def draw_flips(decisions: Sequence[tuple[np.ndarray, np.ndarray]], steps_per_day: float,
               window: tuple[float, float], flips: int, controls: int, seed: int,
               classes: tuple[str, str] = CLASSES["lamps"]) -> list[FlipPoint]:
    """``flips`` points where the clone decided on (lit, watered) and ``flips`` where it decided off,
    and ``controls`` of either, drawn uniformly without replacement from the flippable (greenhouse,
    step, target) of days ``window`` over every scenario."""
    rng = np.random.default_rng([seed, 0x1A3F])
    first, last = int(round(window[0] * steps_per_day)), int(round(window[1] * steps_per_day))
    on_name, off_name = classes
    pools: dict[str, list[tuple[int, int, int, int]]] = {on_name: [], off_name: []}
    for k, (on, ok) in enumerate(decisions):
        eligible = np.zeros_like(ok)
        eligible[first:last] = ok[first:last]
        for name, mask in ((on_name, eligible & on), (off_name, eligible & ~on)):
            steps, houses, targets = np.nonzero(mask)
            pools[name] += [(k, int(g), int(s), int(a))
                            for s, g, a in zip(steps, houses, targets, strict=True)]
    points: list[FlipPoint] = []
    for name in classes:
        pool = pools[name]
        for i in np.sort(rng.choice(len(pool), size=min(flips, len(pool)), replace=False)):
            k, g, s, a = pool[i]
            points.append(FlipPoint(k, g, s, kind=name, zone=a))
    both = pools[on_name] + pools[off_name]
    for i in np.sort(rng.choice(len(both), size=min(controls, len(both)), replace=False)):
        k, g, s, a = both[i]
        points.append(FlipPoint(k, g, s, kind="control", zone=a))
    return points


def _discounted_tail(x: np.ndarray, start: int, rate: float) -> float:
    """sum_{u >= start} rate^(u - start) x[u]."""
    tail = x[start:]
    return float(np.sum(tail * rate ** np.arange(tail.shape[0], dtype=np.float64)))


def paired_run(agent: ActorCritic, scenario: Scenario, model: TwinModel, points: Sequence[FlipPoint],
               gamma: float, lam: float, actuator: str = "lamps") -> list[FlipResult]:
    """Trunks and one branch row per point in one batched twin; the figures of every pair."""
    b = model.backend
    cfg = model.cfg
    n, z, horizon = scenario.instances, cfg.zones, cfg.horizon_steps
    m = len(points)
    rows = n + m
    ids = np.concatenate([np.arange(n), [p.greenhouse for p in points]]).astype(np.int64)
    flip_step = np.array([-1] * n + [p.step for p in points])
    invert = np.array([False] * n + [p.kind != "control" for p in points])
    target = np.array([0] * n + [p.zone for p in points])
    pump_pct = served_expert(z).pump_pct
    params, state, obs = model.reset(b.asarray(ids, dtype=b.int), b.zeros((rows,), dtype=b.int))
    potential = FruitPotential(cfg)
    rewards = np.zeros((horizon, rows))
    values = np.zeros((horizon, rows))
    phi = np.zeros((horizon, rows))
    terminated = np.zeros((horizon, rows), dtype=bool)
    truncated = np.zeros((horizon, rows), dtype=bool)
    clone_on = np.zeros(rows, dtype=bool)
    undone = np.zeros(rows, dtype=bool)
    hours = np.zeros(rows)
    pump_ok = np.ones(rows, dtype=bool)
    for step in range(horizon):
        action, v = act_and_value(agent, obs)
        assert v is not None
        values[step] = v
        phi[step] = potential(torch.from_numpy(np.asarray(obs))).double().numpy()
        action[~pump_ok, : z + 1] = 0.0  # a damaged pump irrigates no more (as the evaluator)
        here = flip_step == step
        if here.any():
            clone_on[here] = decided_on(action[here], z, actuator)[np.arange(int(here.sum())), target[here]]
            sl = model.obs_spec.slices
            hours[here] = hour_from_phase(obs[here, sl["hour_sin"].start], obs[here, sl["hour_cos"].start])
            flip = here & invert
            if actuator == "lamps":
                action[flip, z + 1] = 100.0 - action[flip, z + 1]  # the lamp switch alone, this step alone
            elif flip.any():
                flipped = flip_valves(action[flip], np.asarray(obs)[flip], target[flip], pump_pct)
                undone[flip] = (flipped == action[flip]).all(axis=1)
                action[flip] = flipped
        state, out = model.step(params, state, b.asarray(action, dtype=b.float))
        obs = out.obs
        rewards[step] = out.reward
        terminated[step] = pump_ok & out.terminated  # the first failure ends a training trajectory
        truncated[step] = out.truncated
        pump_ok &= ~out.terminated
    _, final_value = act_and_value(agent, obs)
    assert final_value is not None
    final_phi = potential(torch.from_numpy(np.asarray(obs))).double().numpy()

    t = {k: torch.from_numpy(v) for k, v in (("r", rewards), ("v", values), ("phi", phi),
                                              ("term", terminated), ("trunc", truncated))}
    v_end, phi_end = torch.from_numpy(final_value), torch.from_numpy(final_phi)
    # V (or Phi) of the observation after each step; only the last step is a truncation.
    final_values = torch.zeros_like(t["v"])
    final_values[-1] = v_end
    next_phi = torch.cat([t["phi"][1:], phi_end[None]])
    shaped = shaped_rewards(t["r"], t["phi"], next_phi, t["term"], gamma)
    zeros, zero_end = torch.zeros_like(t["v"]), torch.zeros_like(v_end)
    adv = {
        "gae": compute_gae(t["r"], t["v"], t["term"], t["trunc"], final_values, v_end, gamma, lam)[0],
        "gae_shaped": compute_gae(shaped, t["v"], t["term"], t["trunc"], final_values, v_end, gamma, lam)[0],
        "gae_null": compute_gae(t["r"], zeros, t["term"], t["trunc"], zeros, zero_end, gamma, lam)[0],
        "gae_null_shaped": compute_gae(shaped, zeros, t["term"], t["trunc"], zeros, zero_end, gamma, lam)[0],
    }
    adv_np = {k: v.numpy() for k, v in adv.items()}
    shaped_np = shaped.numpy()

    results = []
    steps_per_day = 86400.0 / cfg.dt_s
    for j, p in enumerate(points):
        a, bb, s = p.greenhouse, n + j, p.step
        dr = rewards[:, a] - rewards[:, bb]
        left = horizon - s
        results.append(FlipResult(
            seed=scenario.seed, greenhouse=p.greenhouse, step=s, day=s / steps_per_day, hour=float(hours[bb]),
            kind=p.kind, zone=p.zone, faulty=scenario.fault_rate > 0.0, clone_on=bool(clone_on[bb]),
            undone=bool(undone[bb]),
            terminated=bool(terminated[s:, a].any() or terminated[s:, bb].any()),
            true=float(dr[s:].sum()), discounted=_discounted_tail(dr, s, gamma),
            **{k: float(adv_np[k][s, a] - adv_np[k][s, bb]) for k in adv_np},
            gl_discounted=_discounted_tail(dr, s, gamma * lam),
            shaped_discounted=_discounted_tail(shaped_np[:, a] - shaped_np[:, bb], s, gamma),
            potential_term=float(gamma ** left * (final_phi[a] - final_phi[bb]))))
    return results


def _stats(group: Sequence[FlipResult]) -> dict[str, Any]:
    """Count, and per measure: share positive, median, mean, share whose sign agrees with the true
    return's (None for an empty group: JSON has no NaN)."""
    true = np.array([r.true for r in group])
    entry: dict[str, Any] = {"count": len(group)}
    for k in MEASURES:
        x = np.array([getattr(r, k) for r in group])
        entry[k] = {"share_positive": float(np.mean(x > 0)), "median": float(np.median(x)),
                    "mean": float(np.mean(x)), "sign_agrees": float(np.mean(np.sign(x) == np.sign(true)))
                    } if len(group) else dict.fromkeys(("share_positive", "median", "mean", "sign_agrees"))
    return entry


def summarise(results: Sequence[FlipResult], classes: tuple[str, str] = CLASSES["lamps"]) -> dict[str, Any]:
    """Per class (the clone's decision at the flip, on or off): count, and per measure the share
    positive (the measure favours the clone's choice), median, mean and the share whose sign
    agrees with the true return's; for the controls, the largest absolute figure of any measure."""
    out: dict[str, Any] = {}
    flips = [r for r in results if r.kind != "control" and not r.undone]
    for name, on in zip(classes, (True, False), strict=True):
        group = [r for r in flips if r.clone_on == on]
        entry = _stats(group)
        entry["terminated"] = sum(r.terminated for r in group)
        # Healthy and faulty scenarios apart: a fault makes the irrigation's path after a flip
        # diverge, which can swamp the lamp's own effect in the true return.
        entry["by_health"] = {h: _stats([r for r in group if r.faulty == (h == "faulty")])
                              for h in ("healthy", "faulty")}
        out[name] = entry
    controls = [r for r in results if r.kind == "control"]
    out["controls"] = {"count": len(controls),
                       "max_abs": max((abs(getattr(r, k)) for r in controls for k in (*MEASURES, *CHECKS)),
                                      default=0.0)}
    out["reclassified"] = sum(r.clone_on != (r.kind == classes[0]) for r in flips)
    out["undone"] = sum(r.undone for r in results if r.kind != "control")
    return out


def critic_trained(agent: ActorCritic) -> bool:
    """Whether any critic bias moved off its initial zero (``layer_init``): an optimiser step on the
    value loss moves them, so all-zero biases mean the critic was never trained."""
    biases = [p for name, p in agent.named_parameters()
              if name.startswith("critic") and name.endswith("bias")]
    return any(bool((p != 0).any()) for p in biases)


def run(settings: Settings) -> dict[str, Any]:
    """The whole measurement: the report as JSON-ready data."""
    if settings.greenhouses < settings.scenarios:
        raise ValueError(f"need at least one greenhouse per scenario ({settings.scenarios}), "
                         f"got {settings.greenhouses}")
    if not 0.0 <= settings.window[0] < settings.window[1] <= settings.days:
        raise ValueError(f"the flip window {settings.window} must lie in the {settings.days:g}-day episode")
    if settings.faults not in FAULTS:
        raise ValueError(f"faults must be one of {FAULTS}, got {settings.faults!r}")
    if settings.actuator not in CLASSES:
        raise ValueError(f"actuator must be one of {tuple(CLASSES)}, got {settings.actuator!r}")
    classes = CLASSES[settings.actuator]
    t0, load0 = time.perf_counter(), os.getloadavg()
    manifest = read_ensemble_manifest(settings.ensemble)
    entry = manifest["members"][settings.member]
    agent, meta = load_member(Path(settings.ensemble) / entry["dir"])
    train = meta.get("train_config") or {}
    gamma = settings.gamma if settings.gamma is not None else float(train.get("gamma", 0.999))
    lam = settings.lam if settings.lam is not None else float(train.get("gae_lambda", 0.95))
    sizes = [len(s) for s in np.array_split(np.arange(settings.greenhouses), settings.scenarios)]
    base = scenarios_from_seeds(settings.first_seed, settings.first_seed + settings.scenarios - 1,
                                settings.days)
    rate = {"suite": None, "off": 0.0, "on": FAULT_RATE}[settings.faults]
    scenarios = [replace(s, instances=k, fault_rate=s.fault_rate if rate is None else rate)
                 for s, k in zip(base, sizes, strict=True)]
    steps_per_day = 86400.0 / scenarios[0].dt_s

    models = [twin_model(s) for s in scenarios]
    decisions = [clone_decisions(agent, s, m, settings.actuator)
                 for s, m in zip(scenarios, models, strict=True)]
    t1 = time.perf_counter()
    points = draw_flips(decisions, steps_per_day, settings.window, settings.flips, settings.controls,
                        settings.seed, classes)
    results: list[FlipResult] = []
    for k, s in enumerate(scenarios):
        mine = [p for p in points if p.scenario == k]
        if mine:
            results += paired_run(agent, s, models[k], mine, gamma, lam, settings.actuator)
    t2 = time.perf_counter()
    pairs = sum(r.kind != "control" for r in results)
    return {
        "settings": {**asdict(settings), "window": list(settings.window), "gamma": gamma, "lam": lam},
        "member": {"dir": entry["dir"], "policy_version": manifest.get("policy_version"),
                   "weights_sha256": meta.get("weights_sha256"), "critic_trained": critic_trained(agent)},
        "scenarios": [s.name for s in scenarios],
        "summary": summarise(results, classes),
        "timing": {"wall_s": t2 - t0, "clone_run_s": t1 - t0, "paired_run_s": t2 - t1,
                   "s_per_flip": (t2 - t0) / max(pairs, 1), "torch_threads": torch.get_num_threads(),
                   "load_average_start": list(load0), "load_average_end": list(os.getloadavg())},
        "flips": [asdict(r) for r in results],
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as the printed table."""
    st, summ, tm = report["settings"], report["summary"], report["timing"]
    what = "Lamp" if st["actuator"] == "lamps" else "Valve"
    where = (f"outside the dark period {DARK_PERIOD_H[0]:02.0f}-{DARK_PERIOD_H[1]:02.0f} h"
             if st["actuator"] == "lamps" else "at any hour, zones not latched failed")
    lines = [f"{what} credit on paired flips: {report['member']['dir']} of {Path(st['ensemble']).name} "
             f"({report['member']['policy_version']}), "
             f"seeds {st['first_seed']}-{st['first_seed'] + st['scenarios'] - 1}, "
             f"{st['greenhouses']} greenhouses x {st['days']:g} d, faults {st['faults']}",
             f"flips in days {st['window'][0]:g}-{st['window'][1]:g} {where}; "
             f"gamma {st['gamma']:g}, lambda {st['lam']:g} "
             f"(gamma lambda {st['gamma'] * st['lam']:.4f}); "
             f"figures are clone minus flipped, reward units", ""]
    head = f"{'':34s}{'share > 0':>10s}{'median':>9s}{'mean':>9s}{'sign = true':>13s}"
    titles = {"lit": "clone lights", "unlit": "clone keeps the lamps off", "open": "clone waters the zone",
              "shut": "clone leaves the zone dry"}
    for name in CLASSES[st["actuator"]]:
        title = titles[name]
        g = summ[name]
        lines.append(f"{title} (n={g['count']}, {g['terminated']} with a hard termination after the flip)")
        lines.append(head)
        for k in MEASURES:
            e = g[k]
            if e["median"] is None:
                continue
            agree = "-" if k == "true" else f"{e['sign_agrees']:.2f}"
            lines.append(f"  {LABELS[k]:32s}{e['share_positive']:>10.2f}{e['median']:>+9.3f}"
                         f"{e['mean']:>+9.3f}"
                         f"{agree:>13s}")
        for health, h in g["by_health"].items():
            if h["count"]:
                shares = ", ".join(f"{k} {h[k]['share_positive']:.2f}" for k in ("true", "gae", "gae_shaped"))
                agrees = ", ".join(f"{k} {h[k]['sign_agrees']:.2f}" for k in ("gae", "gae_shaped"))
                lines.append(f"  {health} scenarios (n={h['count']}): share > 0 {shares}; "
                             f"sign = true {agrees}")
        lines.append("")
    c = summ["controls"]
    lines.append(f"control pairs (nothing inverted): {c['count']}, largest |figure| {c['max_abs']:g}"
                 f" ({'pairing exact' if c['max_abs'] == 0.0 else 'PAIRING NOT EXACT'})")
    if summ["undone"]:
        lines.append(f"{summ['undone']} flips left out: the interlock undid them (the zone came back as a "
                     "second path)")
    if summ["reclassified"]:
        lines.append(f"{summ['reclassified']} flips counted by the paired run's decision, "
                     f"not the first run's")
    critic = "trained" if report["member"]["critic_trained"] else \
        "never trained (its biases are all zero: the kept checkpoint is the cloned start)"
    lines.append(f"member critic: {critic}; no critic trained on shaped rewards exists yet")
    pairs = sum(summ[name]["count"] for name in CLASSES[st["actuator"]])
    lines.append(f"wall {tm['wall_s']:.1f} s (clone run {tm['clone_run_s']:.1f} s, "
                 f"paired run {tm['paired_run_s']:.1f} s), "
                 f"{tm['s_per_flip']:.3f} s per flip ({pairs} flips), torch threads {tm['torch_threads']}, "
                 f"load average {' '.join(f'{x:.2f}' for x in tm['load_average_start'])} at start, "
                 f"{' '.join(f'{x:.2f}' for x in tm['load_average_end'])} at end")
    return "\n".join(lines)


def _window(text: str) -> tuple[float, float]:
    first, _, last = text.partition("-")
    try:
        return float(first), float(last)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected FIRST-LAST days, e.g. 3-25, got {text!r}") from None


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=" ".join(__doc__.split("\n\n")[0].split()),
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    d = Settings()
    parser.add_argument("--actuator", choices=tuple(CLASSES), default=d.actuator,
                        help="flip the lamp switch, or one zone's irrigation")
    parser.add_argument("--ensemble", default=d.ensemble, help="ensemble directory (ensemble.json)")
    parser.add_argument("--member", type=int, default=d.member, help="index of the member in ensemble.json")
    parser.add_argument("--first-seed", type=int, default=d.first_seed,
                        help="first scenario seed (training seeds: keep clear of the held-out range)")
    parser.add_argument("--scenarios", type=int, default=d.scenarios,
                        help="scenarios (soils and faults cycle)")
    parser.add_argument("--greenhouses", type=int, default=d.greenhouses,
                        help="greenhouses over all scenarios")
    parser.add_argument("--flips", type=int, default=d.flips,
                        help="flips where the clone lights (waters), and as many where not")
    parser.add_argument("--controls", type=int, default=d.controls,
                        help="pairs that invert nothing (exactness check)")
    parser.add_argument("--days", type=float, default=d.days, help="episode length")
    parser.add_argument("--window", type=_window, default=d.window, metavar="FIRST-LAST",
                        help="days of the episode the flip points are drawn from")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed of the flip draw")
    parser.add_argument("--faults", choices=FAULTS, default=d.faults,
                        help="suite: every other scenario faulty, as the evaluation suites; off; on")
    parser.add_argument("--gamma", type=float, default=None,
                        help="discount (default: the member's training gamma)")
    parser.add_argument("--lam", type=float, default=None, help="GAE lambda (default: the member's)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: the machine is shared)")
    parser.add_argument("--json", default=None, help="write the report, every flip included, to this file")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    settings = Settings(actuator=args.actuator, ensemble=args.ensemble, member=args.member,
                        first_seed=args.first_seed,
                        scenarios=args.scenarios, greenhouses=args.greenhouses, flips=args.flips,
                        controls=args.controls, days=args.days, window=args.window, seed=args.seed,
                        faults=args.faults, gamma=args.gamma, lam=args.lam)
    try:
        report = run(settings)
    except ValueError as exc:
        parser.error(str(exc))
    print(format_table(report))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")
    return report


if __name__ == "__main__":
    main(sys.argv[1:])

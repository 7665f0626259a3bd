"""Lamp credit on paired flips: what GAE tells the learner about one lamp decision of the cloned
policy, against what that decision truly earns, with and without fruit-potential shaping.

    python bench/lamp_credit.py [--ensemble policy/shipped] [--member 0] [--first-seed 200]
                                [--scenarios 4] [--greenhouses 16] [--flips 128] [--controls 8]
                                [--days 30] [--window 3-25] [--seed 0] [--threads 1] [--json FILE]

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
from policy.shaping import FruitPotential, shaped_rewards
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
    """'lit', 'unlit' (the clone's lamp decision in the first run) or 'control' (nothing inverted)."""


@dataclass
class FlipResult:
    """One pair's figures, A (the clone's choice) minus B (the inverted one), in reward units."""

    seed: int
    greenhouse: int
    step: int
    day: float
    hour: float
    kind: str
    faulty: bool
    """The scenario has faults on (its true returns carry the irrigation's divergence after a fault)."""
    clone_lit: bool
    """The clone's lamp decision at the flip step in the paired run (the class it is counted in)."""
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


def clone_decisions(agent: ActorCritic, scenario: Scenario,
                    model: TwinModel) -> tuple[np.ndarray, np.ndarray]:
    """The clone alone on the scenario's greenhouses: ([H, N] lamp on, [H, N] lamp window)."""
    b = model.backend
    n, z, horizon = scenario.instances, model.cfg.zones, model.cfg.horizon_steps
    params, state, obs = model.reset(b.asarray(np.arange(n), dtype=b.int), b.zeros((n,), dtype=b.int))
    lit = np.zeros((horizon, n), dtype=bool)
    window = np.zeros((horizon, n), dtype=bool)
    pump_ok = np.ones(n, dtype=bool)
    for step in range(horizon):
        action, _ = act_and_value(agent, obs, value=False)
        action[~pump_ok, : z + 1] = 0.0  # a damaged pump irrigates no more (as the evaluator)
        lit[step] = action[:, z + 1] >= 50.0
        window[step] = lamp_window(obs, model.obs_spec)
        state, out = model.step(params, state, b.asarray(action, dtype=b.float))
        obs = out.obs
        pump_ok &= ~out.terminated
    return lit, window


def draw_flips(decisions: Sequence[tuple[np.ndarray, np.ndarray]], steps_per_day: float,
               window: tuple[float, float], flips: int, controls: int, seed: int) -> list[FlipPoint]:
    """``flips`` lit and ``flips`` unlit points, and ``controls`` of either, drawn uniformly without
    replacement from the lamp-window steps of days ``window`` over every scenario's greenhouses."""
    rng = np.random.default_rng([seed, 0x1A3F])
    first, last = int(round(window[0] * steps_per_day)), int(round(window[1] * steps_per_day))
    pools: dict[str, list[tuple[int, int, int]]] = {"lit": [], "unlit": []}
    for k, (lit, ok) in enumerate(decisions):
        eligible = np.zeros_like(ok)
        eligible[first:last] = ok[first:last]
        for name, mask in (("lit", eligible & lit), ("unlit", eligible & ~lit)):
            steps, houses = np.nonzero(mask)
            pools[name] += [(k, int(g), int(s)) for s, g in zip(steps, houses, strict=True)]
    points: list[FlipPoint] = []
    for name, want in (("lit", flips), ("unlit", flips)):
        pool = pools[name]
        for i in np.sort(rng.choice(len(pool), size=min(want, len(pool)), replace=False)):
            points.append(FlipPoint(*pool[i], kind=name))
    both = pools["lit"] + pools["unlit"]
    for i in np.sort(rng.choice(len(both), size=min(controls, len(both)), replace=False)):
        points.append(FlipPoint(*both[i], kind="control"))
    return points


def _discounted_tail(x: np.ndarray, start: int, rate: float) -> float:
    """sum_{u >= start} rate^(u - start) x[u]."""
    tail = x[start:]
    return float(np.sum(tail * rate ** np.arange(tail.shape[0], dtype=np.float64)))


def paired_run(agent: ActorCritic, scenario: Scenario, model: TwinModel, points: Sequence[FlipPoint],
               gamma: float, lam: float) -> list[FlipResult]:
    """Trunks and one branch row per point in one batched twin; the figures of every pair."""
    b = model.backend
    cfg = model.cfg
    n, z, horizon = scenario.instances, cfg.zones, cfg.horizon_steps
    m = len(points)
    rows = n + m
    ids = np.concatenate([np.arange(n), [p.greenhouse for p in points]]).astype(np.int64)
    flip_step = np.array([-1] * n + [p.step for p in points])
    invert = np.array([False] * n + [p.kind != "control" for p in points])
    params, state, obs = model.reset(b.asarray(ids, dtype=b.int), b.zeros((rows,), dtype=b.int))
    potential = FruitPotential(cfg)
    rewards = np.zeros((horizon, rows))
    values = np.zeros((horizon, rows))
    phi = np.zeros((horizon, rows))
    terminated = np.zeros((horizon, rows), dtype=bool)
    truncated = np.zeros((horizon, rows), dtype=bool)
    clone_lit = np.zeros(rows, dtype=bool)
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
            clone_lit[here] = action[here, z + 1] >= 50.0
            sl = model.obs_spec.slices
            hours[here] = hour_from_phase(obs[here, sl["hour_sin"].start], obs[here, sl["hour_cos"].start])
            flip = here & invert
            action[flip, z + 1] = 100.0 - action[flip, z + 1]  # the lamp switch alone, this step alone
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
            kind=p.kind, faulty=scenario.fault_rate > 0.0, clone_lit=bool(clone_lit[bb]),
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


def summarise(results: Sequence[FlipResult]) -> dict[str, Any]:
    """Per class (the clone lit / did not light at the flip): count, and per measure the share
    positive (the measure favours the clone's choice), median, mean and the share whose sign
    agrees with the true return's; for the controls, the largest absolute figure of any measure."""
    out: dict[str, Any] = {}
    flips = [r for r in results if r.kind != "control"]
    for name, lit in (("lit", True), ("unlit", False)):
        group = [r for r in flips if r.clone_lit == lit]
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
    out["reclassified"] = sum(r.clone_lit != (r.kind == "lit") for r in flips)
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
    decisions = [clone_decisions(agent, s, m) for s, m in zip(scenarios, models, strict=True)]
    t1 = time.perf_counter()
    points = draw_flips(decisions, steps_per_day, settings.window, settings.flips, settings.controls,
                        settings.seed)
    results: list[FlipResult] = []
    for k, s in enumerate(scenarios):
        mine = [p for p in points if p.scenario == k]
        if mine:
            results += paired_run(agent, s, models[k], mine, gamma, lam)
    t2 = time.perf_counter()
    pairs = sum(r.kind != "control" for r in results)
    return {
        "settings": {**asdict(settings), "window": list(settings.window), "gamma": gamma, "lam": lam},
        "member": {"dir": entry["dir"], "policy_version": manifest.get("policy_version"),
                   "weights_sha256": meta.get("weights_sha256"), "critic_trained": critic_trained(agent)},
        "scenarios": [s.name for s in scenarios],
        "summary": summarise(results),
        "timing": {"wall_s": t2 - t0, "clone_run_s": t1 - t0, "paired_run_s": t2 - t1,
                   "s_per_flip": (t2 - t0) / max(pairs, 1), "torch_threads": torch.get_num_threads(),
                   "load_average_start": list(load0), "load_average_end": list(os.getloadavg())},
        "flips": [asdict(r) for r in results],
    }


def format_table(report: dict[str, Any]) -> str:
    """The report as the printed table."""
    st, summ, tm = report["settings"], report["summary"], report["timing"]
    lines = [f"Lamp credit on paired flips: {report['member']['dir']} of {Path(st['ensemble']).name} "
             f"({report['member']['policy_version']}), "
             f"seeds {st['first_seed']}-{st['first_seed'] + st['scenarios'] - 1}, "
             f"{st['greenhouses']} greenhouses x {st['days']:g} d, faults {st['faults']}",
             f"flips in days {st['window'][0]:g}-{st['window'][1]:g} outside the dark period "
             f"{DARK_PERIOD_H[0]:02.0f}-{DARK_PERIOD_H[1]:02.0f} h; "
             f"gamma {st['gamma']:g}, lambda {st['lam']:g} "
             f"(gamma lambda {st['gamma'] * st['lam']:.4f}); "
             f"figures are clone minus flipped, reward units", ""]
    head = f"{'':34s}{'share > 0':>10s}{'median':>9s}{'mean':>9s}{'sign = true':>13s}"
    for name, title in (("lit", "clone lights"), ("unlit", "clone keeps the lamps off")):
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
    if summ["reclassified"]:
        lines.append(f"{summ['reclassified']} flips counted by the paired run's decision, "
                     f"not the first run's")
    critic = "trained" if report["member"]["critic_trained"] else \
        "never trained (its biases are all zero: the kept checkpoint is the cloned start)"
    lines.append(f"member critic: {critic}; no critic trained on shaped rewards exists yet")
    pairs = sum(g["count"] for g in (summ["lit"], summ["unlit"]))
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
    parser.add_argument("--ensemble", default=d.ensemble, help="ensemble directory (ensemble.json)")
    parser.add_argument("--member", type=int, default=d.member, help="index of the member in ensemble.json")
    parser.add_argument("--first-seed", type=int, default=d.first_seed,
                        help="first scenario seed (training seeds: keep clear of the held-out range)")
    parser.add_argument("--scenarios", type=int, default=d.scenarios,
                        help="scenarios (soils and faults cycle)")
    parser.add_argument("--greenhouses", type=int, default=d.greenhouses,
                        help="greenhouses over all scenarios")
    parser.add_argument("--flips", type=int, default=d.flips,
                        help="flips where the clone lights, and as many where not")
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
    settings = Settings(ensemble=args.ensemble, member=args.member, first_seed=args.first_seed,
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

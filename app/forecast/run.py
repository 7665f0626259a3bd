"""Run the served policy forward 24 hours in the greenhouse's own twin, every variant in one batch.

Each step does what a decision in the service does, batched over the variants: one forward of the
ensemble (:meth:`control.proposal.Proposer.propose_many`), each variant's vote with the served expert when
the members disagree, the pump interlock, and the safety clipper under the variant's own settings
(its daily water caps and lamp budget, counted over the variant's own day), then one twin step for
all of them. What each variant did and earned is summed per hour (:mod:`app.forecast.summary`).
No I/O, no clock, no random draw that is not keyed: the same scene gives the same forecast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from app.forecast import drive
from app.forecast.scene import Scene
from app.forecast.summary import Forecast, Tally, summarise
from control.proposal import Proposer
from policy.tuning import served_expert
from safety import ClipContext, SafetyLimits, clip, safe_state, vote
from safety.interlock import interlock_one
from twin.backend import make_backend
from twin.climate import PAR_PER_W_M2
from twin.spec import observation_spec

STEPS = round(drive.HORIZON_H * 3600.0 / drive.DT_S)


@dataclass(frozen=True)
class _Rules:
    """What every step decides with and never changes within a forecast: built once, not per step."""

    expert: Callable[[np.ndarray], np.ndarray]
    limits: tuple[SafetyLimits, ...]
    """Per variant, what the clipper enforces under its settings."""
    saturation: np.ndarray
    """(Z,) each zone's saturation [m3/m3]."""

    @classmethod
    def of(cls, scene: Scene) -> _Rules:
        return cls(served_expert(scene.zones), tuple(scene.limits_of(v) for v in scene.variants),
                   np.array([zone.saturation for zone in scene.setup.zones]))


@dataclass
class _Plant:
    """What the clipper needs to know of each variant between steps (the controller's own counters)."""

    prev: np.ndarray
    """(B, Z + 2) the last clipped action."""
    valve_age_s: np.ndarray
    water_today_l: np.ndarray
    day: np.ndarray
    """(B,) the local day number the water counts."""


def _decide(proposer: Proposer, scene: Scene, rules: _Rules, obs: np.ndarray, plant: _Plant,
            hour_of_year: float, natural_par: float) -> np.ndarray:
    """(B, D) observations -> (B, Z + 2) clipped actions, as the service would command them."""
    z = scene.zones
    members = np.asarray(proposer.propose_many(obs))
    sl = observation_spec(z).slices
    local_hour = hour_of_year % 24.0
    out = np.zeros((obs.shape[0], z + 2))
    for i, limits in enumerate(rules.limits):
        decision = vote(members[:, i], disagreement_threshold=scene.threshold, zones=z)
        action = decision.action
        if decision.low_confidence:
            action = np.asarray(rules.expert(obs[i:i + 1].astype(np.float32))[0], dtype=np.float64)
        action = interlock_one(action, obs[i], z)
        ctx = ClipContext(dt_s=drive.DT_S, prev_action=plant.prev[i], valve_state_age_s=plant.valve_age_s[i],
                          zone_water_today_l=plant.water_today_l[i], moisture_vwc=obs[i, sl["moisture"]],
                          sensor_ok=np.ones(z, dtype=bool),
                          saturation_vwc=rules.saturation,
                          natural_par_umol=natural_par,
                          lights_on_hours_today=float(obs[i, sl["lamp_hours_today"].start]),
                          local_hour=local_hour)
        safe, _ = clip(action, ctx, limits)
        changed = (safe[:z] >= 0.5) != (plant.prev[i, :z] >= 0.5)
        plant.valve_age_s[i] = np.where(changed, 0.0, plant.valve_age_s[i] + drive.DT_S)
        out[i] = safe
    plant.prev = out
    return out


def compute(scene: Scene, proposer: Proposer) -> Forecast:
    """The scene's variants run 24 h forward under the served policy, summed per hour."""
    if not scene.variants:
        raise ValueError("a forecast needs at least one variant")
    backend = make_backend("numpy")
    twin = drive.model(scene, backend)
    prm = drive.params(scene, twin)
    state, obs = drive.start_state(scene, twin, prm)
    n, z = len(scene.variants), scene.zones
    weather = drive.outlook_hours(scene)
    hour0 = scene.local_hour_of_year
    plant = _Plant(prev=np.tile(safe_state(z), (n, 1)), valve_age_s=np.full((n, z), 1e9),
                   water_today_l=np.tile(np.array(scene.water_today_l), (n, 1)),
                   day=np.full(n, math.floor(hour0 / 24.0)))
    rules = _Rules.of(scene)
    tally = Tally.zeros(n, z, STEPS)
    tally.moisture[:, :, 0] = np.asarray(state.theta)
    for t in range(STEPS):
        hour = hour0 + t * drive.DT_S / 3600.0
        day = math.floor(hour / 24.0)
        plant.water_today_l[plant.day != day] = 0.0  # the caps count the site's calendar day
        plant.day[:] = day
        solar = float(weather["solar_w_m2"][int(hour - math.floor(hour0))])
        action = _decide(proposer, scene, rules, np.asarray(obs, dtype=np.float32), plant, hour,
                         scene.transmissivity * PAR_PER_W_M2 * solar)
        state, out = twin.step(prm, state, action)
        obs = out.obs
        info = out.info
        plant.water_today_l += np.asarray(info["water_l"])
        tally.add(t, np.asarray(state.theta), info, np.asarray(state.lights) * drive.DT_S / 3600.0)
    return summarise(scene, tally, area_m2=z * twin.cfg.hydraulics.zone_area_m2)

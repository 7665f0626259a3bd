"""The environment contract as checks: every return must fit its spec.

Used by ``GreenhouseTwin(validate=True)`` on every step, by ``greentwin validate-env`` and by
the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from twin.env import GreenhouseTwin


class SpecViolation(ValueError):
    """A twin return does not match its declared spec."""


STEP_INFO_KEYS = ("fruit_kg_m2", "revenue_eur_m2", "energy_cost_eur_m2", "water_cost_eur_m2", "damage_eur_m2",
                  "heat_cost_eur_m2", "co2_cost_eur_m2", "heat_kwh_m2", "co2_kg_m2", "lamp_kwh_m2",
                  "price_eur_mwh", "par_mol_m2")
"""The step info's per-instance economics ([B] each, per m2 of floor, for the step)."""
NON_NEGATIVE_INFO = ("fruit_kg_m2", "revenue_eur_m2", "water_cost_eur_m2", "damage_eur_m2",
                     "heat_cost_eur_m2", "co2_cost_eur_m2", "heat_kwh_m2", "co2_kg_m2", "lamp_kwh_m2",
                     "par_mol_m2")
"""Energy cost is not among them: in a negative-price hour the grower is paid to use power."""


def _np(twin: GreenhouseTwin, a: Any) -> np.ndarray:
    return twin.backend.to_numpy(a)


def check_observation(twin: GreenhouseTwin, obs: Any) -> None:
    spec = twin.observation_spec
    o = _np(twin, obs)
    if o.shape != (twin.num_instances, spec.dim):
        raise SpecViolation(f"observation shape {o.shape}, expected {(twin.num_instances, spec.dim)}")
    if o.dtype != np.float32:
        raise SpecViolation(f"observation dtype {o.dtype}, expected float32")
    bad = ~np.isfinite(o)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise SpecViolation(f"observation not finite: instance {i}, feature {spec.names[j]}")
    out = (o < spec.low) | (o > spec.high)
    if out.any():
        i, j = np.argwhere(out)[0]
        raise SpecViolation(f"observation out of bounds: instance {i}, {spec.names[j]}={o[i, j]} "
                            f"not in [{spec.low[j]}, {spec.high[j]}] {spec.units[j]}")
    _check_meaning(twin, o)


def _check_meaning(twin: GreenhouseTwin, o: np.ndarray) -> None:
    """What bounds cannot say: flags are 0/1, the clock is a unit circle, no more lamp hours
    have passed today than hours since local midnight, and the crop stays under its configured caps."""
    sl = twin.observation_spec.slices
    for name in ("price_published", "lamps_ours"):
        block = o[:, sl[name]]
        bad = (block != 0.0) & (block != 1.0)
        if bad.any():
            raise SpecViolation(f"observation {name} must be 0 or 1, got {block[bad][0]} "
                                f"(instance {np.argwhere(bad)[0][0]})")
    s, c = o[:, sl["hour_sin"].start], o[:, sl["hour_cos"].start]
    radius = s * s + c * c
    if (np.abs(radius - 1.0) > 1e-3).any():
        raise SpecViolation(f"observation clock off the unit circle: sin^2 + cos^2 = {radius.min():.4f}")
    hour = np.arctan2(s, c) * (12.0 / np.pi) % 24.0
    since_midnight = np.where(hour > 24.0 - 1e-3, 0.0, hour)  # 23:59:59.99 from float noise is midnight
    lamp_h = o[:, sl["lamp_hours_today"].start]
    over = lamp_h > since_midnight + 1e-3
    if over.any():
        i = int(np.argwhere(over)[0][0])
        raise SpecViolation(f"observation lamp_hours_today={lamp_h[i]:.3f} h "
                            f"exceeds the {since_midnight[i]:.3f} h "
                            f"since local midnight (instance {i})")
    _check_crop_caps(twin, o)


def _check_crop_caps(twin: GreenhouseTwin, o: np.ndarray) -> None:
    """Leaves are pruned at ``lai_max`` and fruit harvested at ``c_fruit_max`` (the layout's bounds are
    wider, for other crop settings), or at the initial fruit load where a crop starts above it."""
    growth = twin.config.crop_growth
    sl = twin.observation_spec.slices
    caps = {"lai": growth.lai_max, "fruit_load": max(growth.c_fruit_max, growth.c_fruit_initial_max) / 1000.0}
    for name, cap in caps.items():
        v = o[:, sl[name].start]
        over = v > cap * (1.0 + 1e-5)
        if over.any():
            i = int(np.argwhere(over)[0][0])
            raise SpecViolation(f"observation {name}={v[i]:.4f} above the crop's cap {cap:g} (instance {i})")


def check_info(twin: GreenhouseTwin, reward: Any, info: dict[str, Any]) -> None:
    """The step info's economics: every key of the contract, [B], finite, costs and gains >= 0, and the
    reward equal to the five EUR terms' sum over V_ref, the climate term the heat and CO2 bills."""
    b = twin.num_instances
    for key in STEP_INFO_KEYS:
        if key not in info:
            raise SpecViolation(f"step info lacks {key!r}")
        v = _np(twin, info[key])
        if v.shape != (b,) or not np.isfinite(v).all():
            raise SpecViolation(f"step info {key!r} must be finite of shape ({b},), got {v.dtype} {v.shape}")
        if key in NON_NEGATIVE_INFO and (v < 0).any():
            raise SpecViolation(f"step info {key!r} negative: {v.min()}")
    terms = {k: _np(twin, v).astype(np.float64) for k, v in info["reward_terms"].items()}
    if set(terms) != {"moisture", "growth", "water", "energy", "climate"}:
        raise SpecViolation(f"reward terms {sorted(terms)}, "
                            "expected moisture, growth, water, energy, climate")
    bills = _np(twin, info["heat_cost_eur_m2"]).astype(np.float64) + _np(twin, info["co2_cost_eur_m2"])
    if not np.allclose(-terms["climate"], bills, rtol=1e-4, atol=1e-7):
        i = int(np.argmax(np.abs(terms["climate"] + bills)))
        raise SpecViolation(f"climate term {terms['climate'][i]} "
                            f"is not minus the heat and CO2 bills {bills[i]}, "
                            f"instance {i}")
    v_ref = twin.config.economics.v_ref(twin.config.dt_s)
    total = np.sum(list(terms.values()), axis=0) / v_ref
    r = _np(twin, reward).astype(np.float64)
    if not np.allclose(total, r, rtol=1e-3, atol=1e-3):
        i = int(np.argmax(np.abs(total - r)))
        raise SpecViolation(f"reward {r[i]} is not the terms' sum over V_ref ({total[i]}), instance {i}")


def check_step(twin: GreenhouseTwin, obs: Any, reward: Any, terminated: Any, truncated: Any,
               info: dict[str, Any] | None = None) -> None:
    """Raise :class:`SpecViolation` on the first return that breaks the contract."""
    check_observation(twin, obs)
    if info is not None:
        check_info(twin, reward, info)
    b = twin.num_instances
    r = _np(twin, reward)
    if r.shape != (b,) or r.dtype != np.float32 or not np.isfinite(r).all():
        raise SpecViolation(f"reward must be finite float32 of shape ({b},), got {r.dtype} {r.shape}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        f = _np(twin, flag)
        if f.shape != (b,) or f.dtype != np.bool_:
            raise SpecViolation(f"{name} must be bool of shape ({b},), got {f.dtype} {f.shape}")

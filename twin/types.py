"""Struct-of-arrays records for the batched twin: parameters, state and step output.

Every field has a leading instance axis B. Parameters are drawn at reset (domain
randomisation) and do not change within an episode; state changes every step. Keeping the
two apart makes ``step(params, state, action)`` a pure function of its inputs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, TypeVar

from twin.backend import Array, Backend

S = TypeVar("S", bound="ArrayStruct")


class ArrayStruct:
    """Helpers shared by the records below (they are plain frozen dataclasses)."""

    def arrays(self) -> dict[str, Array]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def replace(self: S, **changes: Array) -> S:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]

    def scatter_(self, index: Array, source: ArrayStruct) -> None:
        """Write ``source`` (rows for ``index`` only) into this record's arrays, in place.

        Only the owner of a freshly stepped state calls this (autoreset), so no one else
        can observe the mutation.
        """
        for name, dst in self.arrays().items():
            dst[index] = getattr(source, name)

    def nbytes_per_instance(self) -> int:
        total = 0
        for a in self.arrays().values():
            n = a.shape[0] if a.shape else 1
            size = a.element_size() * a.numel() if hasattr(a, "element_size") else a.nbytes
            total += size // max(n, 1)
        return total

    def to(self: S, backend: Backend) -> S:
        return dataclasses.replace(  # type: ignore[type-var]
            self, **{k: backend.asarray(v, dtype=None) for k, v in self.arrays().items()})


@dataclass(frozen=True)
class TwinParams(ArrayStruct):
    """Per-instance constants, fixed for one episode. Shapes: [B] or [B, Z]."""

    instance_id: Array
    """[B] int64: stable id; with the seed it determines every random draw."""
    key: Array
    """[B] int64: counter-based RNG key derived from (seed, instance_id)."""
    soil_type: Array
    """[B, Z] int64: index into config.SOIL_TYPES."""
    field_capacity: Array
    """[B, Z] m3/m3."""
    wilting_point: Array
    """[B, Z] m3/m3."""
    saturation: Array
    """[B, Z] m3/m3."""
    drain_frac: Array
    """[B, Z] share of water above field capacity that drains in one step."""
    inv_stress_span: Array
    """[B, Z] 1 / ((1 - p) * (fc - wp)): FAO-56 Ks slope in m3/m3 units."""
    root_mm: Array
    """[B, Z] root-zone depth in mm (1 m3/m3 of water = root_mm mm)."""
    band_low: Array
    """[B, Z] target band lower edge m3/m3 (refill point)."""
    band_high: Array
    """[B, Z] target band upper edge m3/m3 (field capacity)."""
    valve_delay_s: Array
    """[B, Z] opening delay [s]."""
    valve_tau_s: Array
    """[B, Z] first-order flow rise time constant [s]."""
    pump_qmax: Array
    """[B] pump run-out flow at full speed [L/s]."""
    network_k: Array
    """[B] system curve coefficient [1/(L/s)^2]."""
    transmissivity: Array
    """[B] share of outside solar radiation transmitted by the cover."""
    year: Array
    """[B] int64 weather year index."""
    start_hour: Array
    """[B] float32 hour of year at episode start."""
    crop_day0: Array
    """[B] crop age at episode start [days]."""
    forecast_bias_temp: Array
    """[B] site forecast temperature bias at +24 h [degC]."""
    forecast_bias_solar: Array
    """[B] site relative forecast solar bias at +24 h."""
    fruit_price: Array
    """[B] EUR per kg of fresh fruit."""
    water_price: Array
    """[B] EUR per m3 of irrigation water."""
    drain_price: Array
    """[B] EUR per m3 of drainage (the nutrients it carries away)."""
    price_adder: Array
    """[B] EUR/MWh the grower pays on top of the spot price."""
    heat_price: Array
    """[B] EUR per kWh of heat from the boiler."""
    co2_price: Array
    """[B] EUR per kg of CO2 dosed."""
    price_scale: Array
    """[B] factor on the price library's spot series: the scenario's price-year mean over the library's."""
    lamps_ours: Array
    """[B] 1.0 when greentwin controls the lamps, 0.0 when they follow the site's fixed schedule."""
    p_drift: Array
    """[B] per-step probability of a new drifting probe."""
    p_comm_loss: Array
    """[B] per-step probability of a communication loss (NaN fields)."""
    p_offline: Array
    """[B] per-step probability of a probe going offline."""
    p_valve_stuck: Array
    """[B] per-step probability of a valve sticking."""
    p_pump_wear: Array
    """[B] per-step probability of pump degradation starting."""


@dataclass(frozen=True)
class TwinState(ArrayStruct):
    """Everything that evolves. Shapes: [B], [B, Z] or [B, Z, P]."""

    theta: Array
    """[B, Z] true root-zone water content m3/m3."""
    valve_pos: Array
    """[B, Z] valve flow fraction 0..1 at the end of the step."""
    valve_cmd: Array
    """[B, Z] last effective valve command 0/1."""
    valve_failed: Array
    """[B, Z] 1.0 while a valve counts as failed (:func:`twin.hydraulics.valve_failure_latch`)."""
    irrigation_24h: Array
    """[B, Z] exponentially weighted 24 h irrigation [mm]."""
    saturated_s: Array
    """[B, Z] time the zone has been near saturation [s]."""
    aer_days: Array
    """[B, Z] days the zone has sat above its anaerobiosis point, up to the aeration lag
    (:func:`twin.soil.waterlogged_days`)."""
    air_temp: Array
    """[B] inside air temperature [degC]."""
    vapour_kpa: Array
    """[B] inside vapour pressure [kPa]."""
    co2: Array
    """[B] inside CO2 [ppm]."""
    co2_uptake: Array
    """[B] the crop's net CO2 uptake over the last step [mg CO2 m-2 s-1] (the dosing makes it up)."""
    pump: Array
    """[B] pump speed fraction 0..1 applied last step."""
    lights: Array
    """[B] lights fraction 0..1 applied last step."""
    pump_current: Array
    """[B] pump current as a fraction of rating, last step."""
    dead_head_s: Array
    """[B] time the pump has run against closed valves [s]."""
    wear: Array
    """[B] pump wear 0..0.6 (flow loss and extra current)."""
    wear_rate: Array
    """[B] wear growth per step (0 until degradation starts)."""
    drift_bias: Array
    """[B, Z, P] accumulated probe bias m3/m3."""
    drift_rate: Array
    """[B, Z, P] bias growth per step (0 for a healthy probe)."""
    offline_steps: Array
    """[B, Z, P] steps a probe stays offline (0 online)."""
    valve_fault: Array
    """[B, Z] int64: 0 healthy, 1 stuck closed, 2 stuck open."""
    est_theta: Array
    """[B, Z] Kalman moisture estimate m3/m3 (:mod:`twin.kalman`)."""
    est_var: Array
    """[B, Z] its variance."""
    est_ewma: Array
    """[B, Z, P] smoothed normalised innovation per probe."""
    est_drifting: Array
    """[B, Z, P] 1.0 while the estimator excludes a probe as drifting."""
    est_streak: Array
    """[B, Z, P] steps a probe's drift judgement has wanted to flip."""
    c_buf: Array
    """[B] crop carbohydrate buffer [mg CH2O/m2] (:class:`twin.crop.CropState`, as are the next six)."""
    c_leaf: Array
    """[B] leaf structure [mg CH2O/m2]."""
    c_stem: Array
    """[B] stem and root structure [mg CH2O/m2]."""
    c_fruit: Array
    """[B] fruit on the plants [mg CH2O/m2]."""
    t_can24: Array
    """[B] 24-h running mean canopy temperature [degC]."""
    t_sum: Array
    """[B] temperature sum since first fruit set [degC d]; negative in the vegetative phase."""
    fruit_dm_cum: Array
    """[B] dry matter allocated to fruit this episode [mg DM/m2]."""
    dli_today: Array
    """[B] PAR at the canopy received since local midnight [mol/m2]."""
    lamp_h_today: Array
    """[B] lamp-on hours since local midnight (dimmed lamps count fractionally)."""
    last_obs: Array
    """[B, D] last observation, used to hold values through missing readings."""
    step: Array
    """[B] int64 steps since episode start."""
    episode: Array
    """[B] int64 episodes started by this instance (a counter for RNG streams)."""


@dataclass(frozen=True)
class StepOut:
    """What one step returns besides the new state."""

    obs: Array
    reward: Array
    terminated: Array
    truncated: Array
    info: dict[str, Any]

"""Tomato crop growth and fruit yield: the Vanthoor (2011) yield model as simplified in GreenLight.

Canopy photosynthesis is a non-rectangular hyperbola of electron transport (light, CO2 and
temperature in one closed form); assimilates enter a carbohydrate buffer, which feeds
temperature-dependent sinks in fruit, leaves and stem (plus their growth respiration); organs
lose maintenance respiration; leaves are pruned above a maximum LAI and fruit is harvested above
a maximum fruit load. The twin adds one factor: a water-stress multiplier on net assimilation
from its FAO-56 uptake ratio (stomatal closure cuts transpiration and CO2 uptake alike).

Sources: Vanthoor et al. (2011) Biosyst. Eng. 110:378-395 (thesis ch. 9, equation numbers
below); GreenLight (Katzin et al. 2020, github.com/davkat1/GreenLight, ``setGlParams.m`` and
``createCropModel.m``) for the simplified sink, harvest and development functions.

Every function is elementwise over the batch, written once against the array namespace ``xp``
(numpy or the twin's torch shim), float32-safe: temperatures are clipped to ``T_CAN_RANGE`` and
pools stay non-negative, which bounds every exponent, and every flow out of a pool is clipped to
what the pool holds, so an explicit step at the twin's 600 s cannot drive a pool negative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, NamedTuple

from twin.backend import Array

R_GAS = 8.314
"""Molar gas constant, J mol-1 K-1 (GreenLight divides its 8314 J kmol-1 by 1e3)."""
T25_K = 298.15
SECONDS_PER_DAY = 86400.0
T_CAN_RANGE = (-50.0, 70.0)
"""Canopy temperatures are clipped to this range [degC]: it bounds every exponent the model takes."""


@dataclass(frozen=True)
class CropGrowthConfig:
    """Parameters of the tomato model (CROP_ECONOMICS.md §1.4); GreenLight ``setGlParams.m`` unless noted."""

    # ---- light absorption (Vanthoor eq. 17; GreenLight k1Par = k2Par, rhoCanPar, rhoFlrPar)
    k_par: float = 0.7
    """PAR extinction coefficient of the canopy, for direct and floor-reflected light [-]."""
    rho_can_par: float = 0.07
    """PAR reflection of the canopy top [-]."""
    rho_flr_par: float = 0.65
    """PAR reflection of the floor (white foil) [-]."""
    # ---- electron transport and photosynthesis (eqs. 12-16, 21, 23)
    j25_leaf: float = 210.0
    """Maximum electron transport rate at 25 degC per leaf area [umol e- m-2 leaf s-1]."""
    alpha: float = 0.385
    """Photon-to-electron conversion including efficiency [umol e- umol-1 photons]."""
    theta: float = 0.7
    """Curvature of the electron-transport light response [-]."""
    e_j: float = 37e3
    """Activation energy of J_pot [J mol-1]."""
    s_entropy: float = 710.0
    """Entropy term of J_pot [J mol-1 K-1]."""
    h_deact: float = 22e4
    """Deactivation energy of J_pot [J mol-1]."""
    c_gamma: float = 1.7
    """Temperature effect on the CO2 compensation point [ppm K-1]."""
    eta_co2_stom: float = 0.67
    """Stomatal over air CO2 concentration [-]."""
    m_ch2o: float = 30e-3
    """Molar mass of CH2O [mg umol-1]."""
    # ---- leaf area (eq. 5) and organ caps (GreenLight laiMax, cFruitMax)
    sla: float = 2.66e-5
    """Specific leaf area [m2 leaf mg-1 CH2O]."""
    lai_max: float = 3.0
    """LAI above which leaves are pruned [-] (GreenLight 3; Vanthoor's validations 2.5-3.5)."""
    c_fruit_max: float = 300e3
    """Fruit load above which fruit is harvested [mg CH2O m-2]."""
    # ---- carbohydrate buffer (eqs. 11, 26; Table 5)
    c_buf_max: float = 20e3
    """Buffer level where assimilate inflow is inhibited [mg CH2O m-2]."""
    c_buf_min: float = 1e3
    """Buffer level where outflow to the organs is inhibited [mg CH2O m-2]."""
    # ---- sinks (eqs. 24-25, 28, B.3, B.6)
    rg_fruit: float = 0.328
    """Potential fruit growth rate at 20 degC [mg CH2O m-2 s-1] (De Koning 1994)."""
    rg_leaf: float = 0.095
    """Potential leaf growth rate at 20 degC [mg CH2O m-2 s-1] (Heuvelink 1996)."""
    rg_stem: float = 0.074
    """Potential stem (and root) growth rate at 20 degC [mg CH2O m-2 s-1] (Heuvelink 1996)."""
    t24_min: float = 15.0
    """Low-temperature inhibition of the organ flows, 24-h mean canopy temperature [degC]."""
    t24_max: float = 24.5
    """High-temperature inhibition of the organ flows, 24-h mean canopy temperature [degC]."""
    t_inst_min: float = 10.0
    """Low instantaneous-temperature inhibition of the fruit flow [degC]."""
    t_inst_max: float = 34.0
    """High instantaneous-temperature inhibition of the fruit flow [degC]."""
    t_end_sum: float = 1035.0
    """Temperature sum after first fruit set at which the crop is fully generative [degC d]."""
    # ---- respiration (eqs. 43-45)
    cg_fruit: float = 0.27
    """Growth respiration per unit of fruit structure formed [-]."""
    cg_leaf: float = 0.28
    """Growth respiration per unit of leaf structure formed [-]."""
    cg_stem: float = 0.30
    """Growth respiration per unit of stem structure formed [-]."""
    cm_fruit: float = 1.16e-7
    """Fruit maintenance respiration at 25 degC [mg mg-1 s-1]."""
    cm_leaf: float = 3.47e-7
    """Leaf maintenance respiration at 25 degC [mg mg-1 s-1]."""
    cm_stem: float = 1.47e-7
    """Stem maintenance respiration at 25 degC [mg mg-1 s-1]."""
    q10_m: float = 2.0
    """Q10 of maintenance respiration [-]."""
    c_rgr: float = 2.85e6
    """Regression coefficient of the maintenance-respiration growth factor [s] (GreenLight cRgr)."""
    rgr: float = 3e-6
    """Relative growth rate in that factor [s-1] (GreenLight rgr; 1 - exp(-cRgr rgr) = 0.9998)."""
    # ---- yield accounting (Vanthoor Table 6.4, section 3.5.3; GL-Gym 0.065; Adams 5.6-6.2 %)
    dmc: float = 0.06
    """Fruit dry-matter content, kg DM per kg fresh weight [-] (0.055 NL ... 0.065)."""
    # ---- water stress (added for the twin, FAO-56 Ks / AquaCrop logic)
    water_stress_exponent: float = 1.0
    """Net assimilation is multiplied by f_w ** this exponent [-] (1: stomata cut CO2 like water)."""
    # ---- initial state (CROP_ECONOMICS.md §1.2)
    fao_stage_days: tuple[float, float, float, float] = (30.0, 40.0, 40.0, 25.0)
    """FAO-56 tomato stage lengths (initial, development, mid, late) of a 135-d season [d]; the
    initial LAI follows the Kc curve over the first two, scaled to the scenario's season length."""
    lai_initial: float = 0.3
    """LAI of the transplants at planting [-]."""
    stem_leaf_ratio: float = 0.8
    """Initial stem over leaf mass (Vanthoor Table 3.3 initial ratios 0.65-1.0) [-]."""
    c_buf_initial: float = 5e3
    """Initial buffer content [mg CH2O m-2]."""
    generative_onset_days: float = 40.0
    """Crop age at first fruit set [d]; the temperature sum starts at -20 degC x this many days."""
    c_fruit_initial_max: float = 200e3
    """Fruit load of a crop in full production [mg CH2O m-2], reached 60 d after first fruit set."""
    fruit_ramp_days: float = 60.0
    """Days after first fruit set over which the initial fruit load ramps from 0 to its maximum [d]."""

    def __post_init__(self) -> None:
        positive = ("sla", "lai_max", "c_fruit_max", "c_buf_max", "dmc", "j25_leaf", "alpha", "t_end_sum",
                    "fruit_ramp_days")
        for name in positive:
            if not getattr(self, name) > 0.0:
                raise ValueError(f"CropGrowthConfig.{name} must be positive, got {getattr(self, name)!r}")
        if not 0.0 < self.theta < 1.0:
            raise ValueError(f"CropGrowthConfig.theta must lie in (0, 1), got {self.theta!r}")
        if not 0.0 < self.dmc < 1.0:
            raise ValueError(f"CropGrowthConfig.dmc is a fraction in (0, 1), got {self.dmc!r}")
        if self.c_buf_min >= self.c_buf_max:
            raise ValueError("CropGrowthConfig.c_buf_min must lie below c_buf_max")
        if self.t24_min >= self.t24_max or self.t_inst_min >= self.t_inst_max:
            raise ValueError("CropGrowthConfig temperature minima must lie below their maxima")
        if self.water_stress_exponent < 0.0:
            raise ValueError("CropGrowthConfig.water_stress_exponent must be >= 0")
        if len(self.fao_stage_days) != 4 or min(self.fao_stage_days) < 0.0 or self.fao_stage_days[1] <= 0.0:
            raise ValueError("CropGrowthConfig.fao_stage_days needs four lengths >= 0 "
                             "with a positive development stage")
        if self.lai_initial <= 0.0 or self.lai_initial > self.lai_max:
            raise ValueError("CropGrowthConfig.lai_initial must lie in (0, lai_max]")

    @property
    def c_leaf_max(self) -> float:
        """Leaf mass at the maximum LAI [mg CH2O m-2]."""
        return self.lai_max / self.sla


class CropState(NamedTuple):
    """Per-greenhouse crop state, all [B] float32."""

    c_buf: Array
    """Carbohydrate buffer [mg CH2O m-2]."""
    c_leaf: Array
    """Leaf structure [mg CH2O m-2]."""
    c_stem: Array
    """Stem and root structure [mg CH2O m-2]."""
    c_fruit: Array
    """Fruit on the plants [mg CH2O m-2]."""
    t_can24: Array
    """24-h running mean canopy temperature [degC]."""
    t_sum: Array
    """Temperature sum since first fruit set [degC d]; negative in the vegetative phase."""
    fruit_dm_cum: Array
    """Cumulative dry matter allocated to fruit [mg DM m-2] (the yield account; CH2O to DM 1:1)."""


def initial_crop(xp: Any, cfg: CropGrowthConfig, crop_day0: Array, air_temp: Array,
                 season_days: float = 135.0) -> CropState:
    """Initial state from the crop age (days since planting), §1.2 (vegetative or productive).

    LAI follows the FAO-56 Kc curve (transplant LAI until the end of the initial stage, then a
    linear rise to ``lai_max`` over the development stage); the temperature sum reaches 0 at first
    fruit set (20 degC-days per day before it); the fruit load ramps up over the first
    ``fruit_ramp_days`` of production.
    """
    if season_days <= 0.0:
        raise ValueError(f"season_days must be positive, got {season_days!r}")
    scale = season_days / sum(cfg.fao_stage_days)
    l_ini, l_dev = cfg.fao_stage_days[0] * scale, cfg.fao_stage_days[1] * scale
    day = xp.maximum(crop_day0, 0.0)
    lai = cfg.lai_initial + (cfg.lai_max - cfg.lai_initial) * xp.clip((day - l_ini) / l_dev, 0.0, 1.0)
    c_leaf = lai / cfg.sla
    since_set = day - cfg.generative_onset_days
    c_fruit = cfg.c_fruit_initial_max * xp.clip(since_set / cfg.fruit_ramp_days, 0.0, 1.0)
    zero = day * 0.0
    return CropState(c_buf=zero + cfg.c_buf_initial, c_leaf=c_leaf, c_stem=cfg.stem_leaf_ratio * c_leaf,
                     c_fruit=c_fruit, t_can24=air_temp + zero, t_sum=20.0 * since_set, fruit_dm_cum=zero)


def leaf_area_index(xp: Any, cfg: CropGrowthConfig, c_leaf: Array) -> Array:
    """LAI = SLA * leaf mass (eq. 5)."""
    return cfg.sla * xp.maximum(c_leaf, 0.0)


def observed_crop(xp: Any, cfg: CropGrowthConfig,
                  state: CropState) -> tuple[Array, Array, Array, Array, Array]:
    """The observation's crop-state features in the order of ``twin.spec.CROP_STATE``: LAI [-], fruit
    load and carbohydrate buffer [g CH2O m-2], temperature sum [degC d], 24-h canopy temperature
    [degC]. One function for the twin and the service, so both observe the same pools alike."""
    return (leaf_area_index(xp, cfg, state.c_leaf), state.c_fruit / 1000.0, state.c_buf / 1000.0, state.t_sum,
            state.t_can24)


def buffer_fruit_share(xp: Any, cfg: CropGrowthConfig, t_can24: Array, t_sum: Array) -> Array:
    """Share of a unit of carbohydrate buffer that ends as fruit dry matter [-], by the organ flows'
    own split (eqs. 24-28, B.6): the fruit's flow over all flows and their growth respiration, at the
    24-h canopy temperature (the buffer empties within about a day, so its daily climate decides
    where it goes). What the buffer holds is fruit not yet paid for: the reward counts fruit when it
    is allocated."""
    t24c = xp.clip(t_can24, *T_CAN_RANGE)
    h_t = 1.0 / ((1.0 + xp.exp(-0.869 * (t24c - cfg.t_inst_min)))
                 * (1.0 + xp.exp(0.5793 * (t24c - cfg.t_inst_max))))
    fruit_share = h_t * xp.clip(t_sum * (1.0 / cfg.t_end_sum), 0.0, 1.0)
    cost_veg = (1.0 + cfg.cg_leaf) * cfg.rg_leaf + (1.0 + cfg.cg_stem) * cfg.rg_stem
    fruit = fruit_share * cfg.rg_fruit
    return fruit / (cost_veg + (1.0 + cfg.cg_fruit) * fruit)


def absorbed_par(xp: Any, cfg: CropGrowthConfig, par: Array, lai: Array) -> Array:
    """PAR absorbed by the canopy, directly and after reflection from the floor (eq. 17) [umol m-2 s-1]."""
    transmitted = xp.exp(-cfg.k_par * lai)
    intercepted = 1.0 - transmitted
    return par * (1.0 - cfg.rho_can_par) * intercepted * (1.0 + cfg.rho_flr_par * transmitted)


def _electron_transport(xp: Any, cfg: CropGrowthConfig, par: Array, t_c: Array, lai: Array) -> Array:
    """Canopy electron transport J (eqs 14-17) for a clipped canopy temperature ``t_c``."""
    par_abs = absorbed_par(xp, cfg, xp.maximum(par, 0.0), lai)
    # Eq. 15 rewritten in 1/T_k: exp(E_j (T_k - T25) / (R T_k T25)) = exp(E_j / (R T25) - E_j / (R T_k)),
    # and the deactivation exponent (S T_k - H) / (R T_k) = S / R - H / (R T_k). Both stay within
    # [-34, 9] over T_CAN_RANGE, so float32 neither overflows nor loses the ratio.
    inv_tk = 1.0 / (t_c + 273.15)
    peak_25 = 1.0 + math.exp((cfg.s_entropy * T25_K - cfg.h_deact) / (R_GAS * T25_K))
    rise = xp.exp(cfg.e_j / (R_GAS * T25_K) - (cfg.e_j / R_GAS) * inv_tk)
    fall = 1.0 + xp.exp(cfg.s_entropy / R_GAS - (cfg.h_deact / R_GAS) * inv_tk)
    j_pot = (cfg.j25_leaf * peak_25) * lai * rise / fall
    # Non-rectangular hyperbola (eq. 14) in its rationalised form: no float32 cancellation at low light.
    light = cfg.alpha * par_abs
    a = j_pot + light
    disc = xp.maximum(a * a - (4.0 * cfg.theta) * j_pot * light, 0.0)
    return (2.0 * j_pot) * light / xp.maximum(a + xp.sqrt(disc), 1e-12)


def _co2_terms(xp: Any, cfg: CropGrowthConfig, co2: Array, t_c: Array, lai: Array) -> tuple[Array, Array]:
    """Stomatal CO2 and the compensation point Gamma (eqs 21, 23), ppm; J25_leaf / J25_can = 1 / LAI."""
    inv_lai = 1.0 / xp.maximum(lai, 0.05)
    # Below 20 degC with LAI < 1 the linear form would fall under zero; a compensation point cannot.
    gamma = xp.maximum(cfg.c_gamma * (20.0 + (t_c - 20.0) * inv_lai), 0.0)
    return cfg.eta_co2_stom * xp.maximum(co2, 1.0), gamma


def canopy_assimilation(xp: Any, cfg: CropGrowthConfig, par: Array, co2: Array, t_can: Array,
                        lai: Array) -> tuple[Array, Array]:
    """Gross canopy P and photorespiration R_photo, umol CO2 m-2 s-1 (eqs 12-17, 21, 23)."""
    t_c = xp.clip(t_can, *T_CAN_RANGE)
    j = _electron_transport(xp, cfg, par, t_c, lai)
    co2_stom, gamma = _co2_terms(xp, cfg, co2, t_c, lai)
    p = j * xp.maximum(co2_stom - gamma, 0.0) / (4.0 * (co2_stom + 2.0 * gamma))
    return p, p * gamma / co2_stom


def _net_assimilation(xp: Any, cfg: CropGrowthConfig, par: Array, co2: Array, t_c: Array,
                      lai: Array) -> Array:
    """P - R_photo = J (C - Gamma)^2 / (4 C (C + 2 Gamma)), the same value in fewer array operations."""
    j = _electron_transport(xp, cfg, par, t_c, lai)
    co2_stom, gamma = _co2_terms(xp, cfg, co2, t_c, lai)
    excess = xp.maximum(co2_stom - gamma, 0.0)
    return j * excess * excess / ((4.0 * co2_stom) * (co2_stom + 2.0 * gamma))


def water_stress_factor(xp: Any, uptake_mm: Array, etc_mm: Array, eps: float = 1e-6) -> Array:
    """f_w in [0, 1]: zone-mean actual over potential uptake ([B, Z] inputs -> [B]).

    ``etc_mm`` may be [B, 1] (one demand for all zones). ``eps`` [mm] keeps a step without demand
    (night, no lamps) unstressed rather than 0/0.
    """
    ratio = (uptake_mm + eps) / (etc_mm + eps)
    return xp.mean(xp.clip(ratio, 0.0, 1.0), axis=-1)


def maintenance_respiration(xp: Any, cfg: CropGrowthConfig, state: CropState, dt_s: float
                            ) -> tuple[Array, Array, Array]:
    """Maintenance respiration of leaf, stem and fruit over a step (eq. 45) [mg CH2O m-2], each at
    most what its organ holds. Fruit respiration is what separates allocated from harvested fruit."""
    growth_factor = 1.0 - math.exp(-cfg.c_rgr * cfg.rgr)
    k = 0.1 * math.log(cfg.q10_m)
    t24 = xp.clip(state.t_can24, *T_CAN_RANGE)
    per_mass = xp.exp(k * t24 + (math.log(growth_factor * dt_s) - 25.0 * k))
    # One bound for all organs: the largest coefficient may take at most the whole organ.
    per_mass = xp.minimum(per_mass, 1.0 / max(cfg.cm_leaf, cfg.cm_stem, cfg.cm_fruit))
    return cfg.cm_leaf * per_mass * state.c_leaf, cfg.cm_stem * per_mass * state.c_stem, \
        cfg.cm_fruit * per_mass * state.c_fruit


def step_crop(xp: Any, cfg: CropGrowthConfig, state: CropState, par: Array, co2: Array, t_can: Array,
              f_w: Array, dt_s: float) -> tuple[CropState, Array]:
    """:func:`step_crop_uptake` without the canopy's CO2 uptake."""
    new, fruit, _ = step_crop_uptake(xp, cfg, state, par, co2, t_can, f_w, dt_s)
    return new, fruit


def step_crop_uptake(xp: Any, cfg: CropGrowthConfig, state: CropState, par: Array, co2: Array, t_can: Array,
                     f_w: Array, dt_s: float) -> tuple[CropState, Array, Array]:
    """One explicit-Euler step; returns the new state, the fresh fruit gained this step [kg FW m-2]
    (fruit allocation / DMC) and the canopy's net CO2 uptake [mg CO2 m-2 s-1]: assimilate into the
    buffer less growth and maintenance respiration, what the house's CO2 balance loses to the crop.

    Order within the step: assimilate enters the buffer; the organ flows (with their growth
    respiration) leave it, scaled down together when they would take more than it holds; organs
    lose maintenance respiration (at most what they hold); leaves above ``lai_max`` and fruit above
    ``c_fruit_max`` are removed. GreenLight harvests with a sigmoid of maximum rate 5e4 mg m-2 s-1,
    about 1e5 times the inflow, which pins the pool at its cap; explicit Euler of that rate is
    unstable at 600 s, so the cap is applied directly.
    """
    if dt_s <= 0.0:
        raise ValueError(f"dt_s must be positive, got {dt_s!r}")
    c_buf, c_leaf, c_stem, c_fruit, t24, t_sum, fruit_cum = state
    t_c = xp.clip(t_can, *T_CAN_RANGE)
    t24c = xp.clip(t24, *T_CAN_RANGE)
    net = _net_assimilation(xp, cfg, par, co2, t_c, leaf_area_index(xp, cfg, c_leaf))
    f = xp.clip(f_w, 0.0, 1.0)
    if cfg.water_stress_exponent != 1.0:
        f = f ** cfg.water_stress_exponent
    # Buffer inflow (eqs. 10-11), inhibited as the buffer fills. The buffer never exceeds ~60 g here
    # (inflow is e^-20 of its rate there), so 5e-4 (c_buf - 20 g) stays far below float32's exp limit.
    inflow = (cfg.m_ch2o * dt_s) * f * net / (1.0 + xp.exp(5e-4 * (c_buf - cfg.c_buf_max)))
    # Organ sinks (eqs. 24-28, B.3), all evaluated at the start of the step; c_buf >= 0 bounds the first
    # exponent, the clipped temperatures the others.
    h_buf_org = 1.0 / (1.0 + xp.exp(-5e-3 * (c_buf - cfg.c_buf_min)))
    h_t24 = 1.0 / ((1.0 + xp.exp(-1.1587 * (t24c - cfg.t24_min)))
                   * (1.0 + xp.exp(1.3904 * (t24c - cfg.t24_max))))
    h_t = 1.0 / ((1.0 + xp.exp(-0.869 * (t_c - cfg.t_inst_min)))
                 * (1.0 + xp.exp(0.5793 * (t_c - cfg.t_inst_max))))
    # Development (eq. B.6): GreenLight smooths the corners of this ramp over +-10 degC d (half a day).
    h_tsum = xp.clip(t_sum * (1.0 / cfg.t_end_sum), 0.0, 1.0)
    # g_T24 (eq. 28) is linear and turns negative below -1.3 degC, where h_T24 has already stopped growth.
    veg = (h_buf_org * h_t24 * xp.maximum(0.047 * t24c + 0.06, 0.0)) * dt_s
    fruit_share = h_t * h_tsum
    cost_veg = (1.0 + cfg.cg_leaf) * cfg.rg_leaf + (1.0 + cfg.cg_stem) * cfg.rg_stem
    demand = veg * (cost_veg + ((1.0 + cfg.cg_fruit) * cfg.rg_fruit) * fruit_share)
    available = c_buf + inflow
    # The organ flows and their growth respiration leave together, scaled down if the buffer runs short.
    taken = xp.minimum(demand, available)
    veg = veg * (taken / xp.maximum(demand, 1e-12))
    fruit = veg * fruit_share * cfg.rg_fruit
    # Maintenance respiration from each organ (eq. 45), then pruning and harvest caps.
    m_leaf, m_stem, m_fruit = maintenance_respiration(xp, cfg, state, dt_s)
    new_state = CropState(
        c_buf=available - taken,
        c_leaf=xp.minimum(c_leaf + cfg.rg_leaf * veg - m_leaf, cfg.c_leaf_max),
        c_stem=c_stem + cfg.rg_stem * veg - m_stem,
        c_fruit=xp.minimum(c_fruit + fruit - m_fruit, cfg.c_fruit_max),
        # 24-h mean as an exact first-order filter (step-size independent); development (eq. 8).
        t_can24=t_c + (t24 - t_c) * math.exp(-dt_s / SECONDS_PER_DAY),
        t_sum=t_sum + t_c * (dt_s / SECONDS_PER_DAY),
        fruit_dm_cum=fruit_cum + fruit)
    # The canopy's net CO2 exchange with the air: what entered the buffer, less growth and maintenance
    # respiration (negative in the dark: the crop then breathes CO2 into the house).
    growth_resp = taken - (cfg.rg_leaf + cfg.rg_stem) * veg - fruit
    fixed = inflow - growth_resp - (m_leaf + m_stem + m_fruit)
    return new_state, fruit * (1e-6 / cfg.dmc), fixed * (44.0 / 30.0 / dt_s)

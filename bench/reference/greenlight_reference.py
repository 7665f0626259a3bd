"""Reference tables from GreenLight (Katzin 2021) on its shipped Bleiswijk weather, to check the twin against.

The twin's climate and crop are simplified from the GreenLight / Vanthoor models; this script runs the
published model itself so that tests can compare the twin with it on the same weather, without
GreenLight being installed where the tests run. Three lamp scenarios share everything but the lamp
window, so the tables also give GreenLight's marginal effect of lamp hours on fruit and heating:

* ``shipped``: GreenLight's own lamp control as shipped (LED toplights, lamp window 00:00-18:00).
* ``no_lamps``: the lamp window made empty (``lampTimeOn = lampTimeOff = 0``), so lamps never switch
  on and the climate computer's light period is the sun's alone.
* ``short_window``: the window starts at 09:00 instead of 00:00 (switch-off stays 18:00), half the
  scheduled hours.

GreenLight's climate control (heating, vents, screen, CO2) and its young crop start state are used
unchanged; the crop starts on 20 October 2009 at midnight, the first sample of the weather file.

Requires GreenLight (``pip install greenlight==2.0.5``). From the repository root::

    python bench/reference/greenlight_reference.py [--days 60] [--jobs 1] [--cache-dir DIR]

writes ``tests/twin/reference/greenlight_bleiswijk_hourly.csv`` (scenario ``shipped``, hourly),
``greenlight_bleiswijk_hourly_lamps.csv`` (lamp fraction per scenario, hourly) and
``greenlight_bleiswijk.json`` (per-scenario summaries, parameters, provenance). A 60-day scenario
takes about 10 CPU minutes; ``--jobs 3`` runs the three side by side, and ``--cache-dir`` keeps the
sampled runs so that a change in the summaries does not cost the simulations again (the cache
changes no number written).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import datetime as dt
import hashlib
import io
import json
import math
import operator
import sys
import time
import warnings
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

try:
    import greenlight
    import pandas as pd
except ImportError:  # the one dependency the rest of the project does not need
    sys.exit("greenlight is not installed: pip install greenlight==2.0.5")

PACKAGE = "greenlight"
MODEL = "models/katzin_2021/definition/main_katzin_2021.json"
WEATHER = "models/katzin_2021/input_data/test_data/Bleiswijk_from_20091020.csv"
START = "2009-10-20T00:00"  # first row of WEATHER (its Time column counts seconds from here)
START_DOY = 293  # 20 October in a non-leap year
SAMPLE_S = 300  # the weather file's own step; finer than any control switch the model makes
DMC = 0.06  # fruit dry-matter content GreenLight's own CLI uses to turn fruit CH2O into fresh weight
OUT_DIR = Path("tests/twin/reference")
# 110 days (to 7 February) cost about 17-19 CPU minutes per scenario (over 25 wall minutes with two run
# side by side on a shared 2-core machine); 60 days (to 18 December) cost 8-9 CPU minutes, about 15 wall
# minutes with all three side by side. --days 110 gives the longer tables; their first 60 days are the
# same solution (the solver's steps do not depend on where the run ends).
DEFAULT_DAYS = 60

# Everything read from a run: inputs, states and auxiliary variables, by their GreenLight names.
COLUMNS = (
    "tOut", "vpOut", "co2Out", "wind", "iGlob", "isDay",
    "tAir", "rhIn", "co2InPpm", "tCan", "rParGhSun", "rParGhLamp", "rParGhIntLamp",
    "uLamp", "qLampIn", "qIntLampIn", "hBoilPipe", "hBoilGroPipe", "mcExtAir",
    "uRoof", "fVentRoof", "fVentSide", "fVentForced", "uThScr",
    "cFruit", "lai", "mcFruitHar",
    # kept in the cache for later checks of the crop and the controller, not all summarised yet
    "tSky", "dayRadSum", "isDayInside", "heatSetPoint", "co2SetPoint", "tPipe", "vpAir", "fLeakage",
    "parCan", "mcAirCan", "cBuf", "cLeaf", "cStem", "tCanSum", "tCan24", "mcLeafHar",
)

# Model constants reported with the tables (read from the loaded model, not restated here).
LAMP_CONSTS = ("thetaLampMax", "etaLampPar", "etaLampNir", "zetaLampPar", "etaLampCool", "thetaIntLampMax",
               "lampTimeOn", "lampTimeOff", "lampsOffSun", "lampRadSumLimit")
SETPOINT_CONSTS = ("tSpDay", "tSpNight", "heatDeadZone", "co2SpDay", "rhMax", "thScrSpDay", "thScrSpNight",
                   "pBoil", "phiExtCo2", "aFlr")
CONVERSION_CONSTS = ("parJtoUmolSun", "zetaLampPar", "zetaIntLampPar")


@dataclass(frozen=True)
class Scenario:
    """One lamp setting; ``mods`` are GreenLight constant overrides (name -> definition)."""

    name: str
    label: str
    how: str
    mods: Mapping[str, str] = field(default_factory=dict)


SCENARIOS = (
    Scenario("shipped", "a", "GreenLight's lamp control as shipped: LED toplights, window 00:00-18:00, "
             "off above 400 W/m2 outside global radiation or on days with over 10 MJ/m2 sun"),
    Scenario("no_lamps", "b", "lampTimeOn = lampTimeOff = 0: the lamp window is empty, lamps never on "
             "(the light period for setpoints is then the sun's alone)",
             {"lampTimeOn": "0", "lampTimeOff": "0"}),
    Scenario("short_window", "c", "lampTimeOn = 9: window 09:00-18:00 instead of 00:00-18:00 "
             "(half the scheduled hours), all other lamp rules as shipped",
             {"lampTimeOn": "9"}),
)

_OPS: dict[type, Callable[..., float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
    ast.Pow: operator.pow, ast.USub: operator.neg, ast.UAdd: operator.pos,
}


def _arith(expr: str) -> float:
    """Value of a constant's definition such as ``200/3`` (GreenLight stores them as text)."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return float(node.value)
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError(f"not a plain number: {expr!r}")

    return ev(ast.parse(expr, mode="eval").body)


class _Progress(io.TextIOBase):
    """Swallows GreenLight's per-evaluation '\\rRunning: x%' prints, reporting every 10% on stderr."""

    def __init__(self, name: str) -> None:
        self.name, self.shown = name, -10.0

    def write(self, s: str) -> int:
        if "Running:" in s:
            with contextlib.suppress(ValueError):
                pct = float(s.rsplit("Running:", 1)[1].strip().rstrip("%"))
                if pct >= self.shown + 10:
                    self.shown = pct - pct % 10
                    print(f"{self.name}: {self.shown:.0f}%", file=sys.stderr, flush=True)
        return len(s)


def _mods(days: float, scenario: Scenario) -> list[dict[str, Any]]:
    """GreenLight prompt additions: the period, 5-minute dense output, and the scenario's constants."""
    options = {"options": {"t_start": "0", "t_end": str(days * 86400 + SAMPLE_S), "t_eval": "output_step",
                           "output_step": str(SAMPLE_S)}}
    consts = {k: {"type": "const", "definition": v} for k, v in scenario.mods.items()}
    return [options, consts] if consts else [options]


def simulate(scenario: Scenario, days: float,
             jobs: int = 1) -> tuple[pd.DataFrame, dict[str, float], dict[str, float]]:
    """Run one scenario: 5-minute samples of COLUMNS (0 .. days inclusive), constants, wall and CPU
    seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    mdl = greenlight.GreenLight(optional_prompt=_mods(days, scenario))  # default prompt = MODEL + WEATHER
    with contextlib.redirect_stdout(_Progress(scenario.name)), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scipy's Jacobian estimate overflows at times; the solver recovers
        mdl.load()
        mdl.solve()
    if not mdl.states_sol.success:
        raise RuntimeError(f"{scenario.name}: GreenLight failed: {mdl.states_sol.message}")
    frame = mdl.full_sol[["Time", *COLUMNS]].astype(float).reset_index(drop=True)
    names = set(LAMP_CONSTS + SETPOINT_CONSTS + CONVERSION_CONSTS)
    consts = {k: _arith(mdl.variables[k]) for k in sorted(names)}
    return frame, consts, {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                           "jobs": jobs}


Run = tuple[pd.DataFrame, dict[str, float], dict[str, float]]


def _cached(scenario: Scenario, days: float, cache: Path | None, jobs: int = 1) -> Run:
    """simulate(), kept under ``cache`` when given (the runs dominate the cost; summaries are cheap)."""
    if cache is None:
        return simulate(scenario, days, jobs)
    stem = f"{scenario.name}_{days:g}d"
    data, meta = cache / f"{stem}.csv.gz", cache / f"{stem}.json"
    if data.exists() and meta.exists():
        info = json.loads(meta.read_text())
        return pd.read_csv(data), info["consts"], info["timing"]
    frame, consts, timing = simulate(scenario, days, jobs)
    cache.mkdir(parents=True, exist_ok=True)
    frame.to_csv(data, index=False, float_format="%.17g")  # round-trips float64 exactly
    meta.write_text(json.dumps({"consts": consts, "timing": timing}))
    return frame, consts, timing


def hourly(x: np.ndarray) -> np.ndarray:
    """Trapezoid means over each hour of 5-minute samples, so hourly sums x 3600 are the run's integrals."""
    per = 3600 // SAMPLE_S
    hours = (len(x) - 1) // per
    body = x[: hours * per].reshape(hours, per)
    ends = x[per : hours * per + 1 : per]
    return (body.sum(axis=1) - 0.5 * body[:, 0] + 0.5 * ends) / per


def integral(x: np.ndarray) -> float:
    """Trapezoid integral over the run of a rate sampled every SAMPLE_S seconds (unit x s)."""
    return float(SAMPLE_S * (x.sum() - 0.5 * (x[0] + x[-1])))


def sat_vp(t_c: np.ndarray) -> np.ndarray:
    """GreenLight's saturated vapour pressure [Pa] (satVp), so RH here matches the model's rhIn."""
    return 610.78 * np.exp(17.2694 * t_c / (t_c + 238.3))


def co2_ppm(t_c: np.ndarray, mg_m3: np.ndarray) -> np.ndarray:
    """GreenLight's co2dens2ppm at 1 atm, for the outside CO2 it takes as a density."""
    return 8.3144598e6 * (t_c + 273.15) * (1e-6 * mg_m3) / (101325 * 44.01e-3)


def day_mask(f: pd.DataFrame) -> np.ndarray:
    """Samples in the crop's light period: the sun up (GreenLight's isDay, iGlob > 20) or lamps on."""
    return (f["isDay"].to_numpy() > 0.5) | (f["uLamp"].to_numpy() > 0.5)


def summarise(f: pd.DataFrame, c: Mapping[str, float]) -> dict[str, float]:
    """Per-scenario totals and means over the whole run (5-minute samples, trapezoid integrals)."""
    col = {k: f[k].to_numpy() for k in COLUMNS}
    body = slice(0, len(f) - 1)  # means over [start, end): the final sample opens the next period
    day = day_mask(f)[body]
    heat_mj = integral(col["hBoilPipe"] + col["hBoilGroPipe"]) / 1e6
    lamp_kwh = integral(col["qLampIn"] + col["qIntLampIn"]) / 3.6e6
    par_sun = integral(c["parJtoUmolSun"] * col["rParGhSun"]) / 1e6
    par_lamp = integral(c["zetaLampPar"] * col["rParGhLamp"]
                        + c["zetaIntLampPar"] * col["rParGhIntLamp"]) / 1e6
    harvest_ch2o = integral(col["mcFruitHar"]) / 1e3  # g CH2O m-2
    fruit0, fruit1 = col["cFruit"][0] / 1e3, col["cFruit"][-1] / 1e3
    net_ch2o = harvest_ch2o + fruit1 - fruit0
    crop = col["cBuf"] + col["cLeaf"] + col["cStem"] + col["cFruit"]
    crop_growth = (crop[-1] - crop[0] + integral(col["mcFruitHar"] + col["mcLeafHar"])) / 1e3
    t_air, co2 = col["tAir"][body], col["co2InPpm"][body]
    return {
        "t_air_day_c": float(t_air[day].mean()),
        "t_air_night_c": float(t_air[~day].mean()),
        "rh_air_pct": float(col["rhIn"][body].mean()),
        "co2_day_ppm": float(co2[day].mean()),
        "co2_night_ppm": float(co2[~day].mean()),
        "light_period_share": float(day.mean()),
        "heating_mj_m2": heat_mj,
        "heating_kwh_m2": heat_mj / 3.6,
        "lamp_kwh_m2": lamp_kwh,
        "lamp_full_power_hours": integral(col["uLamp"]) / 3600,
        "par_sun_mol_m2": par_sun,
        "par_lamp_mol_m2": par_lamp,
        "co2_dosed_kg_m2": integral(col["mcExtAir"]) / 1e6,
        "fruit_harvest_ch2o_g_m2": harvest_ch2o,
        "fruit_harvest_fw_kg_m2": harvest_ch2o / 1e3 / DMC,
        "fruit_on_plants_start_ch2o_g_m2": fruit0,
        "fruit_on_plants_end_ch2o_g_m2": fruit1,
        "fruit_net_growth_ch2o_g_m2": net_ch2o,
        "fruit_net_growth_fw_kg_m2": net_ch2o / 1e3 / DMC,
        "fruit_fw_g_per_mol_par": net_ch2o / DMC / (par_sun + par_lamp),
        "crop_growth_ch2o_g_m2": crop_growth,
        "par_absorbed_canopy_mol_m2": integral(col["parCan"]) / 1e6,
        "lai_start": float(col["lai"][0]),
        "lai_end": float(col["lai"][-1]),
    }


def marginals(s: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Lamp effects between scenarios: fruit and heating per lamp kWh, relative to no lamps."""
    a, b, c = s["shipped"], s["no_lamps"], s["short_window"]

    def per_kwh(x: Mapping[str, float], key: str, sign: float = 1.0) -> float:
        return sign * (x[key] - b[key]) / (x["lamp_kwh_m2"] - b["lamp_kwh_m2"])

    return {
        "fruit_fw_kg_per_lamp_kwh_a_vs_b": per_kwh(a, "fruit_net_growth_fw_kg_m2"),
        "fruit_fw_kg_per_lamp_kwh_c_vs_b": per_kwh(c, "fruit_net_growth_fw_kg_m2"),
        "heating_kwh_saved_per_lamp_kwh_a_vs_b": per_kwh(a, "heating_kwh_m2", -1.0),
        "heating_kwh_saved_per_lamp_kwh_c_vs_b": per_kwh(c, "heating_kwh_m2", -1.0),
        "lamp_hours_ratio_c_over_a": c["lamp_full_power_hours"] / a["lamp_full_power_hours"],
    }


HOURLY_COLUMNS = {
    "hour": "hours since the start; row h holds means over hours [h, h+1)",
    "day_of_year": "calendar day of the hour's start (20 October = 293)",
    "hour_of_day": "clock hour of the weather file (GreenLight's timeOfDay, whole hours)",
    "t_out_c": "tOut",
    "rh_out_pct": "100 * vpOut / satVp(tOut)",
    "vp_out_kpa": "vpOut / 1000",
    "global_rad_w_m2": "iGlob (outside global radiation)",
    "co2_out_ppm": "co2dens2ppm(tOut, co2Out)",
    "wind_m_s": "wind",
    "t_air_c": "tAir (main compartment, below the screen)",
    "rh_air_pct": "rhIn",
    "co2_air_ppm": "co2InPpm",
    "t_can_c": "tCan",
    "par_sun_umol_m2_s": "parJtoUmolSun * rParGhSun (sun's PAR above the canopy, after the cover)",
    "par_lamp_umol_m2_s": ("zetaLampPar * rParGhLamp + zetaIntLampPar * rParGhIntLamp "
                           "(lamps' PAR above the canopy)"),
    "lamp_frac": "uLamp (toplight control, 0..1)",
    "lamp_w_m2": "qLampIn + qIntLampIn (lamp electrical input)",
    "heating_w_m2": "hBoilPipe + hBoilGroPipe (boiler heat into the pipes)",
    "co2_dose_mg_m2_s": "mcExtAir (CO2 from the external source)",
    "vent_opening": "uRoof (roof vent control, 0..1; no side vents)",
    "vent_m3_m2_s": "fVentRoof + fVentSide + fVentForced (air exchange with outside, leakage included)",
    "screen_closure": "uThScr (thermal screen, 0 open .. 1 closed)",
    "light_period_frac": "share of the hour with isDay > 0.5 or uLamp > 0.5 (sun up or lamps on)",
    "lai": "lai (= sla * cLeaf)",
    "fruit_ch2o_g_m2": "cFruit / 1000 (fruit on the plants, g CH2O m-2)",
    "fruit_harvest_ch2o_g_m2_h": "mcFruitHar * 3.6 (harvest rate, g CH2O m-2 h-1)",
}
"""Meaning of each hourly CSV column as GreenLight variables; every value is the hour's trapezoid mean of
5-minute samples, so a column's sum x 3600 s is the run's integral of that rate."""

NOTES = (
    "Light period (day/night means) is the sun up (GreenLight's isDay: iGlob > 20 W/m2) or lamps on "
    "(uLamp > 0.5), sampled every 5 minutes; GreenLight's own controller uses isDayInside, the lamp "
    "schedule rather than the lamps' state.",
    "Totals are trapezoid integrals of 5-minute samples of GreenLight's dense solution; means are over "
    "the 5-minute samples of [start, end).",
    "GreenLight's crop is carbohydrate (mg CH2O m-2, treated as dry matter): fresh weight = CH2O / "
    f"{DMC}, the fruit dry-matter content greenlight.main_cli uses.",
    "fruit_net_growth = harvest + (fruit on the plants at the end - at the start); harvest only begins "
    "when fruit on the plants nears cFruitMax (300 g CH2O m-2).",
    "Marginals are differences to no_lamps divided by the scenario's lamp energy; heating saved is "
    "(no_lamps - scenario) heating over the scenario's lamp energy, both in kWh.",
    "The weather has no rain column (a greenhouse model does not need one).",
)


def hourly_table(f: pd.DataFrame, c: Mapping[str, float]) -> pd.DataFrame:
    """The hourly CSV: weather the twin needs as its input, then GreenLight's climate, control and crop."""
    g = {k: f[k].to_numpy() for k in COLUMNS}
    h = {
        "t_out_c": hourly(g["tOut"]),
        "rh_out_pct": hourly(100 * g["vpOut"] / sat_vp(g["tOut"])),
        "vp_out_kpa": hourly(g["vpOut"] / 1e3),
        "global_rad_w_m2": hourly(g["iGlob"]),
        "co2_out_ppm": hourly(co2_ppm(g["tOut"], g["co2Out"])),
        "wind_m_s": hourly(g["wind"]),
        "t_air_c": hourly(g["tAir"]),
        "rh_air_pct": hourly(g["rhIn"]),
        "co2_air_ppm": hourly(g["co2InPpm"]),
        "t_can_c": hourly(g["tCan"]),
        "par_sun_umol_m2_s": hourly(c["parJtoUmolSun"] * g["rParGhSun"]),
        "par_lamp_umol_m2_s": hourly(c["zetaLampPar"] * g["rParGhLamp"]
                                     + c["zetaIntLampPar"] * g["rParGhIntLamp"]),
        "lamp_frac": hourly(g["uLamp"]),
        "lamp_w_m2": hourly(g["qLampIn"] + g["qIntLampIn"]),
        "heating_w_m2": hourly(g["hBoilPipe"] + g["hBoilGroPipe"]),
        "co2_dose_mg_m2_s": hourly(g["mcExtAir"]),
        "vent_opening": hourly(g["uRoof"]),
        "vent_m3_m2_s": hourly(g["fVentRoof"] + g["fVentSide"] + g["fVentForced"]),
        "screen_closure": hourly(g["uThScr"]),
        "light_period_frac": hourly(day_mask(f).astype(float)),
        "lai": hourly(g["lai"]),
        "fruit_ch2o_g_m2": hourly(g["cFruit"] / 1e3),
        "fruit_harvest_ch2o_g_m2_h": hourly(3.6 * g["mcFruitHar"]),
    }
    n = len(h["t_out_c"])
    hour = np.arange(n)
    table = pd.DataFrame({"hour": hour, "day_of_year": (START_DOY - 1 + hour // 24) % 365 + 1,
                          "hour_of_day": hour % 24, **h})
    assert list(table.columns) == list(HOURLY_COLUMNS), "HOURLY_COLUMNS must describe every column"
    decimals = {"vp_out_kpa": 4, "vent_m3_m2_s": 6, "co2_dose_mg_m2_s": 4, "lamp_frac": 4,
                "light_period_frac": 3, "screen_closure": 3, "vent_opening": 4, "lai": 4,
                "fruit_harvest_ch2o_g_m2_h": 4}
    return table.round({k: decimals.get(k, 2) for k in h})


def _run_all(days: float, jobs: int, cache: Path | None) -> dict[str, Run]:
    """All scenarios, ``jobs`` at a time (separate processes: GreenLight runs on one core each)."""
    if jobs <= 1:
        return {s.name: _cached(s, days, cache) for s in SCENARIOS}
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        futures = {s.name: pool.submit(_cached, s, days, cache, jobs) for s in SCENARIOS}
        return {name: fut.result() for name, fut in futures.items()}


def _rounded(x: Any, digits: int = 6) -> Any:
    """JSON numbers with ``digits`` significant figures: stable diffs, no float noise (below 1e-9: 0)."""
    if isinstance(x, dict):
        return {k: _rounded(v, digits) for k, v in x.items()}
    if isinstance(x, float):
        return 0.0 if abs(x) < 1e-9 else round(x, digits - 1 - math.floor(math.log10(abs(x))))
    return x


def _solver_options() -> dict[str, str]:
    """GreenLight's own solver settings, which the runs keep (the model files set only t_start, t_end)."""
    options = greenlight.GreenLight().options
    return {k: options[k] for k in ("solving_method", "solver", "rtol", "atol", "max_step", "interpolation")}


def report(runs: Mapping[str, Run], days: float) -> dict[str, Any]:
    """The JSON document: scenarios, marginals, GreenLight's parameters, provenance."""
    consts = runs["shipped"][1]
    summaries = {name: summarise(frame, consts_s) for name, (frame, consts_s, _) in runs.items()}
    command = "python bench/reference/greenlight_reference.py"
    if days != DEFAULT_DAYS:
        command += f" --days {days:g}"
    return {
        "notes": list(NOTES),
        "hourly_columns": HOURLY_COLUMNS,
        "scenarios": {s.name: {"label": s.label, "how": s.how, **summaries[s.name]} for s in SCENARIOS},
        "marginal": marginals(summaries),
        "lamp": {
            "type": "LED (GreenLight's default toplights; no interlights)",
            "power_w_m2": consts["thetaLampMax"],
            "efficacy_umol_par_per_j": consts["etaLampPar"] * consts["zetaLampPar"],
            "par_fraction": consts["etaLampPar"],
            "nir_fraction": consts["etaLampNir"],
            "heat_fraction": 1 - consts["etaLampPar"] - consts["etaLampNir"],
            "cooling_fraction": consts["etaLampCool"],
            "par_umol_per_j_par": consts["zetaLampPar"],
            "window_on_h": consts["lampTimeOn"],
            "window_off_h": consts["lampTimeOff"],
            "off_above_global_rad_w_m2": consts["lampsOffSun"],
            "off_above_daily_sun_mj_m2": consts["lampRadSumLimit"],
        },
        "setpoints": {
            "heating_day_c": consts["tSpDay"],
            "heating_night_c": consts["tSpNight"],
            "vent_above_heating_c": consts["heatDeadZone"],
            "co2_day_ppm": consts["co2SpDay"],
            "co2_night_ppm": 0.0,
            "rh_max_pct": consts["rhMax"],
            "screen_closed_below_outside_day_c": consts["thScrSpDay"],
            "screen_closed_below_outside_night_c": consts["thScrSpNight"],
            "boiler_capacity_w_m2": consts["pBoil"] / consts["aFlr"],
            "co2_capacity_mg_m2_s": consts["phiExtCo2"] / consts["aFlr"],
        },
        "conversions": {
            "fruit_dry_matter_content": DMC,
            "fruit_variable": "cFruit, mcFruitHar (mg CH2O m-2, as dry matter)",
            "sun_par_umol_per_j": consts["parJtoUmolSun"],
        },
        "provenance": {
            "package": PACKAGE,
            "version": greenlight.__version__,
            "model": MODEL,
            "weather": WEATHER,
            "weather_sha256": hashlib.sha256((resources.files(PACKAGE) / WEATHER).read_bytes()).hexdigest(),
            "start": START,
            "end": (dt.datetime.fromisoformat(START) + dt.timedelta(days=days)).isoformat(timespec="minutes"),
            "days": days,
            "sample_s": SAMPLE_S,
            "solver_options": _solver_options(),
            "command": command,
            "wall_s": {name: round(t["wall_s"]) for name, (_, _, t) in runs.items()},
            "cpu_s": {name: round(t["cpu_s"]) for name, (_, _, t) in runs.items()},
            "scenarios_side_by_side": max(int(t.get("jobs", 1)) for _, _, t in runs.values()),
        },
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--days", type=float, default=DEFAULT_DAYS, help="simulated days from 20 October")
    parser.add_argument("--jobs", type=int, default=1, help="scenarios run at once (one core each)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="keep/reuse the sampled runs here")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="where the tables go")
    args = parser.parse_args(argv)

    runs = _run_all(args.days, args.jobs, args.cache_dir)
    doc = report(runs, args.days)

    args.out.mkdir(parents=True, exist_ok=True)
    hourly_table(runs["shipped"][0], runs["shipped"][1]).to_csv(args.out / "greenlight_bleiswijk_hourly.csv",
                                                                 index=False)
    lamps = pd.DataFrame({"hour": np.arange(int(args.days * 24))})
    for s in SCENARIOS:
        lamps[f"lamp_frac_{s.name}"] = hourly(runs[s.name][0]["uLamp"].to_numpy()).round(4)
    lamps.to_csv(args.out / "greenlight_bleiswijk_hourly_lamps.csv", index=False)
    (args.out / "greenlight_bleiswijk.json").write_text(json.dumps(_rounded(doc), indent=2) + "\n")
    print(json.dumps(_rounded(doc["marginal"]), indent=2))


if __name__ == "__main__":
    main()

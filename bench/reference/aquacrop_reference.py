"""AquaCrop reference runs for the twin's wet- and dry-side water stress: tomato, one dry season, four
regimes.

The twin's root-zone bucket takes its dry-side stress from FAO-56 and its wet-side (aeration) stress from
FAO's AquaCrop. This script runs AquaCrop itself, through its Python port AquaCrop-OSPy, so the twin can
be driven with the same daily ET0, rain and irrigation and compared day by day:

    pip install aquacrop==3.1.0
    python bench/reference/aquacrop_reference.py

Setup: AquaCrop's own Tomato crop (transplanted 1 April, 110-day season) on its shipped Tunis weather
file, season 1995: 35.5 mm of rain against 568.5 mm of reference ET over the season, and a highest
maximum temperature of 36.3 degC, under the tomato's 40 degC pollination limit, so irrigation decides
the outcome and heat does not. One homogeneous soil for all scenarios, AquaCrop's built-in SandyClay
(wilting point 0.27, field capacity 0.39, saturation 0.50, Ksat 35 mm/day): it drains slowly, and its
anaerobiosis point (saturation minus the crop's Aer, 0.45) lies above field capacity, so refilling to
field capacity does not by itself count as waterlogging. (On AquaCrop's "Clay" and "SiltClay" it would:
their saturation is within 5 vol% of field capacity.) Every run starts at field capacity.

Scenarios:
  full     AquaCrop's soil-moisture-target rule: irrigate when the root zone has lost 20 % of its total
           available water, back to field capacity (at most 25 mm a day).
  deficit  the dates of ``full`` with half its depths: the root zone dries well past the stomatal
           threshold.
  excess   15 mm every day of the season (about three times the full amount): the slow soil keeps the
           root zone above the anaerobiosis point almost the whole season.
  rainfed  no irrigation.

AquaCrop computes the stomatal and aeration stress coefficients inside its transpiration step but does
not output them; the script wraps the two functions that compute them (values pass through unchanged)
and records what they return. Outputs, in tests/twin/reference/: ``aquacrop_tomato_daily.csv`` (one row
per scenario and season day) and ``aquacrop_tomato.json`` (seasonal totals, parameters, provenance).
Deterministic apart from the recorded wall time.
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock

AQUACROP_VERSION = "3.1.0"
WEATHER_FILE = "tunis_climate.txt"
CROP_NAME = "Tomato"
SOIL_NAME = "SandyClay"
SIM_START = "1995/04/01"
SIM_END = "1995/07/31"
PLANTING = "04/01"
FULL_SMT_PCT = 80.0
"""Soil-moisture target of ``full`` (% of total available water left in the root zone)."""
DEFICIT_FRACTION = 0.5
EXCESS_DAILY_MM = 15.0
COMMAND = "python bench/reference/aquacrop_reference.py"
OUT_DIR = Path(__file__).resolve().parents[2] / "tests" / "twin" / "reference"
DAILY_CSV = "aquacrop_tomato_daily.csv"
SUMMARY_JSON = "aquacrop_tomato.json"
ACTIVE_TRPOT_MM = 0.5
"""Days with less potential transpiration than this are left out of the Tr/TrPot consistency check."""

COLUMNS = (
    "scenario", "day", "date", "et0_mm", "precip_mm", "irrigation_mm", "runoff_mm", "deep_perc_mm",
    "soil_evap_mm", "theta_rz", "depletion_mm", "taw_mm", "root_depth_m", "theta_rz_stress", "tr_mm",
    "tr_pot_mm", "ks_sto_lin", "ks_sto", "ksa_aer", "aer_days", "canopy_cover", "biomass_t_ha",
)


def _require_aquacrop() -> Any:
    """Import AquaCrop-OSPy or stop with one line: the reference numbers belong to one exact version."""
    try:
        import aquacrop
    except ImportError:
        sys.exit(f"aquacrop_reference: AquaCrop-OSPy is not installed "
                 f"(pip install aquacrop=={AQUACROP_VERSION})")
    found = metadata.version("aquacrop")
    if found != AQUACROP_VERSION:
        sys.exit(f"aquacrop_reference: needs aquacrop=={AQUACROP_VERSION}, found {found}")
    return aquacrop


@dataclass(frozen=True)
class Scenario:
    name: str
    rule: str
    """How the irrigation was decided, in words (the realised depths are in the daily table)."""
    management: Callable[[], Any]
    """Builds a fresh ``IrrigationManagement`` (AquaCrop mutates it during a run)."""


@contextmanager
def _stress_probe(days: list[dict[str, float]]) -> Iterator[None]:
    """Record the stomatal and aeration stress coefficients AquaCrop computes but never outputs.

    ``solution/transpiration.py`` calls ``water_stress`` and then ``aeration_stress`` exactly once per
    growing-season day; the wrappers return what the originals return, so the run is unchanged.
    """
    import aquacrop.solution.transpiration as tr

    water_stress, aeration_stress = tr.water_stress, tr.aeration_stress

    def water(*args: Any) -> Any:
        out = water_stress(*args)
        days.append({"ks_sto": float(out[1]), "ks_sto_lin": float(out[4])})
        return out

    def aeration(aer_days: float, lag_aer: float, th_rz: Any) -> Any:
        ksa, new_days = aeration_stress(aer_days, lag_aer, th_rz)
        days[-1].update(ksa_aer=float(ksa), aer_days=float(new_days), theta_rz_stress=float(th_rz.Act),
                        theta_aer=float(th_rz.Aer), theta_sat=float(th_rz.S))
        return ksa, new_days

    with mock.patch.object(tr, "water_stress", water), mock.patch.object(tr, "aeration_stress", aeration):
        yield


def _weather() -> Any:
    """The shipped weather file as AquaCrop reads it (Date, MinTemp, MaxTemp, Precipitation, ReferenceET)."""
    from aquacrop.utils import get_filepath, prepare_weather

    return prepare_weather(get_filepath(WEATHER_FILE))


def _run(ac: Any, weather: Any, management: Any) -> tuple[Any, list[dict[str, float]]]:
    """One season of AquaCrop; returns the finished model and the probed stress values, one per season day."""
    model = ac.AquaCropModel(SIM_START, SIM_END, weather, ac.Soil(SOIL_NAME),
                             ac.Crop(CROP_NAME, planting_date=PLANTING),
                             ac.InitialWaterContent(value=["FC"]), irrigation_management=management)
    days: list[dict[str, float]] = []
    with _stress_probe(days):
        model.run_model(till_termination=True)
    return model, days


def _r(x: float, nd: int = 6) -> float:
    """Round for the committed files (same digits on every run; -0.0 written as 0.0)."""
    v = round(float(x), nd)
    return 0.0 if v == 0.0 else v


def _daily_rows(name: str, model: Any, probed: list[dict[str, float]], weather: Any) -> list[dict[str, Any]]:
    """One row per growing-season day: AquaCrop's outputs, the probed coefficients, end-of-day root zone."""
    import pandas as pd
    from aquacrop.solution.root_zone_water import root_zone_water

    flux, growth, storage = model.get_water_flux(), model.get_crop_growth(), model.get_water_storage()
    season = storage.index[storage["growing_season"] == 1]
    if len(season) != len(probed):
        raise RuntimeError(f"{name}: {len(season)} season days but {len(probed)} stress records")
    soil, crop = model._param_struct.Soil, model._param_struct.Seasonal_Crop_List[0]
    th_cols = [c for c in storage.columns if c.startswith("th")]
    met = weather.set_index("Date")
    start = pd.Timestamp(SIM_START.replace("/", "-"))
    rows = []
    for i, p in zip(season, probed, strict=True):
        step = int(flux.at[i, "time_step_counter"])
        date = start + pd.Timedelta(days=step)
        z_root = float(growth.at[i, "z_root"])
        rz = root_zone_water(soil.Profile, z_root, storage.loc[i, th_cols].to_numpy(dtype=float),
                             soil.z_top, float(crop.Zmin), crop.Aer)
        depth = round(max(z_root, float(crop.Zmin)), 2)
        rows.append({
            "scenario": name, "day": int(flux.at[i, "dap"]), "date": date.strftime("%Y-%m-%d"),
            "et0_mm": _r(met.at[date, "ReferenceET"]), "precip_mm": _r(met.at[date, "Precipitation"]),
            "irrigation_mm": _r(flux.at[i, "IrrDay"]), "runoff_mm": _r(flux.at[i, "Runoff"]),
            "deep_perc_mm": _r(flux.at[i, "DeepPerc"]), "soil_evap_mm": _r(flux.at[i, "Es"]),
            "theta_rz": _r(flux.at[i, "Wr"] / (1000.0 * depth)), "depletion_mm": _r(rz[2]),
            "taw_mm": _r(rz[4]),
            "root_depth_m": _r(z_root), "theta_rz_stress": _r(p["theta_rz_stress"]),
            "tr_mm": _r(flux.at[i, "Tr"]), "tr_pot_mm": _r(flux.at[i, "TrPot"]),
            "ks_sto_lin": _r(p["ks_sto_lin"]), "ks_sto": _r(p["ks_sto"]), "ksa_aer": _r(p["ksa_aer"]),
            "aer_days": int(p["aer_days"]), "canopy_cover": _r(growth.at[i, "canopy_cover"]),
            "biomass_t_ha": _r(growth.at[i, "biomass"] / 100.0),
        })
    return rows


def _summary(rule: str, model: Any, rows: list[dict[str, Any]],
             probed: list[dict[str, float]]) -> dict[str, Any]:
    """Seasonal totals and stress-day counts of one scenario, with AquaCrop's own yield names."""
    final = model.get_simulation_results().iloc[0]
    growth = model.get_crop_growth()
    last = growth.index[model.get_water_storage()["growing_season"] == 1][-1]

    def total(key: str) -> float:
        return _r(sum(r[key] for r in rows), 3)

    above = sum(1 for p in probed if p["theta_rz_stress"] > p["theta_aer"])
    active = [(r["tr_mm"] / r["tr_pot_mm"], min(r["ks_sto_lin"], r["ksa_aer"]))
              for r in rows if r["tr_pot_mm"] >= ACTIVE_TRPOT_MM]
    return {
        "irrigation_rule": rule,
        "season_days": len(rows),
        "harvest_date": str(final["Harvest Date (YYYY/MM/DD)"])[:10],
        "seasonal_irrigation_mm": total("irrigation_mm"),
        "irrigation_events": sum(1 for r in rows if r["irrigation_mm"] > 0),
        "seasonal_precipitation_mm": total("precip_mm"),
        "seasonal_et0_mm": total("et0_mm"),
        "seasonal_transpiration_mm": total("tr_mm"),
        "seasonal_potential_transpiration_mm": total("tr_pot_mm"),
        "seasonal_soil_evaporation_mm": total("soil_evap_mm"),
        "deep_percolation_mm": total("deep_perc_mm"),
        "runoff_mm": total("runoff_mm"),
        "days_above_anaerobiosis_point": above,
        "days_with_aeration_stress": sum(1 for r in rows if r["ksa_aer"] < 1.0),
        "min_ksa_aer": min(r["ksa_aer"] for r in rows),
        "days_with_stomatal_stress": sum(1 for r in rows if r["ks_sto_lin"] < 1.0),
        "min_ks_sto_lin": min(r["ks_sto_lin"] for r in rows),
        "max_abs_tr_ratio_minus_min_ks": _r(max((abs(a - b) for a, b in active), default=0.0), 4),
        "final_biomass_t_ha": _r(growth.at[last, "biomass"] / 100.0, 4),
        "harvest_index_adj": _r(growth.at[last, "harvest_index_adj"], 4),
        "dry_yield_t_ha": _r(final["Dry yield (tonne/ha)"], 4),
        "fresh_yield_t_ha": _r(final["Fresh yield (tonne/ha)"], 4),
        "yield_potential_t_ha": _r(final["Yield potential (tonne/ha)"], 4),
    }


def _relative(summaries: dict[str, dict[str, Any]]) -> None:
    """Add each scenario's yields and transpiration as fractions of the ``full`` scenario's."""
    ref = summaries["full"]
    pairs = {"dry_yield": "dry_yield_t_ha", "fresh_yield": "fresh_yield_t_ha",
             "biomass": "final_biomass_t_ha", "transpiration": "seasonal_transpiration_mm"}
    for s in summaries.values():
        s["relative_to_full"] = {k: _r(s[v] / ref[v], 4) for k, v in pairs.items()}


def _crop_params(model: Any) -> dict[str, Any]:
    """The tomato parameters the runs used (after AquaCrop's own initialisation), stress ones first."""
    c = model._param_struct.Seasonal_Crop_List[0]
    co2 = model._param_struct.CO2
    names = ("Aer", "LagAer", "ETadj", "WP", "WPy", "HI0", "dHI0", "YldWC", "Kcb", "CCx", "fage", "Zmin",
             "Zmax", "SxTopQ", "SxBotQ", "SxTop", "SxBot", "fshape_ex", "fshape_r", "PlantMethod",
             "PlantPop", "CalendarType", "EmergenceCD", "MaxRootingCD", "MaxCanopyCD", "SenescenceCD",
             "HIstartCD", "YldFormCD", "FloweringCD", "MaturityCD", "Tbase", "Tupp", "Tmax_up", "Tmin_up",
             "TrColdStress", "Determinant", "CropType")
    out: dict[str, Any] = {"name": c.Name, "source": f"aquacrop.entities.crops.crop_params['{CROP_NAME}'] "
                                                     "over aquacrop.entities.crop.Crop defaults"}
    out.update({n: _r(getattr(c, n), 6) for n in names})
    order = ("expansion", "stomata", "senescence", "pollination")
    for key in ("p_up", "p_lo", "fshape_w"):
        out[key] = {o: _r(v) for o, v in zip(order, getattr(c, key), strict=True)}
    out["fCO2"] = _r(c.fCO2)
    out["co2_ppm"] = _r(co2.current_concentration, 3)
    out["co2_ref_ppm"] = _r(co2.ref_concentration, 3)
    out["units"] = {"Aer": "vol % below saturation", "LagAer": "days", "WP": "g/m2 (normalised for ET0, CO2)",
                    "WPy": "% of WP during yield formation", "YldWC": "% water in fresh yield",
                    "Zmin/Zmax": "m", "SxTop/SxBot": "m3/m3/day", "*CD": "calendar days after planting"}
    return out


def _soil_params(model: Any, aer_pct: float) -> dict[str, Any]:
    """Layers and compartments of the soil the runs used, with the derived anaerobiosis point."""
    soil = model._param_struct.Soil
    prof = soil.profile
    layers = []
    for _, g in prof.groupby("Layer", sort=True):
        top = g.iloc[0]
        layers.append({"thickness_m": _r(g["dz"].sum()), "th_wp": _r(top["th_wp"]), "th_fc": _r(top["th_fc"]),
                       "th_s": _r(top["th_s"]), "th_dry": _r(top["th_dry"]), "ksat_mm_day": _r(top["Ksat"]),
                       "tau": _r(top["tau"]), "penetrability_pct": _r(top["penetrability"]),
                       "theta_anaerobiosis": _r(top["th_s"] - aer_pct / 100.0),
                       "taw_mm_per_m": _r(1000.0 * (top["th_fc"] - top["th_wp"]), 3)})
    return {"name": SOIL_NAME, "layers": layers, "compartments_dz_m": [_r(x) for x in prof["dz"]],
            "profile_depth_m": _r(soil.zSoil), "z_top_m": _r(soil.z_top), "rew_mm": _r(soil.rew),
            "curve_number": _r(soil.cn), "initial_water_content": "FC (every compartment)"}


def _full(ac: Any) -> Scenario:
    """Irrigation that keeps the root zone between field capacity and well inside its readily available
    water."""
    return Scenario("full", f"soil-moisture target: irrigate to field capacity (at most 25 mm) "
                            f"whenever the root "
                            f"zone holds less than {FULL_SMT_PCT:g} % of its total available water",
                    lambda: ac.IrrigationManagement(1, SMT=[FULL_SMT_PCT] * 4))


def _others(ac: Any, full_schedule: Any) -> list[Scenario]:
    """The other regimes as fixed dated schedules; ``deficit`` reuses the dates ``full`` irrigated on."""
    import pandas as pd

    dates = pd.date_range(SIM_START.replace("/", "-"), SIM_END.replace("/", "-"))
    excess = pd.DataFrame({"Date": dates, "Depth": [EXCESS_DAILY_MM] * len(dates)})
    deficit = full_schedule.assign(Depth=full_schedule["Depth"] * DEFICIT_FRACTION)
    return [
        Scenario("deficit", f"dated schedule: the dates of 'full', {DEFICIT_FRACTION:g} x its depths",
                 lambda: ac.IrrigationManagement(3, Schedule=deficit, MaxIrr=1000.0)),
        Scenario("excess", f"dated schedule: {EXCESS_DAILY_MM:g} mm every day of the season",
                 lambda: ac.IrrigationManagement(3, Schedule=excess, MaxIrr=1000.0)),
        Scenario("rainfed", "no irrigation", lambda: ac.IrrigationManagement(0)),
    ]


def _realised_schedule(rows: list[dict[str, Any]]) -> Any:
    """The dated depths a run actually applied, as AquaCrop's schedule table (Date, Depth)."""
    import pandas as pd

    wet = [r for r in rows if r["irrigation_mm"] > 0]
    return pd.DataFrame({"Date": pd.to_datetime([r["date"] for r in wet]),
                         "Depth": [r["irrigation_mm"] for r in wet]})


def _simulate(ac: Any, weather: Any, scen: Scenario) -> tuple[Any, list[dict[str, Any]], dict[str, Any]]:
    """Run one scenario: the finished model, its daily rows and its seasonal summary."""
    model, probed = _run(ac, weather, scen.management())
    rows = _daily_rows(scen.name, model, probed, weather)
    return model, rows, _summary(scen.rule, model, rows, probed)


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    """Plain CSV with "\\n" line ends, so the committed file is the same bytes on every platform."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main() -> int:
    """Run ``full`` first (``deficit`` reuses its dates), then the rest; write the table and the summary."""
    t0 = time.perf_counter()
    ac = _require_aquacrop()
    from aquacrop.utils import get_filepath

    weather = _weather()
    model, all_rows, first = _simulate(ac, weather, _full(ac))
    summaries = {"full": first}
    for scen in _others(ac, _realised_schedule(all_rows)):
        _, rows, summaries[scen.name] = _simulate(ac, weather, scen)
        all_rows.extend(rows)
    _relative(summaries)

    crop = _crop_params(model)
    weather_path = Path(get_filepath(WEATHER_FILE))
    doc = {
        "scenarios": summaries,
        "crop": crop,
        "soil": _soil_params(model, crop["Aer"]),
        "provenance": {
            "package": "aquacrop (AquaCrop-OSPy)", "version": metadata.version("aquacrop"),
            "weather_file": f"aquacrop/data/{WEATHER_FILE}",
            "weather_sha256": hashlib.sha256(weather_path.read_bytes()).hexdigest(),
            "site_season": "Tunis 1995, 1 Apr - 19 Jul: 35.5 mm rain, 568.5 mm ET0, Tmax <= 36.3 degC",
            "crop": CROP_NAME, "soil": SOIL_NAME, "planting_date": SIM_START, "simulation_end": SIM_END,
            "stress_coefficients": "ks_sto_lin, ks_sto, ksa_aer, aer_days and theta_rz_stress are the "
                                   "values returned inside aquacrop/solution/transpiration.py by "
                                   "water_stress() and aeration_stress(), recorded by wrapping them",
            "command": COMMAND,
            "wall_time_s": _r(time.perf_counter() - t0, 2),
        },
    }
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    _write_csv(OUT_DIR / DAILY_CSV, all_rows)
    (OUT_DIR / SUMMARY_JSON).write_text(json.dumps(doc, indent=2) + "\n")
    for name, s in summaries.items():
        print(f"{name:8s} irr {s['seasonal_irrigation_mm']:7.1f} mm  Tr {s['seasonal_transpiration_mm']:6.1f}"
              f"/{s['seasonal_potential_transpiration_mm']:6.1f} mm  "
              f"aer days {s['days_with_aeration_stress']:3d}"
              f"  dry yield {s['dry_yield_t_ha']:6.3f} t/ha "
              f"({s['relative_to_full']['dry_yield']:.3f} of full)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

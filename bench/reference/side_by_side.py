"""The twin beside GreenLight and AquaCrop on the committed reference tables, as markdown tables.

Needs neither reference model installed: it reads ``tests/twin/reference/`` (written by
``greenlight_reference.py`` and ``aquacrop_reference.py`` beside this file) and drives the twin on
the same inputs (:mod:`twin.reference_drive`). From the repository root::

    python bench/reference/side_by_side.py

``docs/twin-fidelity.md`` quotes its output.
"""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from twin.config import ClimateConfig, CropConfig  # noqa: E402
from twin.reference_drive import RootZoneSoil, drive_aquacrop, drive_greenlight, fit_daily_drainage  # noqa: E402

REFERENCE = ROOT / "tests" / "twin" / "reference"
SCENARIOS = ("shipped", "no_lamps", "short_window")
GREENLIGHT_ROWS = (
    ("air temperature, light period [degC]", "t_air_day_c", "{:.1f}"),
    ("air temperature, dark period [degC]", "t_air_night_c", "{:.1f}"),
    ("relative humidity, mean [%]", "rh_air_pct", "{:.1f}"),
    ("CO2, light period [ppm]", "co2_day_ppm", "{:.0f}"),
    ("CO2, dark period [ppm]", "co2_night_ppm", "{:.0f}"),
    ("heating [kWh/m2]", "heating_kwh_m2", "{:.1f}"),
    ("CO2 dosed [kg/m2]", "co2_dosed_kg_m2", "{:.2f}"),
    ("lamp electricity [kWh/m2]", "lamp_kwh_m2", "{:.1f}"),
    ("PAR above the canopy, sun [mol/m2]", "par_sun_mol_m2", "{:.0f}"),
    ("PAR above the canopy, lamps [mol/m2]", "par_lamp_mol_m2", "{:.0f}"),
    ("net fruit growth [kg FW/m2]", "fruit_net_growth_fw_kg_m2", "{:.2f}"),
    ("harvest [kg FW/m2]", "fruit_harvest_fw_kg_m2", "{:.2f}"),
    ("LAI at the end [-]", "lai_end", "{:.2f}"),
)


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


def greenlight_table() -> str:
    """GreenLight vs the twin per scenario, then the marginal quantities."""
    summary = json.loads((REFERENCE / "greenlight_bleiswijk.json").read_text())
    rows = _read_csv(REFERENCE / "greenlight_bleiswijk_hourly.csv")
    hours = {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}
    lamp_rows = _read_csv(REFERENCE / "greenlight_bleiswijk_hourly_lamps.csv")
    lamps = [np.array([float(r[f"lamp_frac_{s}"]) for r in lamp_rows]) for s in SCENARIOS]
    climate = ClimateConfig(lamp_type="led", lamp_power_w_m2=summary["lamp"]["power_w_m2"])
    twin = {s: d.as_dict() for s, d in zip(SCENARIOS, drive_greenlight(hours, lamps, climate), strict=True)}
    ref = summary["scenarios"]
    out = ["| quantity | " + " | ".join(f"GreenLight {s} | twin {s}" for s in SCENARIOS) + " |",
           "|---|" + "---|---|" * len(SCENARIOS)]
    for label, key, fmt in GREENLIGHT_ROWS:
        cells = []
        for s in SCENARIOS:
            cells += [fmt.format(ref[s][key]), fmt.format(twin[s][key])]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    a, b, c = (twin[s] for s in SCENARIOS)
    m = summary["marginal"]

    def per_kwh(x: dict[str, float], key: str, sign: float = 1.0) -> float:
        return sign * (x[key] - b[key]) / x["lamp_kwh_m2"]

    per_mol = 1e3 * a["fruit_net_growth_fw_kg_m2"] / (a["par_sun_mol_m2"] + a["par_lamp_mol_m2"])
    out += ["", "| marginal quantity | GreenLight | twin |", "|---|---|---|",
            f"| fresh fruit per mol PAR above the canopy, (a) [g] | {ref['shipped']['fruit_fw_g_per_mol_par']:.2f} | "
            f"{per_mol:.2f} |",
            f"| fresh fruit per lamp kWh, (a) vs (b) [kg] | {m['fruit_fw_kg_per_lamp_kwh_a_vs_b']:.3f} | "
            f"{per_kwh(a, 'fruit_net_growth_fw_kg_m2'):.3f} |",
            f"| fresh fruit per lamp kWh, (c) vs (b) [kg] | {m['fruit_fw_kg_per_lamp_kwh_c_vs_b']:.3f} | "
            f"{per_kwh(c, 'fruit_net_growth_fw_kg_m2'):.3f} |",
            f"| boiler heat saved per lamp kWh, (a) vs (b) [kWh] | {m['heating_kwh_saved_per_lamp_kwh_a_vs_b']:.2f} | "
            f"{per_kwh(a, 'heating_kwh_m2', -1.0):.2f} |",
            f"| boiler heat saved per lamp kWh, (c) vs (b) [kWh] | {m['heating_kwh_saved_per_lamp_kwh_c_vs_b']:.2f} | "
            f"{per_kwh(c, 'heating_kwh_m2', -1.0):.2f} |"]
    return "\n".join(out)


def aquacrop_table() -> str:
    """AquaCrop vs the twin's root zone per irrigation regime (AquaCrop's p, drainage fitted on excess)."""
    summary = json.loads((REFERENCE / "aquacrop_tomato.json").read_text())
    days: dict[str, list[dict[str, float]]] = {}
    for row in _read_csv(REFERENCE / "aquacrop_tomato_daily.csv"):
        days.setdefault(row["scenario"], []).append(
            {k: float(v) for k, v in row.items() if k not in ("scenario", "date")})
    layer = summary["soil"]["layers"][0]
    soil = RootZoneSoil(field_capacity=layer["th_fc"], wilting_point=layer["th_wp"], saturation=layer["th_s"])
    crop = CropConfig()
    drain = fit_daily_drainage(days["excess"], soil, crop, 0.5, float(np.mean([d["theta_rz"] for d in days["excess"]])))
    out = [f"Bucket drainage fitted on the excess run: {drain:.3f} of the water above field capacity a day.", "",
           "| regime | irrigation [mm] | AquaCrop Tr [mm] | twin Tr [mm] | twin Tr, FAO-56 p 0.40 [mm] | AquaCrop mean "
           "theta | twin mean theta | AquaCrop aeration days | twin aeration days | AquaCrop dry yield / full | twin Tr / full "
           "(its assimilation factor) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    full_tr = drive_aquacrop(days["full"], soil, crop, 0.5, drain)["transpiration_mm"]
    for name in ("full", "deficit", "excess", "rainfed"):
        ref = summary["scenarios"][name]
        twin = drive_aquacrop(days[name], soil, crop, 0.5, drain)
        fao = drive_aquacrop(days[name], soil, crop, crop.depletion_fraction, drain)
        aq_theta = float(np.mean([d["theta_rz"] for d in days[name]]))
        out.append(f"| {name} | {ref['seasonal_irrigation_mm']:.0f} | {ref['seasonal_transpiration_mm']:.0f} | "
                   f"{twin['transpiration_mm']:.0f} | {fao['transpiration_mm']:.0f} | {aq_theta:.3f} | "
                   f"{twin['mean_theta']:.3f} | {ref['days_with_aeration_stress']} | {twin['aeration_days']} | "
                   f"{ref['relative_to_full']['dry_yield']:.2f} | {twin['transpiration_mm'] / full_tr:.2f} |")
    return "\n".join(out)


def main() -> int:
    print("## GreenLight (Bleiswijk, 60 days from 20 October 2009)\n")
    print(greenlight_table())
    print("\n## AquaCrop (Tomato, SandyClay, Tunis 1995)\n")
    print(aquacrop_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

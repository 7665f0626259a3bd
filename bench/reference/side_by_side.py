"""The twin beside GreenLight and AquaCrop on the committed reference tables, as markdown tables.

Needs neither reference model installed: it reads ``tests/twin/reference/`` (written by
``greenlight_reference.py`` and ``aquacrop_reference.py`` beside this file) and drives the twin on
the same inputs (:mod:`twin.reference_drive`). From the repository root::

    python bench/reference/side_by_side.py

``docs/twin-fidelity.md`` quotes its output.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from twin.config import CropConfig  # noqa: E402
from twin.reference_drive import drive_aquacrop, fit_daily_drainage  # noqa: E402
from twin.reference_tables import (  # noqa: E402
    AQUACROP_REGIMES,
    GREENLIGHT_SCENARIOS,
    AquaCropTables,
    GreenLightTables,
    marginals,
)

REFERENCE = ROOT / "tests" / "twin" / "reference"
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


MARGINAL_ROWS = (
    ("fresh fruit per mol PAR above the canopy, (a) [g]", "fruit_fw_g_per_mol_par", "{:.2f}"),
    ("fresh fruit per lamp kWh, (a) vs (b) [kg]", "fruit_fw_kg_per_lamp_kwh_a_vs_b", "{:.3f}"),
    ("fresh fruit per lamp kWh, (c) vs (b) [kg]", "fruit_fw_kg_per_lamp_kwh_c_vs_b", "{:.3f}"),
    ("boiler heat saved per lamp kWh, (a) vs (b) [kWh]", "heating_kwh_saved_per_lamp_kwh_a_vs_b", "{:.2f}"),
    ("boiler heat saved per lamp kWh, (c) vs (b) [kWh]", "heating_kwh_saved_per_lamp_kwh_c_vs_b", "{:.2f}"),
)


def greenlight_table() -> str:
    """GreenLight vs the twin per scenario, then the marginal quantities."""
    tables = GreenLightTables.read(REFERENCE)
    runs = tables.drive_twin()
    out = ["| quantity | " + " | ".join(f"GreenLight {s} | twin {s}" for s in GREENLIGHT_SCENARIOS) + " |",
           "|---|" + "---|---|" * len(GREENLIGHT_SCENARIOS)]
    for label, key, fmt in GREENLIGHT_ROWS:
        cells = []
        for s in GREENLIGHT_SCENARIOS:
            cells += [fmt.format(tables.reference(s, key)), fmt.format(getattr(runs[s], key))]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    reference = {**tables.summary["marginal"],
                 "fruit_fw_g_per_mol_par": tables.reference("shipped", "fruit_fw_g_per_mol_par")}
    twin = marginals(runs)
    out += ["", "| marginal quantity | GreenLight | twin |", "|---|---|---|"]
    out += [f"| {label} | {fmt.format(reference[key])} | {fmt.format(twin[key])} |"
            for label, key, fmt in MARGINAL_ROWS]
    return "\n".join(out)


def aquacrop_table() -> str:
    """AquaCrop vs the twin's root zone per irrigation regime (AquaCrop's p, drainage fitted on excess)."""
    tables = AquaCropTables.read(REFERENCE)
    days, soil, crop = tables.days, tables.soil, CropConfig()
    drain = fit_daily_drainage(days["excess"], soil, crop, 0.5, tables.mean_theta("excess"))
    out = [f"Bucket drainage fitted on the excess run: {drain:.3f} of the water above field capacity a day.",
           "",
           "| regime | irrigation [mm] | AquaCrop Tr [mm] | twin Tr [mm] | twin Tr, FAO-56 p 0.40 [mm] | "
           "AquaCrop mean "
           "theta | twin mean theta | AquaCrop aeration days | twin aeration days | "
           "AquaCrop dry yield / full | twin Tr / full "
           "(its assimilation factor) |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    full_tr = drive_aquacrop(days["full"], soil, crop, 0.5, drain)["transpiration_mm"]
    for name in AQUACROP_REGIMES:
        ref = tables.summary["scenarios"][name]
        twin = drive_aquacrop(days[name], soil, crop, 0.5, drain)
        fao = drive_aquacrop(days[name], soil, crop, crop.depletion_fraction, drain)
        out.append(f"| {name} | {ref['seasonal_irrigation_mm']:.0f} | "
                   f"{ref['seasonal_transpiration_mm']:.0f} | "
                   f"{twin['transpiration_mm']:.0f} | {fao['transpiration_mm']:.0f} | "
                   f"{tables.mean_theta(name):.3f} | "
                   f"{twin['mean_theta']:.3f} | {ref['days_with_aeration_stress']} | "
                   f"{twin['aeration_days']} | "
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

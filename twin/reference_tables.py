"""The committed reference tables, read once, and the twin's run on each beside them.

``bench/reference/greenlight_reference.py`` and ``aquacrop_reference.py`` write the tables (the
reference models need not be installed to read them); the reference tests and
``bench/reference/side_by_side.py`` both start here, so they compare the same runs the same way.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from twin.config import ClimateConfig
from twin.reference_drive import Drive, RootZoneSoil, drive_greenlight

GREENLIGHT_SCENARIOS = ("shipped", "no_lamps", "short_window")
"""GreenLight's lamp schedules: its own (a), none (b), the window from 09:00 (c)."""
AQUACROP_REGIMES = ("full", "deficit", "excess", "rainfed")


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open() as f:
        return list(csv.DictReader(f))


@dataclass(frozen=True)
class GreenLightTables:
    summary: dict[str, Any]
    """``greenlight_bleiswijk.json``: per-scenario summaries, marginals, lamp, setpoints, provenance."""
    hours: dict[str, np.ndarray]
    """``greenlight_bleiswijk_hourly.csv`` by column: weather and GreenLight's climate, scenario (a)."""
    lamps: dict[str, np.ndarray]
    """``greenlight_bleiswijk_hourly_lamps.csv`` by column: the lamps' fraction per hour per scenario."""

    @classmethod
    def read(cls, folder: Path) -> GreenLightTables:
        def columns(name: str) -> dict[str, np.ndarray]:
            rows = _rows(folder / name)
            return {k: np.array([float(r[k]) for r in rows]) for k in rows[0]}

        return cls(json.loads((folder / "greenlight_bleiswijk.json").read_text()),
                   columns("greenlight_bleiswijk_hourly.csv"),
                   columns("greenlight_bleiswijk_hourly_lamps.csv"))

    def reference(self, scenario: str, key: str) -> float:
        return float(self.summary["scenarios"][scenario][key])

    def drive_twin(self) -> dict[str, Drive]:
        """The twin on every scenario's lamps, at GreenLight's lamp power and type."""
        climate = ClimateConfig(lamp_type="led", lamp_power_w_m2=self.summary["lamp"]["power_w_m2"])
        drives = drive_greenlight(self.hours, [self.lamps[f"lamp_frac_{s}"] for s in GREENLIGHT_SCENARIOS],
                                  climate)
        return dict(zip(GREENLIGHT_SCENARIOS, drives, strict=True))


def marginals(runs: dict[str, Drive]) -> dict[str, float]:
    """The lamp's marginal quantities of a twin run, named as GreenLight's ``summary["marginal"]``
    (plus fresh fruit per mol of PAR above the canopy in (a)): each lit schedule against none."""
    a, b, c = (runs[s] for s in GREENLIGHT_SCENARIOS)

    def per_lamp_kwh(lit: Drive, key: str) -> float:
        return (getattr(lit, key) - getattr(b, key)) / lit.lamp_kwh_m2

    return {"fruit_fw_kg_per_lamp_kwh_a_vs_b": per_lamp_kwh(a, "fruit_net_growth_fw_kg_m2"),
            "fruit_fw_kg_per_lamp_kwh_c_vs_b": per_lamp_kwh(c, "fruit_net_growth_fw_kg_m2"),
            "heating_kwh_saved_per_lamp_kwh_a_vs_b": -per_lamp_kwh(a, "heating_kwh_m2"),
            "heating_kwh_saved_per_lamp_kwh_c_vs_b": -per_lamp_kwh(c, "heating_kwh_m2"),
            "fruit_fw_g_per_mol_par": (1e3 * a.fruit_net_growth_fw_kg_m2
                                       / (a.par_sun_mol_m2 + a.par_lamp_mol_m2))}


@dataclass(frozen=True)
class AquaCropTables:
    summary: dict[str, Any]
    """``aquacrop_tomato.json``: per-regime season sums, crop and soil parameters, provenance."""
    days: dict[str, list[dict[str, float]]]
    """``aquacrop_tomato_daily.csv``: each regime's days, numeric columns only."""

    @classmethod
    def read(cls, folder: Path) -> AquaCropTables:
        days: dict[str, list[dict[str, float]]] = {}
        for row in _rows(folder / "aquacrop_tomato_daily.csv"):
            days.setdefault(row["scenario"], []).append(
                {k: float(v) for k, v in row.items() if k not in ("scenario", "date")})
        return cls(json.loads((folder / "aquacrop_tomato.json").read_text()), days)

    @property
    def soil(self) -> RootZoneSoil:
        layer = self.summary["soil"]["layers"][0]
        return RootZoneSoil(field_capacity=layer["th_fc"], wilting_point=layer["th_wp"],
                            saturation=layer["th_s"])

    def mean_theta(self, regime: str) -> float:
        """AquaCrop's season-mean root-zone water content [m3/m3]."""
        return float(np.mean([d["theta_rz"] for d in self.days[regime]]))

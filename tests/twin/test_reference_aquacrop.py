"""The twin's root zone against AquaCrop-OSPy (FAO's crop-water model) on AquaCrop's own run.

The reference tables come from ``python bench/reference/aquacrop_reference.py`` (AquaCrop-OSPy
3.1.0, Tomato, SandyClay, Tunis 1995; the JSON's ``provenance`` holds the command and version):
four irrigation regimes, full, deficit (half the depths), excess (15 mm every day) and rainfed.

The twin is driven with AquaCrop's daily inputs (irrigation, rain less runoff and soil
evaporation, potential transpiration of the actual canopy) at its 10-minute step, with the root
zone deepening as AquaCrop's roots do into soil at field capacity. What the twin leaves out by
design, and what that moves:

* One bucket, linear drainage above field capacity, where AquaCrop has twelve compartments and a
  non-linear drainage curve. The bucket's one drainage rate is fitted to AquaCrop's excess run
  (mean root-zone water content), as the twin's calibration fits a greenhouse's logs; the
  transpiration it then gives is the comparison. Near the anaerobiosis point transpiration moves
  steeply with the water content (Ks_aer falls to 0 over 5 vol %), so the tolerance there is 15 %.
* The dry-side threshold: the twin's tomato takes FAO-56's p = 0.40 (table 22), AquaCrop's the
  stomatal p_up = 0.50 (adjusted for ET0). The regimes are compared at AquaCrop's p to check the
  water balance and stress shapes; the twin's p is reported beside it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from twin.config import CropConfig
from twin.reference_drive import bucket_params, drive_aquacrop, fit_daily_drainage
from twin.reference_tables import AquaCropTables
from twin.soil import aeration_stress, waterlogged_days

TABLES = AquaCropTables.read(Path(__file__).parent / "reference")
SUMMARY, DAYS, SOIL = TABLES.summary, TABLES.days, TABLES.soil
CROP = CropConfig()


def drive(scenario: str, p: float, daily_drain: float) -> dict[str, float]:
    return drive_aquacrop(DAYS[scenario], SOIL, CROP, p, daily_drain)


def _fitted_drainage() -> float:
    return fit_daily_drainage(DAYS["excess"], SOIL, CROP, 0.5, TABLES.mean_theta("excess"))


def test_the_twins_aeration_stress_is_aquacrops_on_its_own_water_content() -> None:
    """Fed AquaCrop's root-zone water content day by day, the twin's Ks_aer and counter are AquaCrop's."""
    soil = bucket_params(SOIL, 1000.0, 0.5, 0.3)
    aer_days = np.array([0.0])
    checked = 0
    for day in DAYS["excess"]:
        theta = np.array([day["theta_rz_stress"]])
        ks = aeration_stress(np, soil, theta, aer_days, CROP.aeration_vol_pct, CROP.aeration_lag_days)
        aer_days = waterlogged_days(np, soil, theta, aer_days, CROP.aeration_vol_pct, CROP.aeration_lag_days,
                                    1.0)
        assert float(ks[0]) == pytest.approx(day["ksa_aer"], abs=1e-4), day
        assert float(aer_days[0]) == day["aer_days"]
        checked += day["ksa_aer"] < 1.0
    assert checked >= 100  # the excess run is waterlogged almost all season


@pytest.fixture(scope="module")
def fitted_drainage() -> float:
    return _fitted_drainage()


@pytest.mark.parametrize(("scenario", "tolerance"), [("full", 0.03), ("deficit", 0.08), ("rainfed", 0.05)])
def test_seasonal_transpiration_off_the_wet_side(scenario: str, tolerance: float,
                                                 fitted_drainage: float) -> None:
    """Where no water stays above field capacity the bucket needs no fitting: its water content
    and transpiration follow AquaCrop's (deficit within 8 %: AquaCrop's p moves with ET0)."""
    ref = SUMMARY["scenarios"][scenario]
    twin = drive(scenario, 0.5, fitted_drainage)
    assert twin["transpiration_mm"] == pytest.approx(ref["seasonal_transpiration_mm"], rel=tolerance)
    assert twin["mean_theta"] == pytest.approx(TABLES.mean_theta(scenario), abs=0.01)
    assert twin["aeration_days"] == 0


def test_waterlogging_costs_what_aquacrop_says(fitted_drainage: float) -> None:
    """Excess irrigation: with the bucket's drainage fitted to AquaCrop's water content, the twin's
    roots are short of air on as many days and transpire as much less as AquaCrop's (15 %)."""
    ref = SUMMARY["scenarios"]["excess"]
    twin = drive("excess", 0.5, fitted_drainage)
    assert twin["aeration_days"] == pytest.approx(ref["days_with_aeration_stress"], abs=12)
    assert twin["transpiration_mm"] == pytest.approx(ref["seasonal_transpiration_mm"], rel=0.15)
    full = drive("full", 0.5, fitted_drainage)["transpiration_mm"]
    assert twin["transpiration_mm"] / full < 0.9  # over-watering costs the crop, as in AquaCrop (0.79)


def test_the_twins_own_dry_threshold_stresses_sooner() -> None:
    """The twin's tomato (FAO-56 p = 0.40) feels the deficit regime a little more than AquaCrop's
    stomata (p_up 0.50): less transpiration, and never more than full irrigation gives."""
    at_aquacrop = drive("deficit", 0.5, 0.3)["transpiration_mm"]
    at_fao = drive("deficit", CROP.depletion_fraction, 0.3)["transpiration_mm"]
    assert at_fao < at_aquacrop
    assert at_fao == pytest.approx(SUMMARY["scenarios"]["deficit"]["seasonal_transpiration_mm"], rel=0.2)

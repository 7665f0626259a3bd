"""The retrain's calibration stage never hands the twin a soil it refuses: a fit that puts the
wilting point at or above the anaerobiosis point (seen on a minute-long window in the compose
stack's test) keeps the table values and says why."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from app.retraining import calibrate
from twin.calibration import CalibrationResult
from twin.config import CropConfig

LOAM_SATURATION = 0.45


def _fit(wilting_point: float, field_capacity: float) -> CalibrationResult:
    params = {"field_capacity": field_capacity, "wilting_point": wilting_point, "saturation": LOAM_SATURATION,
              "hourly_retention": 0.7, "root_mm": 300.0, "theta0": 0.4}
    return CalibrationResult(params=params, cost=0.0, residual_rmse=0.001, n_obs=20, success=True,
                             message="ok")


@pytest.fixture
def fitted(monkeypatch: pytest.MonkeyPatch) -> list[CalibrationResult]:
    """The fit returns what the list holds; the fitted parameters always beat the table's."""
    results: list[CalibrationResult] = []
    monkeypatch.setattr(calibrate, "fit_soil_parameters", lambda log, fixed: results.pop(0))
    monkeypatch.setattr(calibrate, "_fit_error",
                        lambda params, log: (0.01, 0.01) if params.get("theta0") else (0.05, 0.05))
    return results


def _window(zones: int) -> Any:
    log = SimpleNamespace(steps=20, valid=np.ones(20, dtype=bool))
    return SimpleNamespace(greenhouse_id="gh1", soils=("loam",) * zones, soil_log=lambda z: log, steps=20,
                           dt_s=2.0, skipped=0)


def test_a_wilting_point_above_the_anaerobiosis_point_keeps_the_table(
        fitted: list[CalibrationResult]) -> None:
    airless = LOAM_SATURATION - CropConfig().aeration_vol_pct * 0.01
    fitted += [_fit(wilting_point=airless + 0.03, field_capacity=airless + 0.04),  # the failing shape
               _fit(wilting_point=0.15, field_capacity=0.30)]                     # an ordinary fit
    out = calibrate.calibrate_greenhouse(_window(2))
    high, ordinary = out["zones"]
    assert not high["fitted"] and "anaerobiosis" in high["why"]
    assert ordinary["fitted"] and ordinary["why"] == ""
    (fc0, wp0, sat0, _), (fc1, wp1, _, _) = out["zone_soils"]
    assert (fc0, wp0, sat0) == (0.27, 0.12, LOAM_SATURATION)  # loam's table values
    assert (fc1, wp1) == (0.30, 0.15)
    for fc, wp, sat, ret in out["zone_soils"]:
        assert 0.0 <= wp < fc <= sat - CropConfig().aeration_vol_pct * 0.01 and 0.0 < ret < 1.0

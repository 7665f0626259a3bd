"""FAO-56 ET0: worked examples from the paper, agreement with pyet, numpy/torch parity."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
import pytest
import torch

from twin.et0 import (
    atmospheric_pressure_kpa,
    clear_sky_radiation,
    extraterrestrial_radiation_mj_m2_day,
    fao56_daily_et0,
    fao56_hourly_et0,
    greenhouse_hourly_net_radiation_mj_m2_h,
    net_longwave_radiation_mj_m2_day,
    psychrometric_constant_kpa_per_c,
    saturation_vapour_pressure_kpa,
    svp_slope_kpa_per_c,
)

# FAO-56 Example 18: Uccle (Brussels), 6 July.
UCCLE = {
    "tmax_c": 21.5,
    "tmin_c": 12.3,
    "rh_max_pct": 84.0,
    "rh_min_pct": 63.0,
    "u2_m_s": 2.078,  # 10 km/h measured at 10 m, reduced to 2 m (eq. 47)
    "rs_mj_m2_day": 22.07,  # from n = 9.25 h of sunshine (eq. 35)
    "lat_deg": 50.0 + 48.0 / 60.0,
    "elevation_m": 100.0,
    "day_of_year": 187,
}

# FAO-56 Example 19: N'Diaye (Senegal), 16°13'N, 8 m, 1 October.
NDIAYE_PRESSURE_KPA = float(atmospheric_pressure_kpa(8.0))


# ---- worked examples ---------------------------------------------------------------------
def test_example_18_uccle_intermediates() -> None:
    ra = extraterrestrial_radiation_mj_m2_day(UCCLE["lat_deg"], UCCLE["day_of_year"])
    rso = clear_sky_radiation(ra, UCCLE["elevation_m"])
    e_tmax = saturation_vapour_pressure_kpa(UCCLE["tmax_c"])
    e_tmin = saturation_vapour_pressure_kpa(UCCLE["tmin_c"])
    es = 0.5 * (e_tmax + e_tmin)
    ea = 0.5 * (e_tmin * 0.84 + e_tmax * 0.63)
    pressure = atmospheric_pressure_kpa(UCCLE["elevation_m"])
    rnl = net_longwave_radiation_mj_m2_day(UCCLE["tmax_c"], UCCLE["tmin_c"], ea, UCCLE["rs_mj_m2_day"], rso)

    assert ra == pytest.approx(41.09, abs=0.01)
    assert rso == pytest.approx(30.90, abs=0.01)
    assert e_tmax == pytest.approx(2.564, abs=0.001)
    assert e_tmin == pytest.approx(1.431, abs=0.001)
    assert es == pytest.approx(1.997, abs=0.001)
    assert ea == pytest.approx(1.409, abs=0.001)
    assert pressure == pytest.approx(100.1, abs=0.05)
    assert psychrometric_constant_kpa_per_c(pressure) == pytest.approx(0.0666, abs=0.0001)
    assert svp_slope_kpa_per_c(16.9) == pytest.approx(0.122, abs=0.001)
    assert rnl == pytest.approx(3.71, abs=0.01)
    assert 0.77 * UCCLE["rs_mj_m2_day"] - rnl == pytest.approx(13.28, abs=0.01)


def test_example_18_uccle_et0() -> None:
    et0 = fao56_daily_et0(**UCCLE)
    assert et0 == pytest.approx(3.9, abs=0.1)


def test_example_8_extraterrestrial_radiation_southern_hemisphere() -> None:
    # 20°S on 3 September (day 246).
    assert extraterrestrial_radiation_mj_m2_day(-20.0, 246) == pytest.approx(32.2, abs=0.05)


def test_example_19_hourly_day_and_night() -> None:
    assert NDIAYE_PRESSURE_KPA == pytest.approx(101.2, abs=0.05)
    day = fao56_hourly_et0(38.0, 52.0, 3.3, 1.749, 0.175, NDIAYE_PRESSURE_KPA)
    night = fao56_hourly_et0(28.0, 90.0, 1.9, -0.100, -0.050, NDIAYE_PRESSURE_KPA)
    assert day == pytest.approx(0.63, abs=0.02)
    assert night == pytest.approx(0.0, abs=0.02)
    assert night >= 0.0


def test_hourly_et0_is_clipped_at_zero() -> None:
    # Strong net loss into saturated air would give a negative value before the clip.
    assert fao56_hourly_et0(20.0, 100.0, 1.0, -0.5, 0.0, 101.3) == 0.0


def test_greenhouse_net_radiation_assumption() -> None:
    rn = np.asarray(greenhouse_hourly_net_radiation_mj_m2_h(np.array([-5.0, 0.0, 500.0])))
    # Dark (and negative sensor noise): only the 0.02 MJ/m2/h longwave floor is lost.
    np.testing.assert_allclose(rn[:2], [-0.02, -0.02])
    # 500 W/m2 = 1.8 MJ/m2/h; net shortwave 0.77 * 1.8, minus 10 % of it.
    assert rn[2] == pytest.approx(0.9 * 0.77 * 1.8, rel=1e-12)
    # At night in humid air the negative Rn must not produce a negative ET0.
    night_et0 = fao56_hourly_et0(18.0, 98.0, 0.2, rn[0], 0.0, 101.3)
    assert night_et0 == 0.0


# ---- agreement with pyet -----------------------------------------------------------------
LAT_DEG = 45.0
ELEVATION_M = 200.0


def _synthetic_year(seed: int = 20240601) -> dict[str, np.ndarray]:
    """A year of plausible mid-latitude daily weather with day-to-day noise."""
    rng = np.random.default_rng(seed)
    doy = np.arange(1, 366)
    season = np.sin(2.0 * np.pi * (doy - 105) / 365.0)
    tmean = 12.0 + 10.0 * season + rng.normal(0.0, 2.0, doy.size)
    trange = rng.uniform(6.0, 14.0, doy.size)
    rh_max = np.clip(rng.uniform(70.0, 100.0, doy.size), None, 100.0)
    rh_min = np.clip(rh_max - rng.uniform(15.0, 45.0, doy.size), 15.0, None)
    ra = np.asarray(extraterrestrial_radiation_mj_m2_day(LAT_DEG, doy))
    return {
        "doy": doy,
        "tmax": tmean + 0.5 * trange,
        "tmin": tmean - 0.5 * trange,
        "rh_max": rh_max,
        "rh_min": rh_min,
        "u2": rng.uniform(0.5, 5.0, doy.size),
        "rs": ra * rng.uniform(0.20, 0.75, doy.size),
        "rso": np.asarray(clear_sky_radiation(ra, ELEVATION_M)),
    }


def _pyet_year(w: dict[str, np.ndarray]) -> np.ndarray:
    pyet = pytest.importorskip("pyet")
    index = pd.date_range("2023-01-01", periods=365, freq="D")  # not a leap year: doy 1..365
    assert np.array_equal(index.dayofyear.to_numpy(), w["doy"])

    def series(a: np.ndarray) -> pd.Series:
        return pd.Series(a, index=index)

    # tmean is passed as (Tmax+Tmin)/2 so that pyet's Δ and 900/(T+273) use FAO-56 eq. 9;
    # with rhmax/rhmin given, pyet takes ea from eq. 17 and es from eq. 12, as we do.
    et = pyet.pm_fao56(
        series(0.5 * (w["tmax"] + w["tmin"])),
        series(w["u2"]),
        rs=series(w["rs"]),
        tmax=series(w["tmax"]),
        tmin=series(w["tmin"]),
        rhmax=series(w["rh_max"]),
        rhmin=series(w["rh_min"]),
        elevation=ELEVATION_M,
        lat=math.radians(LAT_DEG),
    )
    return et.to_numpy()


def _ours_year(w: dict[str, np.ndarray], rs_rso_floor: float | None) -> np.ndarray:
    return np.asarray(
        fao56_daily_et0(
            w["tmax"],
            w["tmin"],
            w["rh_max"],
            w["rh_min"],
            w["u2"],
            w["rs"],
            LAT_DEG,
            ELEVATION_M,
            w["doy"],
            rs_rso_floor=rs_rso_floor,
        )
    )


def test_matches_pyet_over_a_year_with_the_same_rs_rso_floor() -> None:
    # pyet limits Rs/Rso to [0.3, 1] (ASCE-EWRI); with the same floor we must agree on every day.
    w = _synthetic_year()
    ours = _ours_year(w, rs_rso_floor=0.3)
    ref = _pyet_year(w)
    wet = ref > 0.5
    assert wet.sum() > 300
    rel = np.abs(ours[wet] - ref[wet]) / ref[wet]
    assert rel.max() < 0.01
    np.testing.assert_allclose(ours[~wet], ref[~wet], atol=0.005)


def test_fao56_default_differs_from_pyet_only_on_very_dark_days() -> None:
    # Default follows FAO-56: Rs/Rso <= 1 only. Below Rs/Rso = 0.3 pyet's floor raises Rnl,
    # so pyet must come out lower there, and identical (within 1 %) everywhere else.
    w = _synthetic_year()
    ours = _ours_year(w, rs_rso_floor=None)
    ref = _pyet_year(w)
    dark = w["rs"] / w["rso"] < 0.3
    wet = ref > 0.5
    assert dark.sum() > 0
    rel = np.abs(ours[wet & ~dark] - ref[wet & ~dark]) / ref[wet & ~dark]
    assert rel.max() < 0.01
    assert np.all(ours[dark] > ref[dark])


# ---- numpy / torch parity ----------------------------------------------------------------
def _daily_inputs(n: int = 64, seed: int = 7) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    tmin = rng.uniform(-5.0, 25.0, n)
    return {
        "tmax_c": tmin + rng.uniform(3.0, 15.0, n),
        "tmin_c": tmin,
        "rh_max_pct": rng.uniform(70.0, 100.0, n),
        "rh_min_pct": rng.uniform(20.0, 60.0, n),
        "u2_m_s": rng.uniform(0.5, 5.0, n),
        "rs_mj_m2_day": rng.uniform(5.0, 28.0, n),
        "lat_deg": rng.uniform(-60.0, 60.0, n),
        "elevation_m": rng.uniform(0.0, 2000.0, n),
        "day_of_year": rng.integers(1, 366, n),
    }


def _hourly_inputs(n: int = 4096, seed: int = 11) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "temp_c": rng.uniform(10.0, 40.0, n),
        "rh_pct": rng.uniform(30.0, 100.0, n),
        "u2_m_s": rng.uniform(0.1, 2.0, n),
        "rn_mj_m2_h": rng.uniform(-0.05, 2.5, n),
        "g_mj_m2_h": rng.uniform(-0.02, 0.2, n),
        "pressure_kpa": rng.uniform(95.0, 102.0, n),
    }


@pytest.mark.parametrize(
    ("fn", "make"), [(fao56_daily_et0, _daily_inputs), (fao56_hourly_et0, _hourly_inputs)]
)
def test_numpy_and_torch_agree(fn: Callable[..., Any], make: Callable[[], dict[str, np.ndarray]]) -> None:
    inputs = make()
    ref = fn(**inputs)
    assert isinstance(ref, np.ndarray) and ref.dtype == np.float64

    t64 = fn(**{k: torch.from_numpy(v) for k, v in inputs.items()})
    assert isinstance(t64, torch.Tensor) and t64.dtype == torch.float64
    np.testing.assert_allclose(t64.numpy(), ref, rtol=0.0, atol=1e-9)

    # float32 tensors (ints such as day_of_year stay integer) must stay float32.
    t32 = fn(
        **{k: torch.from_numpy(v.astype(np.float32) if v.dtype.kind == "f" else v) for k, v in inputs.items()}
    )
    assert isinstance(t32, torch.Tensor) and t32.dtype == torch.float32
    np.testing.assert_allclose(t32.numpy(), ref, rtol=1e-4, atol=1e-5)


def test_python_scalars_join_torch_namespace_and_dtype() -> None:
    t = torch.tensor([38.0, 28.0], dtype=torch.float32)
    out = fao56_hourly_et0(t, torch.tensor([52.0, 90.0]), 3.3, 1.0, 0.1, NDIAYE_PRESSURE_KPA)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and out.shape == (2,)
    rn = greenhouse_hourly_net_radiation_mj_m2_h(torch.zeros(3))
    assert isinstance(rn, torch.Tensor)


# ---- monotonic sanity ---------------------------------------------------------------------
def test_more_radiation_gives_more_et0() -> None:
    rs = np.linspace(5.0, 30.0, 26)
    daily = np.asarray(fao56_daily_et0(**{**UCCLE, "rs_mj_m2_day": rs}))
    assert np.all(np.diff(daily) > 0.0)
    hourly = np.asarray(fao56_hourly_et0(30.0, 60.0, 1.0, np.linspace(0.0, 2.5, 26), 0.0, 101.3))
    assert np.all(np.diff(hourly) > 0.0)


def test_higher_humidity_gives_less_et0() -> None:
    shift = np.linspace(-20.0, 15.0, 36)
    daily = np.asarray(
        fao56_daily_et0(**{**UCCLE, "rh_max_pct": 84.0 + shift * 0.5, "rh_min_pct": 63.0 + shift})
    )
    assert np.all(np.diff(daily) < 0.0)
    hourly = np.asarray(fao56_hourly_et0(30.0, np.linspace(20.0, 95.0, 16), 1.0, 1.0, 0.1, 101.3))
    assert np.all(np.diff(hourly) < 0.0)

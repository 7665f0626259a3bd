"""The twin's fast paths give the very bits of the plain computations they replace."""

from __future__ import annotations

import numpy as np
import torch

from twin import GreenhouseTwin
from twin.backend import UNDERFLOW_EXP_ARG, make_backend
from twin.config import WeatherConfig
from twin.spec import FORECAST_HOURS
from twin.weather import HOURS_PER_YEAR, SOLAR, TEMP, WeatherLibrary, split_outlook


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def test_exp_decay_matches_exp_bit_for_bit_including_underflow() -> None:
    xp = make_backend("torch").xp
    grid = torch.linspace(-2000.0, 30.0, 100_003)
    edges = torch.tensor([-float("inf"), UNDERFLOW_EXP_ARG, -103.98, -103.97, -87.3, -0.0, 0.0, 88.7, 89.0])
    # Lengths with and without a scalar tail after the vectorised part, plus a strided view.
    for x in (grid, grid[:1001], grid[:7], edges, grid[::3]):
        assert torch.equal(_bits(xp.exp_decay(x)), _bits(torch.exp(x)))
    nan = xp.exp_decay(torch.tensor([float("nan"), -500.0]))
    assert torch.isnan(nan[0]) and nan[1].item() == 0.0
    wide = torch.tensor([-200.0], dtype=torch.float64)  # not underflowing in float64: left to exp
    assert torch.equal(xp.exp_decay(wide), torch.exp(wide)) and xp.exp_decay(wide).item() > 0.0


def test_weather_tables_hold_the_rows_they_replace() -> None:
    backend = make_backend("numpy")
    lib = WeatherLibrary.build(WeatherConfig(n_years=2), seed=3, backend=backend)
    year = np.array([0, 1, 1, 0, 1])
    hour = np.array([0.0, 17.25, HOURS_PER_YEAR - 0.5, HOURS_PER_YEAR + 3.75, 2 * HOURS_PER_YEAR - 2.1],
                    dtype=np.float32)
    temp, solar, rest_today, tomorrow = split_outlook(lib.forecast(backend, year, hour, truth=True))
    ahead = lib.ahead(backend, year, hour, FORECAST_HOURS)
    assert np.array_equal(temp, ahead[:, :, TEMP]) and np.array_equal(solar, ahead[:, :, SOLAR])
    two_days = lib.ahead(backend, year, hour, 48)[:, :, SOLAR]
    left = 23 - np.floor(hour).astype(np.int64) % 24  # whole hours left today after the current one
    for i in range(len(hour)):
        assert np.isclose(rest_today[i], two_days[i, : left[i]].sum(), rtol=1e-5)
        assert np.isclose(tomorrow[i], two_days[i, left[i]: left[i] + 24].sum(), rtol=1e-5)
    base = np.floor(hour).astype(np.int64)
    r0 = lib.table[year * HOURS_PER_YEAR + base % HOURS_PER_YEAR]
    r1 = lib.table[year * HOURS_PER_YEAR + (base + 1) % HOURS_PER_YEAR]  # wraps to the same year's first hour
    assert np.array_equal(lib.at(backend, year, hour), r0 + (r1 - r0) * (hour - np.floor(hour))[:, None])


def test_noise_rows_without_uniforms_are_the_leading_columns() -> None:
    twin = GreenhouseTwin(32, backend="torch", seed=5)
    twin.reset()
    noise, b = twin.model.noise, twin.backend
    full = noise.draw(b, twin.params, twin.state)
    narrow = noise.draw(b, twin.params, twin.state, uniforms=False)
    assert narrow.shape == (32, noise.n_normal) and narrow.is_contiguous()
    assert torch.equal(narrow, full[:, : noise.n_normal])


def test_missing_readings_flag_matches_a_direct_nan_check() -> None:
    from twin import FaultConfig

    twin = GreenhouseTwin(16, seed=2, faults=FaultConfig.all_on(0.3))
    twin.reset()
    seen = 0
    action = np.zeros((16, 8), dtype=np.float32)
    for _ in range(60):
        *_, info = twin.step(action)
        probes = info["readings"]["soil_vwc"]
        want = np.isnan(probes).any(axis=(1, 2))
        assert np.array_equal(info["warnings"]["missing_readings"], want)
        seen += int(want.sum())
    assert seen > 0  # faults did drop readings, so both outcomes were checked

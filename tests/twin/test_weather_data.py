"""The twin's weather values without a network: the fallback a provider serves and the observation
rows it remembers are computed here, from values only."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from twin.weather_data import FIELDS, HOUR, NOISE_STD, climatology, fallback_weather, observation_row

TIMES = np.datetime64("2026-07-01T05:00:00") + np.arange(4) * HOUR


def test_fallback_is_climatology_where_nothing_was_observed() -> None:
    w = fallback_weather(TIMES, 5.0, [None] * 4, np.zeros((len(FIELDS), 4)))
    clim = climatology(TIMES, 5.0)
    assert w.source == "fallback"
    for i, name in enumerate(FIELDS):
        np.testing.assert_array_equal(getattr(w, name), clim[i])


def test_fallback_replays_an_observed_hour_with_scaled_noise_clipped_to_the_ranges() -> None:
    mean = np.array([20.0, 99.0, 300.0, 1.0, 0.0])
    noise = np.ones((len(FIELDS), 4))
    w = fallback_weather(TIMES, 5.0, [mean, None, None, None], noise)
    assert w.temperature_c[0] == 20.0 + NOISE_STD["temperature_c"]
    assert w.relative_humidity_pct[0] == 100.0  # 99 + 5 clipped to the physical range
    assert w.shortwave_radiation_w_m2[0] == pytest.approx(
        300.0 * (1.0 + NOISE_STD["shortwave_radiation_w_m2"]))
    assert w.precipitation_mm[0] == 0.0  # relative noise: a dry hour stays dry
    assert w.temperature_c[1] == climatology(TIMES, 5.0)[0, 1]


def test_an_observation_row_is_keyed_by_its_utc_hour_and_checked() -> None:
    key, row = observation_row(datetime(2026, 7, 1, 5, 40, tzinfo=UTC), (20.0, 50.0, 100.0, 1.0, 0.0))
    assert key == int(np.datetime64("2026-07-01T05:00:00", "s").astype(np.int64))
    np.testing.assert_array_equal(row, [20.0, 50.0, 100.0, 1.0, 0.0])
    with pytest.raises(ValueError, match="timezone-aware"):
        observation_row(datetime(2026, 7, 1), (20.0, 50.0, 100.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="temperature_c"):
        observation_row(datetime(2026, 7, 1, tzinfo=UTC), (900.0, 50.0, 100.0, 1.0, 0.0))

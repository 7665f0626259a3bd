"""Zone and moisture labels: the dashboard and the signed report print these, so they must agree."""

from __future__ import annotations

import pytest

from audit.labels import (
    actuator_label,
    band_label,
    feature_label,
    vwc_pct,
    zone_label,
    zone_list,
    zone_number,
)


def test_zones_are_counted_from_one() -> None:
    assert [zone_number(i) for i in range(6)] == [1, 2, 3, 4, 5, 6]
    assert zone_label(0) == "Zone 1" and zone_label(5) == "Zone 6"
    assert zone_list([0, 2]) == "zones 1, 3" and zone_list([4]) == "zone 5" and zone_list([]) == "no zone"


@pytest.mark.parametrize(("low", "high", "text"), [
    (0.195, 0.27, "19.5–27 %"),  # loam: half a percent kept, not rounded up to 20
    (0.2, 0.3, "20–30 %"),
    (0.1234, 0.3456, "12.3–34.6 %"),
])
def test_bands_read_in_percent(low: float, high: float, text: str) -> None:
    assert band_label(low, high) == text


def test_readings_in_percent_with_one_decimal() -> None:
    assert vwc_pct(0.1704) == "17.0" and vwc_pct(0.25) == "25.0"


def test_actuators_and_features_name_their_zone_as_people_count() -> None:
    assert actuator_label("valve[3]") == "Zone 4 valve"
    assert actuator_label("pump") == "pump" and actuator_label("lights") == "lights"
    assert feature_label("moisture[0]") == "Zone 1 moisture"
    assert feature_label("irrigation_24h[2]") == "Zone 3 irrigation 24h"
    assert feature_label("air_temp") == "air temp" \
        and feature_label("forecast_temp[+3h]") == "forecast temp[+3h]"

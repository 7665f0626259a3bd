"""SafetyLimits: the shipped file, TOML loading and strict validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from safety.limits import DEFAULT_LIMITS_PATH, SafetyLimits


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "limits.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_shipped_file_matches_model_defaults() -> None:
    assert SafetyLimits.default() == SafetyLimits()
    assert SafetyLimits.default() is SafetyLimits.default()


def test_shipped_file_documents_a_unit_for_every_field() -> None:
    text = DEFAULT_LIMITS_PATH.read_text(encoding="utf-8").splitlines()
    for name in SafetyLimits.model_fields:
        line = next(i for i, row in enumerate(text) if row.startswith(f"{name} ="))
        block = []
        while line > 0 and text[line - 1].startswith("#"):
            line -= 1
            block.append(text[line])
        comment = " ".join(block)
        assert "[" in comment and "]" in comment, name


def test_from_toml_with_per_zone_lists(tmp_path: Path) -> None:
    path = _write(tmp_path, "zones = 3\nzone_daily_water_cap_l = [10, 20.5, 30]\nsaturation_vwc = 0.4\n")
    limits = SafetyLimits.from_toml(path)
    np.testing.assert_array_equal(limits.water_cap_per_zone(), [10.0, 20.5, 30.0])
    np.testing.assert_array_equal(limits.saturation_per_zone(), [0.4, 0.4, 0.4])
    assert not limits.water_cap_per_zone().flags.writeable


@pytest.mark.parametrize(
    "text",
    [
        "pump_max_pct = 100\nunknown_key = 1\n",
        "pump_min_pct = nan\n",
        "lights_daily_hours_cap = inf\n",
        "pump_min_pct = 60\npump_max_pct = 50\n",
        "zones = 2\nzone_daily_water_cap_l = [1, 2, 3]\n",
        "saturation_vwc = [0.4, 0.4, 0.4, 0.4, 0.4, nan]\n",
        "zone_daily_water_cap_l = -1\n",
        "pump_ramp_pct_per_s = 0\n",
    ],
)
def test_from_toml_rejects_bad_files(tmp_path: Path, text: str) -> None:
    with pytest.raises(ValidationError):
        SafetyLimits.from_toml(_write(tmp_path, text))


def test_limits_are_frozen() -> None:
    limits = SafetyLimits()
    with pytest.raises(ValidationError):
        limits.zones = 3  # type: ignore[misc]

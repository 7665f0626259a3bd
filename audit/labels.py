"""How zones and soil moisture read to a person, spelled once for the dashboard and the signed report.

The controller counts zones from 0 and keeps moisture as a volumetric fraction (m3/m3); people count
zones from 1 and read moisture in percent. An agronomist who holds the report beside the dashboard
must find the same zone under the same name and a band under the same numbers, so both take their
labels from here. It lives at the bottom of the layering (the report's layout, in ``audit``, may not
import the service), and imports nothing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_INDEXED = re.compile(r"^([a-z][a-z0-9_]*)\[(\d+)\]$")


def zone_number(index: int) -> int:
    """The number people know a zone by: the controller's index 0 is zone 1."""
    return index + 1


def zone_label(index: int) -> str:
    """``Zone 1`` for index 0, as the dashboard's tiles and the report's tables title a zone."""
    return f"Zone {zone_number(index)}"


def zone_list(indices: Iterable[int]) -> str:
    """Several zones in one phrase (``zones 1, 3``; ``zone 2``; ``no zone``), for a command or a clip."""
    numbers = [str(zone_number(i)) for i in indices]
    if not numbers:
        return "no zone"
    return ("zone " if len(numbers) == 1 else "zones ") + ", ".join(numbers)


def _pct(fraction: float, digits: int) -> str:
    """``fraction`` x 100 to at most ``digits`` decimals, trailing zeros dropped (0.27 -> '27')."""
    text = f"{100.0 * fraction:.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def vwc_pct(vwc: float) -> str:
    """A moisture reading (m3/m3) in percent with one decimal, as a tile shows it: 0.1704 -> ``17.0``."""
    return f"{100.0 * vwc:.1f}"


def band_label(low_vwc: float, high_vwc: float) -> str:
    """A zone's target band (m3/m3) in percent: (0.195, 0.27) -> ``19.5–27 %``. Half a percent is kept,
    since a zone at 19.7 % is in a 19.5 % band and would look dry beside a band rounded to 20."""
    return f"{_pct(low_vwc, 1)}–{_pct(high_vwc, 1)} %"


def actuator_label(actuator: str) -> str:
    """A safety report's actuator name as people read it: ``valve[3]`` -> ``Zone 4 valve``; ``pump`` and
    ``lights`` as they are."""
    match = _INDEXED.match(actuator)
    if match is not None and match.group(1) == "valve":
        return f"{zone_label(int(match.group(2)))} valve"
    return actuator


def feature_label(feature: str) -> str:
    """An observation feature's name with its zone numbered as people count: ``moisture[3]`` ->
    ``Zone 4 moisture``, ``target_low[0]`` -> ``Zone 1 target low``; others with spaces for
    underscores (``air_temp`` -> ``air temp``, ``forecast_temp[+3h]`` as it is)."""
    match = _INDEXED.match(feature)
    if match is not None:
        return f"{zone_label(int(match.group(2)))} {match.group(1).replace('_', ' ')}"
    return feature.replace("_", " ")

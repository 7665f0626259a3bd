"""Layout of one greenhouse's action vector, kept in one place.

An action is ``[valve_0 .. valve_{Z-1}, pump_pct, light_pct]``. Voting, clipping and the
actuator drivers all index it through these names so the layout cannot drift between them.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from twin.config import DEFAULT_ZONES

__all__ = ["DEFAULT_ZONES", "LIGHTS", "PUMP", "action_size", "safe_state", "valve_name"]

PUMP: Final = -2
"""Index of the pump speed [% of full speed], counted from the end."""

LIGHTS: Final = -1
"""Index of the supplemental light level [% of full output], counted from the end."""


def action_size(zones: int) -> int:
    """Length of an action for ``zones`` valves: the valves, then pump, then lights."""
    return zones + 2


def valve_name(zone: int) -> str:
    """Actuator label used in reports, so logs and dashboards name valves alike."""
    return f"valve[{zone}]"


def safe_state(zones: int) -> np.ndarray:
    """Everything off: all valves closed, pump stopped, lights off.

    Used by the e-stop and the watchdog, so it must never fail: a zone count that is not
    a non-negative integer gives an action with no valves (pump and lights still off).
    """
    try:
        n = int(zones)
    except (TypeError, ValueError, OverflowError):
        n = 0
    return np.zeros(action_size(max(n, 0)), dtype=np.float64)

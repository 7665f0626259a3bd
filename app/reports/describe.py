"""How a stored decision reads in a report: its rules, explanation, action and saliency map.

Pure functions of the JSON the service stores, kept apart from the database read so each can be
tested on hand-made rows.
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

from audit.labels import actuator_label, feature_label, vwc_pct, zone_list
from audit.report.data import SaliencyMap


def json_floats(value: Any, n: int) -> list[float | None]:
    """``n`` numbers from a JSON list (None where missing or not a number)."""
    out: list[float | None] = [None] * n
    if isinstance(value, list):
        for i, v in enumerate(value[:n]):
            if type(v) is float or type(v) is int:  # not bool; JSON numbers decode to exactly these
                out[i] = float(v) if math.isfinite(v) else None
    return out


def json_number(mapping: Any, key: str) -> float:
    v = mapping.get(key) if isinstance(mapping, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def _setting(actuator: str, value: Any) -> str:
    """One side of a clip: a valve open or closed, the pump and lights in percent."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return shorten(value, 20)
    if actuator.startswith("valve") and value in (0, 1):
        return "open" if value else "closed"
    return f"{value:.3g} %" if actuator in ("pump", "lights") else f"{value:.3g}"


def describe_rule(firing: Any) -> tuple[str, str]:
    """(rule id, the firing in words) for one ``rules_fired`` entry of any shape, e.g.
    ``zone_daily_water_cap on Zone 2 valve: open -> closed (251.9 L used today; cap 250.0 L)``."""
    if isinstance(firing, Mapping):
        rule = str(firing.get("rule", "?"))
        text = rule
        actuator = str(firing.get("actuator", ""))
        if actuator:
            text += f" on {actuator_label(actuator)}"
        if "before" in firing or "after" in firing:
            text += f": {_setting(actuator, firing.get('before'))} -> {_setting(actuator, firing.get('after'))}"
        why = firing.get("why")
        if isinstance(why, str) and why:
            text += f" ({shorten(why, 120)})"
        return rule, text
    return str(firing), shorten(firing, 60)


def shorten(value: Any, limit: int = 60) -> str:
    if isinstance(value, float):
        text = f"{value:.3g}"
    else:
        text = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _factor(top: Any) -> str:
    """The strongest factor of an explanation: its feature as people name it, its value and its share."""
    if not isinstance(top, list) or not top or not isinstance(top[0], Mapping):
        return ""
    factor = top[0]
    label = feature_label(str(factor.get("feature", "?")))
    value, unit = factor.get("value"), str(factor.get("unit", ""))
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        label += f" {vwc_pct(value)} % VWC" if unit == "m3/m3" else f" {value:.3g} {unit}".rstrip()
    share = json_number(factor, "share_pct")
    return f"main factor: {label} ({share:.0f} % of the decision)"


def describe_explanation(explanation: Any) -> str:
    """A decision's explanation in a few words: its strongest factor, its alarms, and whether the saliency
    of its lead-up was kept (the stored record is JSON, which no agronomist should have to read)."""
    if not isinstance(explanation, Mapping):
        return "" if explanation is None else shorten(explanation, 120)
    parts = [_factor(explanation.get("top"))]
    alarms = explanation.get("alarms")
    if isinstance(alarms, list) and alarms:
        more = f" and {len(alarms) - 3} more" if len(alarms) > 3 else ""
        parts.append("alarms: " + ", ".join(shorten(a, 40) for a in alarms[:3]) + more)
    if isinstance(explanation.get("history"), Mapping):  # the lead-up and its saliency: drawn, not printed
        parts.append("saliency of its lead-up recorded")  # heat maps are drawn for the first few only
    return "; ".join(part for part in parts if part)


def describe_action(clipped: Any) -> str:
    """The command sent: the zones whose valves it opened, then pump and lights in percent."""
    if not isinstance(clipped, Mapping):
        return ""
    valves = clipped.get("valves")
    opened = [i for i, v in enumerate(valves) if v] if isinstance(valves, list) else []
    head = f"valves open: {zone_list(opened)}" if opened else "valves closed"
    return ("\n".join(textwrap.wrap(head, 22))
            + f"\npump {json_number(clipped, 'pump_pct'):.0f}% light {json_number(clipped, 'light_pct'):.0f}%")


@cache
def feature_names(dim: int, zones: int) -> tuple[str, ...]:
    """Names of an observation's ``dim`` features (``twin.spec`` layout, e.g. 'moisture[3]').

    The layout for ``zones`` zones when its size matches, else the zone count ``dim`` implies
    (the greenhouse may have been re-zoned since), else 'feature i'.
    """
    from twin.spec import ObservationSpec  # here, not at import: the twin package loads scipy

    fixed = ObservationSpec(0).dim
    per_zone = ObservationSpec(1).dim - fixed
    for z in (zones, (dim - fixed) // per_zone):
        if z >= 1 and ObservationSpec(z).dim == dim:
            return ObservationSpec(z).names
    return tuple(f"feature {i}" for i in range(dim))


def saliency_map(row: Any, ts: datetime, zones: int, top: int) -> SaliencyMap | None:
    """The heat-map data of a decision whose explanation carries ``history.saliency`` (T x D), else None.

    Keeps the ``top`` features with the largest total |attribution| over the steps; values that
    are missing or not finite stay None (drawn as "no value").
    """
    explanation = row.explanation if isinstance(row.explanation, Mapping) else {}
    history = explanation.get("history")
    steps = history.get("saliency") if isinstance(history, Mapping) else None
    if not isinstance(steps, list) or not steps or not isinstance(steps[0], list) or not steps[0]:
        return None
    dim = len(steps[0])
    if any(not isinstance(step, list) or len(step) != dim for step in steps):
        return None
    grid = [json_floats(step, dim) for step in steps]  # [t][feature]
    totals = [sum(abs(step[i] or 0.0) for step in grid) for i in range(dim)]
    ranked = sorted((i for i in range(dim) if totals[i] > 0), key=lambda i: -totals[i])[:top]
    names = feature_names(dim, zones)
    total = sum(totals)
    return SaliencyMap(ts, int(row.seq), str(row.actor), float(row.confidence),
                       tuple(names[i] for i in ranked), tuple(tuple(step[i] for step in grid) for i in ranked),
                       dim, 100.0 * sum(totals[i] for i in ranked) / total if total > 0 else 0.0)

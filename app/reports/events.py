"""The decision log summarised: each decision's events (a safety clip, an expert fallback, an operator's
command, the policy's strongest factor) named in words and counted, and settings changes read back.

A report lists events, not decisions, so its length follows the period and not the decision rate;
every decision stays in the audit trail and the decisions API. The English wording is kept in the
small functions at the top, so that a catalogue of labels can take their place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from audit.labels import actuator_label, feature_label, zone_label
from audit.report.data import MAX_EVENT_KINDS, EventSummary, ReportData, SettingsChangeEntry

_ZONE_FIELD = re.compile(r"^zones\[(\d+)\]\.(\w+)$")


def clip_event(firing: Any) -> str:
    """The event of one safety-rule firing: the rule and the actuator it changed."""
    if isinstance(firing, Mapping):
        actuator = str(firing.get("actuator", ""))
        rule = str(firing.get("rule", "?"))
        return f"Safety rule {rule} changed the {actuator_label(actuator)}" if actuator else f"Safety rule {rule}"
    return f"Safety rule {firing}"


def fallback_event() -> str:
    return "The ensemble disagreed: the threshold expert decided"


def low_confidence_event() -> str:
    return "The policy decided with low confidence"


def operator_event(actor: str) -> str:
    return f"Operator's command in manual mode ({actor.removeprefix('operator:')})"


def estop_event() -> str:
    return "E-stop latched: everything off"


def factor_event(feature: str) -> str:
    return f"The policy's strongest factor was {feature_label(feature)}"


def other_actor_event(actor: str) -> str:
    """Decisions the service made itself (stale telemetry, a reconnect) by who made them."""
    words = {"watchdog": "Telemetry stale: the safe state was commanded",
             "reconnect": "Broker reconnected: the last command was sent again"}
    return words.get(actor, f"Decided by {actor}")


def _setting_words(field: str, value: Any) -> str:
    """One setting's value as the dashboard's settings form shows it (bands in % VWC)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int | float) and math.isfinite(value):
        if field.endswith("_vwc"):
            return f"{100.0 * value:.1f} %"
        return f"{value:g} L/day" if field == "daily_water_cap_l" else f"{value:g}"
    return str(value)


def _field_words(field: str) -> str:
    names = {"name": "name", "lamps_ours": "greentwin controls the lamps", "lamp_hours_per_day": "lamp hours a day",
             "soil": "soil", "target_low_vwc": "band low", "target_high_vwc": "band high",
             "daily_water_cap_l": "water cap"}
    match = _ZONE_FIELD.match(field)
    if match is not None:
        return f"{zone_label(int(match.group(1)))} {names.get(match.group(2), match.group(2))}"
    return names.get(field, field)


def settings_change_words(changed: Any) -> str:
    """What a settings change changed, e.g. ``Zone 2 band low 19.5 % -> 21.0 %; water cap 250 -> 200 L/day``."""
    if not isinstance(changed, Mapping):
        return "-"
    parts = []
    for field, pair in changed.items():
        before, after = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (None, pair)
        key = _ZONE_FIELD.match(field)
        attr = key.group(2) if key is not None else field
        parts.append(f"{_field_words(field)} {_setting_words(attr, before)} -> {_setting_words(attr, after)}")
    return "; ".join(parts) or "-"


def settings_change(ts: datetime, record: Any) -> SettingsChangeEntry | None:
    """The settings change a decision carries (``estimate.settings_change``), else None."""
    if not isinstance(record, Mapping):
        return None
    version = record.get("version")
    return SettingsChangeEntry(ts, version if isinstance(version, int) else 0, str(record.get("actor", "?")),
                               str(record.get("reason", "")), settings_change_words(record.get("changed")))


class EventTally:
    """Counts decisions per event kind, keeping each kind's first and last time and its latest words."""

    def __init__(self) -> None:
        self.events: dict[str, EventSummary] = {}
        self.other = 0

    def add(self, event: str, ts: datetime, words: str) -> None:
        entry = self.events.get(event)
        if entry is not None:
            entry.count += 1
            entry.last = ts
            entry.example = words or entry.example
        elif len(self.events) < MAX_EVENT_KINDS:
            self.events[event] = EventSummary(event, 1, ts, ts, words)
        else:
            self.other += 1

    def finish(self, data: ReportData) -> None:
        """The events into ``data``, most frequent first."""
        data.events = sorted(self.events.values(), key=lambda e: (-e.count, e.first))
        data.events_other = self.other


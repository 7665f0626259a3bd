"""The decision log summarised: each decision's events (a safety clip, an expert fallback, an operator's
command, the policy's strongest factor) named in words and counted, and settings changes read back.

A report lists events, not decisions, so its length follows the period and not the decision rate;
every decision stays in the audit trail and the decisions API. The words are the catalogue's
(``report.event.*`` and the decision wording of :mod:`audit.decision_words`), in the report's language,
so a safety rule reads as what it does rather than as its id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from audit.decision_words import rule_key
from audit.report.data import MAX_EVENT_KINDS, EventSummary, ReportData, SettingsChangeEntry
from audit.wording import DEFAULT_LANGUAGE, actuator_name, feature_name, has, text, zone_title

_ZONE_FIELD = re.compile(r"^zones\[(\d+)\]\.(\w+)$")


def _rule_words(rule: str, lang: str) -> str:
    key = rule_key(rule)
    return text(key, lang) if key else text("rule.unknown", lang, rule=rule)


def clip_event(firing: Any, lang: str = DEFAULT_LANGUAGE) -> str:
    """The event of one safety-rule firing: what the rule does and the actuator it changed."""
    if isinstance(firing, Mapping):
        actuator = str(firing.get("actuator", ""))
        rule = _rule_words(str(firing.get("rule", "?")), lang)
        if actuator:
            return text("report.event.clip", lang, actuator=actuator_name(actuator, lang), rule=rule)
        return text("report.event.clip_any", lang, rule=rule)
    return text("report.event.clip_any", lang, rule=_rule_words(str(firing), lang))


def fallback_event(lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.event.fallback", lang)


def low_confidence_event(lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.event.low_confidence", lang)


def operator_event(actor: str, lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.event.operator", lang, who=actor.removeprefix("operator:"))


def estop_event(lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.event.estop", lang)


def factor_event(feature: str, lang: str = DEFAULT_LANGUAGE) -> str:
    return text("report.event.factor", lang, feature=feature_name(feature, lang))


def other_actor_event(actor: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """Decisions the service made itself (stale telemetry, a reconnect) by who made them."""
    if actor in ("watchdog", "reconnect"):
        return text(f"report.event.{actor}", lang)
    return text("report.event.actor", lang, actor=actor)


def _setting_words(field: str, value: Any, lang: str) -> str:
    """One setting's value as the dashboard's settings form shows it (bands in % VWC)."""
    if value is None:
        return text("kv.none", lang)
    if isinstance(value, bool):
        return text("value.yes" if value else "value.no", lang)
    if isinstance(value, int | float) and math.isfinite(value):
        if field.endswith("_vwc"):
            return f"{100.0 * value:.1f} %"
        return text("report.litres_a_day", lang, value=f"{value:g}") if field == "daily_water_cap_l" \
            else f"{value:g}"
    return str(value)


def _field_words(field: str, lang: str) -> str:
    match = _ZONE_FIELD.match(field)
    name = match.group(2) if match is not None else field
    words = text(f"setting.{name}", lang) if has(f"setting.{name}") else name
    if match is not None:
        return text("feature.at_zone", lang, zone=zone_title(int(match.group(1)), lang), feature=words)
    return words


def settings_change_words(changed: Any, lang: str = DEFAULT_LANGUAGE) -> str:
    """What a settings change changed, e.g. ``Zone 2 band low 19.5 % -> 21.0 %; water cap a day 250 ->
    200 L/day``."""
    if not isinstance(changed, Mapping):
        return "-"
    parts = []
    for field, pair in changed.items():
        before, after = pair if isinstance(pair, list | tuple) and len(pair) == 2 else (None, pair)
        key = _ZONE_FIELD.match(field)
        attr = key.group(2) if key is not None else field
        parts.append(f"{_field_words(field, lang)} {_setting_words(attr, before, lang)} -> "
                     f"{_setting_words(attr, after, lang)}")
    return text("sentence.sep", lang).join(parts) or "-"


def settings_change(ts: datetime, record: Any, lang: str = DEFAULT_LANGUAGE) -> SettingsChangeEntry | None:
    """The settings change a decision carries (``estimate.settings_change``), else None."""
    if not isinstance(record, Mapping):
        return None
    version = record.get("version")
    return SettingsChangeEntry(ts, version if isinstance(version, int) else 0, str(record.get("actor", "?")),
                               str(record.get("reason", "")),
                               settings_change_words(record.get("changed"), lang))


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


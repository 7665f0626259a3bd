"""Every alarm kind in words: its severity, what it means and what to do, for the API, the page and
the notifications alike. The words themselves are the shared catalogue's (``alarm.<code>.*`` in
:mod:`audit.wording`), so the page and each recipient's notifications read them in that user's language.

An alarm's kind is a code with an optional detail after a colon (``zone_dry:2``,
``valve_failed:0,3``, ``outlook_prices:stale``). A detail of zone indices reads as people count
zones (from 1, :mod:`audit.labels`). A *watched* kind is active while the condition the service
evaluates holds (:mod:`app.alarms.conditions`) and clears when it stops; any other kind is an
event, active for :data:`EVENT_ACTIVE_S` after its last occurrence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, get_args

from audit.wording import DEFAULT_LANGUAGE, catalogue, has, language, text, zone_list

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
"""Ascending: a recipient's minimum severity lets through its own and every later one."""
EVENT_ACTIVE_S = 600.0
"""An event alarm (an ack time-out, a rejected command) counts as active this long after its last
occurrence: long enough to be seen, short enough that a fault gone quiet leaves the active list."""
_ZONES = re.compile(r"^\d+(,\d+)*$")


@dataclass(frozen=True)
class KindSpec:
    """An alarm kind's behaviour; its words (title, description, action) are in :mod:`audit.wording`
    under ``alarm.<code>.*``, where ``{zones}`` is the detail's zones in words and ``{detail}`` the detail."""

    code: str
    severity: Severity
    watched: bool = False


@dataclass(frozen=True)
class AlarmText:
    """One alarm kind as a person reads it."""

    code: str
    severity: Severity
    title: str
    description: str
    action: str
    watched: bool


KINDS: dict[str, KindSpec] = {k.code: k for k in (
    # Watched conditions (app.alarms.conditions): active while they hold.
    KindSpec("zone_dry", "critical", True), KindSpec("zone_wet", "warning", True),
    KindSpec("water_cap", "warning", True), KindSpec("valve_failed", "critical", True),
    KindSpec("probe_fault", "warning", True), KindSpec("edge_offline", "critical", True),
    KindSpec("estop_latched", "critical", True), KindSpec("outlook_weather", "warning", True),
    KindSpec("outlook_prices", "warning", True), KindSpec("outlook", "warning", True),
    KindSpec("expert_fallback", "warning", True), KindSpec("audit_behind", "warning", True),
    # Events: active for a while after their last occurrence.
    KindSpec("ack_timeout", "warning"), KindSpec("command_rejected", "critical"),
    KindSpec("command_expired", "warning"), KindSpec("command_timeout", "warning"),
    KindSpec("telemetry_stale", "critical"), KindSpec("telemetry_shed", "warning"),
    KindSpec("flow_without_open_valve", "critical"), KindSpec("valve_open_no_flow", "critical"),
    KindSpec("valve_feedback_mismatch", "warning"), KindSpec("journal_unwritable", "critical"),
    KindSpec("dead_letter", "warning"), KindSpec("policy_load_failed", "warning"),
)}


def split(kind: str) -> tuple[str, str]:
    """(code, detail) of a kind: ``zone_dry:2`` -> (``zone_dry``, ``2``)."""
    code, _, detail = kind.partition(":")
    return code, detail


def _zones_words(detail: str, lang: str) -> str:
    if _ZONES.match(detail):
        return zone_list((int(i) for i in detail.split(",")), lang)
    return text("zones.some", lang) if not detail else f"zone {detail}"


def _detail_words(detail: str, lang: str) -> str:
    if not detail:
        return text("alarm.detail.degraded", lang)
    key = f"alarm.detail.{detail}"
    return text(key, lang) if has(key) else detail.replace("_", " ")


def describe(kind: str, lang: str = DEFAULT_LANGUAGE) -> AlarmText:
    """The kind in words, in ``lang``; an unknown kind gets a generic text rather than failing."""
    code, detail = split(kind)
    spec = KINDS.get(code)
    if spec is None:
        return AlarmText(code, "warning", text("alarm.unknown.title", lang, kind=kind),
                         text("alarm.unknown.description", lang, kind=kind),
                         text("alarm.unknown.action", lang), False)
    zones = _zones_words(detail, lang)
    words = {"zones": zones, "detail": _detail_words(detail, lang)}
    description = text(f"alarm.{code}.description", lang, **words)
    if catalogue()[f"alarm.{code}.description"].get(language(lang), "").startswith("{zones}"):
        description = description[:1].upper() + description[1:]  # the zones open the sentence
    return AlarmText(code, spec.severity, text(f"alarm.{code}.title", lang, **words), description,
                     text(f"alarm.{code}.action", lang, **words), spec.watched)


def severity(kind: str) -> Severity:
    """The kind's severity (``warning`` for a kind the catalogue does not know)."""
    spec = KINDS.get(split(kind)[0])
    return spec.severity if spec is not None else "warning"


def is_watched(kind: str) -> bool:
    """Whether the kind is active by a watched condition rather than by its recent occurrences."""
    spec = KINDS.get(split(kind)[0])
    return spec is not None and spec.watched


def at_least(level: Severity, minimum: Severity) -> bool:
    """Whether ``level`` is ``minimum`` or more severe."""
    return SEVERITIES.index(level) >= SEVERITIES.index(minimum)

"""Every alarm kind in words: its severity, what it means and what to do, for the API, the page and
the notifications alike.

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

from audit.labels import zone_list

Severity = Literal["info", "warning", "critical"]
SEVERITIES: tuple[Severity, ...] = get_args(Severity)
"""Ascending: a recipient's minimum severity lets through its own and every later one."""
EVENT_ACTIVE_S = 600.0
"""An event alarm (an ack time-out, a rejected command) counts as active this long after its last
occurrence: long enough to be seen, short enough that a fault gone quiet leaves the active list."""
_ZONES = re.compile(r"^\d+(,\d+)*$")


@dataclass(frozen=True)
class KindSpec:
    code: str
    severity: Severity
    title: str
    description: str
    """What happened; ``{zones}`` is the detail's zones in words, ``{detail}`` the detail as sent."""
    action: str
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


def _k(code: str, severity: Severity, title: str, description: str, action: str, watched: bool = False) -> KindSpec:
    return KindSpec(code, severity, title, description, action, watched)


KINDS: dict[str, KindSpec] = {k.code: k for k in (
    # Watched conditions (app.alarms.conditions): active while they hold.
    _k("zone_dry", "critical", "Zone dry", "The moisture estimate of {zones} has been below its band for longer "
       "than the greenhouse's limit.", "Check the zone's valve, dripper lines and pump; water by hand in manual "
       "mode if the loop cannot.", True),
    _k("zone_wet", "warning", "Zone wet", "The moisture estimate of {zones} has been above its band for longer "
       "than the greenhouse's limit.", "Check for a valve stuck open or a leak; look at drainage.", True),
    _k("water_cap", "warning", "Daily water cap reached", "{zones} had all the water its daily cap allows; the "
       "safety layer gives it no more until midnight.", "Look for a leak or a dripper blow-out; raise the cap "
       "only if the crop needs it.", True),
    _k("valve_failed", "critical", "Valve latched failed", "The valve of {zones} was held open by the edge box "
       "and stayed closed; it is latched failed until it is seen open.", "Inspect the valve and its "
       "wiring; the zone gets no water until it opens.", True),
    _k("probe_fault", "warning", "Probe fault", "A moisture probe of {zones} is offline or drifting; the "
       "estimate leans on the other probe and the soil model.", "Check the probe's cable and its seating in "
       "the substrate; replace it if it keeps drifting.", True),
    _k("edge_offline", "critical", "Edge box offline", "No telemetry from the edge box for longer than the "
       "greenhouse's limit; it runs its own safe state.", "Check the box's power and network link and the "
       "broker.", True),
    _k("estop_latched", "critical", "E-stop latched", "The e-stop is latched: every actuator is off until "
       "an operator resets it.", "Find out why it was pressed; reset it with a reason when it is safe.", True),
    _k("outlook_weather", "warning", "Weather forecast {detail}", "The weather forecast the decisions use is "
       "{detail} (older than the allowed age, or replaced by climatology).", "Check the weather provider's "
       "URL and the site's network; decisions go on with what is known.", True),
    _k("outlook_prices", "warning", "Price outlook {detail}", "The day-ahead prices the decisions use are "
       "{detail} (older than the allowed age, or replaced by the tariff).", "Check the price provider's URL "
       "and the site's network; decisions go on with the tariff.", True),
    _k("outlook", "warning", "Outlook not refreshed", "The outlook has not been refreshed for hours.",
       "Look at the service's log for the outlook refresh; restart the service if it stopped.", True),
    _k("expert_fallback", "warning", "Loop on the expert rule", "The ensemble's members have disagreed long "
       "enough that every decision fell back to the threshold expert for longer than the greenhouse's limit.",
       "Compare the greenhouse with the twin (a sensor or calibration problem); roll the policy back if it "
       "started after a promotion.", True),
    _k("audit_behind", "warning", "Audit writer behind", "Decisions or audit events wait longer than the "
       "greenhouse's limit to be stored or sealed.", "Check the database and the writer process in the "
       "service's log; /readyz says which.", True),
    # Events: active for a while after their last occurrence.
    _k("ack_timeout", "warning", "Command not acknowledged", "The edge box did not acknowledge a command in "
       "time.", "Check the box's link; repeated time-outs mean it does not hear the service."),
    _k("command_rejected", "critical", "Command rejected", "The edge box refused a command.",
       "Read the ack's reason in the decision log; check the box's configuration and clock."),
    _k("command_expired", "warning", "Command expired", "A command reached the edge box after its TTL.",
       "Check the broker's latency and the box's clock."),
    _k("command_timeout", "warning", "Command not answered", "A command got no answer after every retry.",
       "Check the box's link and the broker."),
    _k("telemetry_stale", "critical", "Telemetry stale", "Telemetry stopped; the service commanded the safe "
       "state.", "Check the edge box and its link to the broker."),
    _k("telemetry_shed", "warning", "Telemetry shed", "Telemetry arrived faster than allowed and some was "
       "dropped ({detail}).", "Check the edge box's publishing rate."),
    _k("flow_without_open_valve", "critical", "Flow with every valve closed", "The flow meter measured water "
       "while no valve reported open.", "Look for a leak or a valve open without feedback; stop the pump."),
    _k("valve_open_no_flow", "critical", "Valve open, no flow", "A valve was open with the pump on and no "
       "flow was measured.", "Check the pump, the water supply and the flow meter."),
    _k("valve_feedback_mismatch", "warning", "Valve feedback differs", "The valve of {zones} reported a "
       "position other than the one commanded.", "Check the valve's feedback contact and its actuator."),
    _k("journal_unwritable", "critical", "Journal not writable", "The state directory refused a write: "
       "decisions are not commanded and the edge boxes fall back to their safe state.",
       "Free space in the state directory (a full disk) at once."),
    _k("dead_letter", "warning", "Record set aside", "A {detail} record could not be stored and was set "
       "aside in the dead-letter file.", "Read dead-letter.jsonl in the state directory and the log."),
    _k("policy_load_failed", "warning", "Promoted policy not loaded", "The promoted ensemble {detail} could "
       "not be loaded; the previous one keeps deciding.", "Check the registry's files; roll back the "
       "promotion."),
)}


def split(kind: str) -> tuple[str, str]:
    """(code, detail) of a kind: ``zone_dry:2`` -> (``zone_dry``, ``2``)."""
    code, _, detail = kind.partition(":")
    return code, detail


def _zones_words(detail: str) -> str:
    if _ZONES.match(detail):
        return zone_list(int(i) for i in detail.split(","))
    return "a zone" if not detail else f"zone {detail}"


def describe(kind: str) -> AlarmText:
    """The kind in words; an unknown kind gets a generic text rather than failing."""
    code, detail = split(kind)
    spec = KINDS.get(code)
    if spec is None:
        return AlarmText(code, "warning", f"Alarm {kind}", f"The service raised the alarm {kind!r}.",
                         "Look at the service's log around the alarm's time.", False)
    zones = _zones_words(detail)
    words = {"zones": zones[:1].upper() + zones[1:], "detail": detail.replace("_", " ") or "degraded"}
    fill = words if spec.description.startswith("{zones}") else {**words, "zones": zones}
    return AlarmText(code, spec.severity, spec.title.format(**words), spec.description.format(**fill),
                     spec.action, spec.watched)


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

"""A stored decision's sentences for one reader: the API's ``explanation_text``, ``command_text``,
``clips_text`` and ``alarms_text``, in the caller's language, zones under the names their settings
give them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from app.reports.describe import alarm_code_words
from audit.decision_words import decision_words

if TYPE_CHECKING:
    from app.models import Decision
    from app.runtime import Runtime


def zone_names(runtime: Runtime, gh: str) -> list[str | None]:
    """Each zone's name as its settings say now (None where unnamed), so a command reads
    'Zone 2 (north bed)'."""
    ctl = runtime.controllers.get(gh)
    return [] if ctl is None else [z.name for z in ctl.zones]


def sentences(row: Decision, lang: str, names: list[str | None]) -> dict[str, Any]:
    """The three sentence fields of a decision row, from its stored JSON of whatever age."""
    words = decision_words(explanation=row.explanation, clipped=row.clipped, rules_fired=row.rules_fired,
                           actor=row.actor, confidence=row.confidence, estimate=row.estimate, lang=lang,
                           zone_names=names)
    alarms = row.explanation.get("alarms") if isinstance(row.explanation, dict) else None
    return {"explanation_text": words.explanation, "command_text": words.command, "clips_text": words.clips,
            "alarms_text": [alarm_code_words(a, lang) for a in alarms] if isinstance(alarms, list) else []}


"""A period's alarms for the report: episodes raised by kind, and what operators did about them.

Kinds are named as the alarm list names them (:mod:`app.alarms.catalogue`), zones counted from 1.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.alarm_models import AlarmAction, AlarmEpisode
from app.alarms.catalogue import SEVERITIES, describe, split
from audit.report.data import MAX_LISTED, AlarmActionEntry, AlarmSummary, ReportData, utc
from audit.wording import DEFAULT_LANGUAGE, text, zone_list

_ZONES = re.compile(r"^\d+(,\d+)*$")


def alarm_title(kind: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """The alarm list's title of a kind in ``lang``, with the zones it concerns (``Zone dry: zone 3``), since
    one report row stands for each kind and zone."""
    title = describe(kind, lang).title
    detail = split(kind)[1]
    if not _ZONES.match(detail):
        return title
    return text("report.alarm_zones", lang, title=title,
                zones=zone_list((int(i) for i in detail.split(",")), lang))


def collect_alarms(session: Session, data: ReportData, start: datetime, end: datetime) -> None:
    """Fill ``data.alarms`` (episodes raised in ``[start, end)`` by kind, most severe first) and the
    operators' alarm actions in the period."""
    gh, lang = data.greenhouse_id, data.language
    by_kind: dict[str, AlarmSummary] = {}
    for ep in session.scalars(select(AlarmEpisode).where(
            AlarmEpisode.greenhouse_id == gh, AlarmEpisode.raised_at >= start, AlarmEpisode.raised_at < end)):
        summary = by_kind.get(ep.kind)
        if summary is None:
            summary = by_kind[ep.kind] = AlarmSummary(alarm_title(ep.kind, lang),
                                                      ep.severity or describe(ep.kind).severity)
        summary.raised += 1
        summary.acknowledged += ep.acknowledged_at is not None and utc(ep.acknowledged_at) < end
        summary.open_at_end += ep.cleared_at is None or utc(ep.cleared_at) >= end
    counts: Counter[str] = Counter()
    for act in session.scalars(select(AlarmAction).where(
            AlarmAction.greenhouse_id == gh, AlarmAction.at >= start, AlarmAction.at < end)
            .order_by(AlarmAction.at, AlarmAction.id)):
        counts[act.action] += 1
        title = by_kind[act.kind].title if act.kind in by_kind else alarm_title(act.kind, lang)
        if act.action == "shelve":
            by_kind.setdefault(act.kind, AlarmSummary(title, describe(act.kind).severity)).shelved += 1
        if len(data.alarm_actions) < MAX_LISTED:
            data.alarm_actions.append(AlarmActionEntry(utc(act.at), act.actor, act.action, title,
                                                       act.comment or ""))
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    data.alarms = sorted(by_kind.values(),
                         key=lambda a: (rank.get(a.severity, len(rank)), -a.raised, a.title))
    data.alarm_action_counts = dict(counts)

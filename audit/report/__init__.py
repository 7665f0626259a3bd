"""Agronomist PDF reports: what the controller did to one greenhouse over a period, and why.

The host fills a :class:`ReportData` (records in :mod:`audit.report.data`; the service's
``app.reports.collect_report_data`` reads its database in one streaming pass); :func:`render_report` lays
it out with reportlab's platypus (:mod:`audit.report.layout`): a first page that answers the period
(:mod:`audit.report.firstpage`), details, charts drawn with ``reportlab.graphics``
(:mod:`audit.report.charts`), the decision log summarised by event and hour
(:mod:`audit.report.decision_log`) so that the length follows the period rather than the decision
rate, and saliency heat maps (:mod:`audit.report.heatmap`). :func:`report_csv` writes the same
summary as CSV. Signing is :mod:`audit.signing`'s job.
"""

from __future__ import annotations

from audit.report.data import (
    LOW_CONFIDENCE_THRESHOLD,
    MAX_DT_S,
    MAX_HEATMAPS,
    MIN_DT_S,
    AlarmActionEntry,
    AlarmSummary,
    EnergyModel,
    EventSummary,
    HourSummary,
    ModeChangeEntry,
    PolicyUse,
    ReportData,
    SaliencyMap,
    SettingsChangeEntry,
    ZoneBand,
    ZoneStats,
    iso,
)
from audit.report.export import report_csv
from audit.report.layout import render_report, watermark_text

__all__ = [
    "LOW_CONFIDENCE_THRESHOLD",
    "MAX_DT_S",
    "MAX_HEATMAPS",
    "MIN_DT_S",
    "AlarmActionEntry",
    "AlarmSummary",
    "EnergyModel",
    "EventSummary",
    "HourSummary",
    "ModeChangeEntry",
    "PolicyUse",
    "ReportData",
    "SaliencyMap",
    "SettingsChangeEntry",
    "ZoneBand",
    "ZoneStats",
    "iso",
    "render_report",
    "report_csv",
    "watermark_text",
]

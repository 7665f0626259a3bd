"""Agronomist PDF reports: what the controller did to one greenhouse over a period, and why.

The host fills a :class:`ReportData` (records in :mod:`audit.report.data`; the service's
``app.reports.collect_report_data`` reads its database in one streaming pass); :func:`render_report` lays
it out with reportlab's platypus (:mod:`audit.report.layout`) and draws every chart and
saliency heat map with ``reportlab.graphics`` (:mod:`audit.report.charts`,
:mod:`audit.report.heatmap`). Signing is :mod:`audit.signing`'s job.
"""

from __future__ import annotations

from audit.report.data import (
    DETAIL_LIMIT,
    LOW_CONFIDENCE_THRESHOLD,
    MAX_DT_S,
    MAX_HEATMAPS,
    MAX_LOG_ENTRIES,
    MIN_DT_S,
    DecisionEntry,
    EnergyModel,
    HourSummary,
    ModeChangeEntry,
    PolicyUse,
    ReportData,
    SaliencyMap,
    ZoneBand,
    ZoneStats,
    iso,
)
from audit.report.layout import render_report, watermark_text

__all__ = [
    "DETAIL_LIMIT",
    "LOW_CONFIDENCE_THRESHOLD",
    "MAX_DT_S",
    "MAX_HEATMAPS",
    "MAX_LOG_ENTRIES",
    "MIN_DT_S",
    "DecisionEntry",
    "EnergyModel",
    "HourSummary",
    "ModeChangeEntry",
    "PolicyUse",
    "ReportData",
    "SaliencyMap",
    "ZoneBand",
    "ZoneStats",
    "iso",
    "render_report",
    "watermark_text",
]

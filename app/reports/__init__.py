"""The service's side of the PDF report: its database read into :class:`audit.report.ReportData`.

Rendering and signing stay in :mod:`audit.report` and :mod:`audit.signing`, which know no database.
"""

from __future__ import annotations

from app.reports.collect import collect_report_data, site_energy_model
from app.reports.describe import feature_names, saliency_map

__all__ = ["collect_report_data", "feature_names", "saliency_map", "site_energy_model"]

"""The one error the site's outside data sources (weather forecast, day-ahead prices) share.

A payload that is malformed or physically implausible is refused by the twin's parsers with a
subclass of :class:`SourceDataError`; the service's providers (:mod:`app.outlook`) count it as
``bad_data`` and fall back rather than trust it.
"""

from __future__ import annotations


class SourceDataError(ValueError):
    """A payload is malformed or implausible; callers fall back rather than trust it."""

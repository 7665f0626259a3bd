"""The roles an API user may hold (several at once); import-light, the command line's ``--help`` reads it."""

from __future__ import annotations

ROLES = ("operator", "agronomist", "admin")
"""``operator``: modes, e-stop, manual override; ``agronomist``: reports; ``admin``: registration, reports."""

PRIVILEGED_ROLES = frozenset({"operator", "admin"})
"""Roles whose logins are sealed into the audit trail."""

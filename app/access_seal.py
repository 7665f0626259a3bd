"""Changes of who may do what, sealed in the ``_access`` chain inside the change's own transaction.

An account change (add, roles, password, disable) or a greenhouse registration and its audit record
commit together or not at all, whichever process makes it (the service, a second replica, the command
line): the record goes in with :meth:`audit.store.AuditStore.append_in` on the session that made the
change, after its flush and before its commit, and a seq another process took meanwhile is sealed
again after that process's record. A record the trail refuses rolls the change back and raises
:class:`ChangeNotSealed`, which the API answers with 503 and the command line with exit 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from app.audit_sink import ACCESS_CHAIN
from app.deadletter import reason_of
from audit import AuditEvent, SealedRecord
from audit.store import AuditStore

SealChange = Callable[[Session, dict[str, Any]], None]
"""Seals the record (its payload) of a change made in the session, in that session's transaction."""


class ChangeNotSealed(RuntimeError):
    """The audit trail refused the record of a change, so the change was rolled back."""


@dataclass(frozen=True)
class AccessSealer:
    """Seals access changes made by one actor (``admin:<name>``, ``cli:<os user>``)."""

    store: AuditStore
    actor: str

    def sealing(self, kind: str) -> SealChange:
        """The ``seal`` argument of :mod:`app.auth.users` and ``add_greenhouse`` for records of ``kind``."""
        def seal(session: Session, payload: dict[str, Any]) -> None:
            self.seal(session, kind, payload)

        return seal

    def seal(self, session: Session, kind: str, payload: dict[str, Any]) -> SealedRecord:
        """Append ``kind`` to the access chain in ``session``'s transaction (it commits with the change)."""
        event = AuditEvent(kind, self.actor, payload, datetime.now(UTC))
        try:
            [record] = self.store.append_in(session.connection(), ACCESS_CHAIN, [event])
        except (DBAPIError, ValueError) as exc:
            raise ChangeNotSealed(f"the audit trail refused the record of this change ({reason_of(exc)}): "
                                  "nothing was changed") from exc
        return record


def commit_sealed(session: Session, seal: SealChange | None, payload: dict[str, Any]) -> None:
    """Seal the session's pending change (when ``seal`` is given) and commit both in one transaction; if
    either fails, the session is rolled back and the error raised, so nothing of the change remains."""
    try:
        if seal is not None:
            session.flush()
            seal(session, payload)
        session.commit()
    except BaseException:
        session.rollback()
        raise

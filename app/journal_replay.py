"""Start-up: store what a previous run journaled (so published) but had not stored yet.

The journal goes only once every event in it is sealed; otherwise the writer takes it over (its
first round skips what is stored), so an audit hiccup at start never loses an event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from app.audit_sink import AuditSink
from app.journal import DecisionJournal
from app.recorder import DecisionRecorder
from app.writer import DecisionStore, Job
from control import Proposer
from twin.config import DEFAULT_ZONES

log = logging.getLogger(__name__)


def replay_journal(journal: DecisionJournal, recorder: DecisionRecorder,
                   proposer_for: Callable[[int], Proposer], audit: AuditSink | None) -> bool:
    """Store the journal's records once, in order; True when the writer must take the journal over."""
    entries = journal.recover()
    if entries:
        store = DecisionStore(recorder, lambda zones: proposer_for(zones or DEFAULT_ZONES), audit=audit)
        done = store.store([Job.from_entry(e) for e in entries], skip_stored=True)
        log.warning("journal: %d records of a previous run were not stored yet; stored them now", len(done))
        if audit is not None:
            audit.flush()
        if audit is not None and audit.pending:
            log.error("journal: %d audit events could not be sealed at start; the journal is kept and the "
                      "writer seals them", audit.discard_pending())
            journal.keep_recovered()
            return True
    journal.discard_recovered()
    return False

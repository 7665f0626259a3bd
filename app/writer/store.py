"""One writer round: explain the ensemble decisions, write the rows, queue the audit events."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import OperationalError

from app.audit_sink import AuditSink
from app.models import Decision
from app.recorder import DecisionRecorder
from app.writer.jobs import AUDIT_TO_JOB_KIND, Job, Key, ack_key
from control.explain import explain_decisions
from control.proposal import Proposer

log = logging.getLogger(__name__)
ROW_KINDS = frozenset({"decision", "mode_change", "ack"})
"""Job kinds with a database row; the others are audit records only."""


class DecisionStore:
    """One round: explain, write (one transaction or one spool append), queue the audit events."""

    def __init__(self, recorder: DecisionRecorder, proposer_for: Callable[[int | None], Proposer | None], *,
                 audit: AuditSink | None = None, on_swap: Callable[[Job], None] | None = None) -> None:
        self.recorder = recorder
        self.proposer_for = proposer_for
        self.audit = audit
        self.on_swap = on_swap
        """Called at each ``policy_swap`` among the jobs, in journal order: the decisions after it
        are explained with the ensemble it names."""

    def store(self, jobs: list[Job], *, skip_stored: bool = False) -> list[Job]:
        """Store ``jobs`` in order; ``skip_stored`` first drops those already in the database (a
        replay after a crash). Returns the jobs stored by this call."""
        to_store, to_audit = ((self._not_stored(jobs), self._not_audited(jobs)) if skip_stored
                              else (jobs, jobs))
        needed = {id(j) for j in (*to_store, *to_audit)}
        if skip_stored:
            stored = {id(j) for j in to_store}
            needed -= self._explained_as_stored([j for j in to_audit if id(j) not in stored])
        self._explain_in_order(jobs, needed)  # a row and its audit record carry the explanation
        self.recorder.record_many([(j.kind, j.row) for j in to_store if j.kind in ROW_KINDS])
        if self.audit is not None:
            for j in to_audit:
                self.audit.add(str(j.row["greenhouse_id"]), j.audit_kind, j.actor, j.row, j.ts)
        return to_store

    def _not_audited(self, jobs: list[Job]) -> list[Job]:
        """The replayed jobs whose audit records were not sealed before the crash.

        Events are sealed in journal order, so the sealed ones are among each chain's newest
        records; a margin covers records appended to the chain from elsewhere meanwhile. If the
        trail cannot be read now, nothing is skipped: a second record of an event is visible in
        the trail, a missing one is not.
        """
        if self.audit is None:
            return []
        per_greenhouse = Counter(gh for _, gh, _ in (j.key for j in jobs))
        sealed: set[Key] = set()
        try:
            for gh, count in per_greenhouse.items():
                for e in self.audit.store.tail_entries(gh, count + 64):
                    kind = AUDIT_TO_JOB_KIND.get(e.kind, "mode_change")
                    seq = ack_key(e.payload["cmd_id"]) if kind == "ack" else e.payload.get("seq")
                    if isinstance(seq, int):
                        sealed.add((kind, gh, seq))
        except Exception as exc:
            log.warning("cannot read the audit trail while replaying (%s): re-sealing %d events",
                        exc.__class__.__name__, len(jobs))
        return [j for j in jobs if j.key not in sealed]

    def _explained_as_stored(self, jobs: list[Job]) -> set[int]:
        """Give replayed decisions whose rows are stored the explanation they were stored with; returns
        their ids. Their records are sealed from the journal, and must say what the rows say: explained
        again now (by an ensemble swapped meanwhile, or in another batch, which rounds differently) they
        would not, and ``audit verify`` would rightly report the rows as other than sealed."""
        keys = {(str(j.row["greenhouse_id"]), int(j.row["seq"])): j for j in jobs if j.kind == "decision"}
        if not keys:
            return set()
        found: dict[tuple[str, int], Any] = {}
        try:
            with self.recorder.sessions() as session:
                for gh in {g for g, _ in keys}:
                    seqs = [q for g, q in keys if g == gh]
                    found |= {(gh, int(seq)): explanation for seq, explanation in session.execute(
                        select(Decision.seq, Decision.explanation).where(Decision.greenhouse_id == gh,
                                                                          Decision.seq.in_(seqs)))}
        except OperationalError:  # cannot tell: explained again, as before
            log.warning("database unavailable while replaying: %d decisions explained again", len(keys))
            return set()
        for key, explanation in found.items():
            keys[key].row["explanation"], keys[key].request = explanation, None
        return {id(keys[key]) for key in found}

    def _not_stored(self, jobs: list[Job]) -> list[Job]:
        stored: set[Key] = set()
        try:
            for kind in ("decision", "mode_change"):
                keys = [(g, q) for k, g, q in (j.key for j in jobs) if k == kind]
                stored |= {(kind, g, q) for g, q in self.recorder.stored_keys(kind, keys)}
        except OperationalError:  # cannot tell: all go to the spool, whose write-back skips stored rows
            log.warning("database unavailable while replaying %d journaled records: spooling them all",
                        len(jobs))
        return [j for j in jobs if j.key not in stored]

    def _explain_in_order(self, jobs: list[Job], needed: set[int]) -> None:
        """Explain the ``needed`` jobs, switching ensembles at each policy swap on the way."""
        segment: list[Job] = []
        for j in jobs:
            if j.kind == "policy_swap" and self.on_swap is not None:
                self._explain(segment)
                segment = []
                self.on_swap(j)
            elif id(j) in needed:
                segment.append(j)
        self._explain(segment)

    def _explain(self, jobs: list[Job]) -> None:
        groups: dict[int, tuple[Proposer, list[Job]]] = {}
        for j in jobs:
            if j.request is None:
                continue
            proposer = self.proposer_for(j.zones)
            if proposer is None or proposer.ensemble is None:  # a rule's decisions carry no attribution
                continue
            groups.setdefault(id(proposer), (proposer, []))[1].append(j)
        for proposer, group in groups.values():
            try:
                explanations = explain_decisions(proposer, [j.request for j in group])  # type: ignore[misc]
            except Exception as exc:  # a decision is stored even if its explanation cannot be made
                log.exception("explaining %d decisions failed", len(group))
                explanations = [{"error": f"explanation failed: {exc.__class__.__name__}"} for _ in group]
            for j, explanation in zip(group, explanations, strict=True):
                j.row["explanation"] = {**explanation, **(j.row.get("explanation") or {})}
                j.request = None

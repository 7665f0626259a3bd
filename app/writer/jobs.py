"""A journaled record as the writer stores it: its identity, its journal entry, its summary."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

from control.records import ControlDecision, ExplainRequest, ModeEvent

Key = tuple[str, str, int]
"""(kind, greenhouse, seq): a record's identity (an ack's "seq" is :func:`ack_key` of its cmd_id)."""
AUDIT_TO_JOB_KIND = {"decision": "decision", "command_ack": "ack", "policy_swap": "policy_swap"}
"""Job kind of an audit record kind; every other kind is a mode change."""


def ack_key(cmd_id: str) -> int:
    """An ack's place in :data:`Key`: acks have no seq of their own, their command id is unique."""
    return uuid.UUID(str(cmd_id)).int >> 66


@dataclass
class Job:
    """One record to store; ``request`` is set for an ensemble decision still to be explained.

    A ``policy_swap`` is the service switching ensembles: only an audit record (its "seq" a random
    62-bit id), and the writer explains the decisions after it with the new ensemble.
    An ``ack`` is the edge box's answer to a command (or ``timeout``): ``row`` carries the cmd_id,
    status and reason; it updates the decision's ``ack_status`` and is sealed as ``command_ack``."""

    kind: Literal["decision", "mode_change", "ack", "policy_swap"]
    row: dict[str, Any]
    audit_kind: str
    actor: str
    ts: datetime
    request: ExplainRequest | None = None
    zones: int | None = None
    journaled_at: float = field(default_factory=time.time)

    @property
    def key(self) -> Key:
        if self.kind == "ack":
            return self.kind, str(self.row["greenhouse_id"]), ack_key(self.row["cmd_id"])
        return self.kind, str(self.row["greenhouse_id"]), int(self.row["seq"])

    def entry(self) -> dict[str, Any]:
        """The journal entry: the row, its audit labels and what its explanation needs."""
        r = self.request
        explain = None if r is None else {
            "obs": r.obs, "confidence": r.confidence, "zones": self.zones,
            "history": None if r.history is None else [r.history[0], r.history[1]]}
        return {"kind": self.kind, "row": self.row, "audit_kind": self.audit_kind, "actor": self.actor,
                "explain": explain, "t": self.journaled_at}

    @classmethod
    def from_entry(cls, e: dict[str, Any]) -> Job:
        x = e.get("explain")
        request = None
        if x:
            history = None if x["history"] is None else (np.asarray(x["history"][0], dtype=np.float32),
                                                         np.asarray(x["history"][1], dtype=np.float32))
            request = ExplainRequest(np.asarray(x["obs"], dtype=np.float32), float(x["confidence"]), history)
        return cls(e["kind"], e["row"], e["audit_kind"], e["actor"], e["row"]["ts"], request,
                   None if not x else x.get("zones"), float(e.get("t", time.time())))

    def summary(self) -> dict[str, Any]:
        """What the service shows as a greenhouse's last decision."""
        r = self.row
        return {"seq": r["seq"], "ts": r["ts"].isoformat(), "actor": r["actor"], "mode": r["mode"],
                "clipped": r["clipped"], "confidence": r["confidence"], "alarms": r["explanation"]["alarms"],
                "estimate": r["estimate"]}

    @classmethod
    def decision(cls, d: ControlDecision, zones: int) -> Job:
        """A decision's record; its explanation is computed by the writer from ``d.explain``."""
        return cls("decision", d.record(), "decision", d.actor, d.ts, d.explain, zones)

    @classmethod
    def mode_change(cls, event: ModeEvent) -> Job:
        """A mode change's record, sealed as an e-stop, its reset or a mode change."""
        return cls("mode_change", event.row(), event.audit_kind, event.actor, event.ts)

    @classmethod
    def ack(cls, gh: str, cmd_id: uuid.UUID, status: str, reason: str | None, ts: datetime) -> Job:
        """The edge box's answer to a command (or ``timeout``), sealed as ``command_ack``."""
        row = {"greenhouse_id": gh, "cmd_id": str(cmd_id), "status": status, "reason": reason, "ts": ts}
        return cls("ack", row, "command_ack", "edge", ts)

    @classmethod
    def policy_swap(cls, gh: str, ts: datetime, payload: dict[str, Any], actor: str) -> Job:
        """The greenhouse's ensemble switched (``payload``: from/to versions, directory, who promoted)."""
        row = {"greenhouse_id": gh, "seq": uuid.uuid4().int >> 66, "ts": ts, **payload}
        return cls("policy_swap", row, "policy_swap", actor, ts)

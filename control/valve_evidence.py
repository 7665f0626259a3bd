"""When valve feedback is evidence about a valve, and when it says nothing.

The edge box reports in its telemetry which command's set-points it holds (``cmd_seq``), or
``null`` while it holds its own safe state: after a boot, after its TTL fall-back when commands
stopped arriving (a broker outage, a service restart), in an e-stop. Position feedback is judged
only against a command the box says it holds, and only for a valve the box has been seen holding
in one state for :data:`JUDGE_AFTER_S` (a valve takes 1-3 s to move): from the first telemetry
that showed the box holding a command of that run, not from when the service sent it, since a
command may reach the box late or never. So a valve is latched failed on one kind of evidence
alone: the box held an open command long enough and the valve still reads closed. Its fall-back, a
stale or refused command, a TTL expiry or a reconnect are not that evidence.

After the service's own reconnect the broker may deliver commands queued while it was away, so
what was seen before is forgotten (:meth:`ValveEvidence.unseen`) and judgement starts afresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

JUDGE_AFTER_S = 5.0
"""Seconds of telemetry time a valve must have been seen held in one state before its feedback counts."""
KEPT = 64
"""Commands remembered per greenhouse: a box holds one of the newest, so a few dozen cover any delay."""


@dataclass(frozen=True)
class SentCommand:
    """What one command told the valves and the pump."""

    seq: int
    valves: tuple[bool, ...]
    pump: bool = False
    """The pump told to run."""


@dataclass(frozen=True)
class ValveEvidence:
    """The greenhouse's latest commands and since when the box has been seen holding each valve's state.

    A value: sending a command or observing telemetry returns a new one."""

    sent: tuple[SentCommand, ...] = ()
    held_seq: int | None = None
    """The command the last telemetry said the box holds (None: its safe state, or not seen yet)."""
    held_since: tuple[datetime | None, ...] = ()
    """Per valve and then the pump, the telemetry time the box was first seen holding its current
    state's run."""

    def with_sent(self, seq: int, valves: Sequence[float], pump: bool = False) -> ValveEvidence:
        """This evidence with one more command sent (the oldest beyond :data:`KEPT` forgotten)."""
        entry = SentCommand(int(seq), tuple(bool(v >= 0.5) for v in valves), bool(pump))
        return ValveEvidence((*self.sent, entry)[-KEPT:], self.held_seq, self.held_since)

    def unseen(self) -> ValveEvidence:
        """Forget what the box was seen holding (a reconnect or restart): judgement starts afresh."""
        return ValveEvidence(self.sent)

    def observe(self, cmd_seq: int | None, ts: datetime,
                zones: int) -> tuple[ValveEvidence, np.ndarray, np.ndarray, bool]:
        """(the evidence after telemetry at ``ts`` saying the box holds ``cmd_seq``, the valves it should
        read open, the valves whose reading is evidence, whether the pump has run long enough for the
        flow to be evidence). Nothing is evidence while the box holds no command of ours (``cmd_seq``
        null or unknown)."""
        nothing = np.zeros(zones, dtype=bool)
        held = self._index(cmd_seq)
        if held is None or len(self.sent[held].valves) != zones:
            return ValveEvidence(self.sent), nothing, nothing.copy(), False
        told = (*self.sent[held].valves, self.sent[held].pump)
        before = self._index(self.held_seq)
        between = [] if before is None or before > held else \
            [(*c.valves, c.pump) for c in self.sent[before:held + 1]]
        since: list[datetime] = []
        for k in range(zones + 1):
            kept = self.held_since[k] if len(self.held_since) == zones + 1 else None
            if kept is None or not between or any(c[k] != told[k] for c in between):
                # a new run of this valve's (the pump's) state, or nothing seen of it yet, is watched from now
                kept = ts
            since.append(kept)
        judged = np.array([(ts - s).total_seconds() >= JUDGE_AFTER_S for s in since], dtype=bool)
        return (ValveEvidence(self.sent, cmd_seq, tuple(since)), np.array(told[:zones], dtype=bool),
                judged[:zones], bool(told[zones] and judged[zones]))

    def _index(self, seq: int | None) -> int | None:
        if seq is None:
            return None
        return next((k for k in range(len(self.sent) - 1, -1, -1) if self.sent[k].seq == seq), None)

    def to_json(self) -> list[list[Any]]:
        """The commands, for the controller's snapshot (what was seen is not kept: a restart re-watches)."""
        return [[c.seq, [int(v) for v in c.valves], int(c.pump)] for c in self.sent]

    @classmethod
    def from_json(cls, rows: Any) -> ValveEvidence:
        """The commands a snapshot kept; anything unreadable is forgotten (that only withholds judgement)."""
        try:
            return cls(tuple(SentCommand(int(row[0]), tuple(bool(v) for v in row[1]),
                                         bool(row[2]) if len(row) > 2 else False)
                             for row in rows or ()))
        except (TypeError, ValueError, IndexError):
            return cls()

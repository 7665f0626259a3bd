"""What a decision is made of and what it leaves behind: the control path's plain records.

No behaviour lives here, so every stage of the path (and the writer, which stores what the path
produced) can share these types without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import numpy as np

from wire.topics import Command

Mode = Literal["auto", "manual", "estop"]


@dataclass(frozen=True)
class ZoneSetup:
    """A registered zone: soil class, target band and limits, and the name people know it by."""

    soil_type: str
    target_low: float
    target_high: float
    saturation: float
    daily_water_cap_l: float
    root_mm: float = 300.0
    name: str | None = None
    """Display name; None: ``Zone N`` (:func:`audit.labels.zone_label`)."""


@dataclass(frozen=True)
class ModeEvent:
    """A recorded mode change (who and why)."""

    greenhouse_id: str
    seq: int
    ts: datetime
    actor: str
    from_mode: Mode
    to_mode: Mode
    reason: str

    @property
    def audit_kind(self) -> str:
        """The audit trail's name for this change: an e-stop, its reset, or a plain mode change."""
        if self.to_mode == "estop":
            return "estop"
        return "estop_reset" if self.from_mode == "estop" else "mode_change"

    def row(self) -> dict[str, Any]:
        """The mode-change table row."""
        return {"greenhouse_id": self.greenhouse_id, "seq": self.seq, "ts": self.ts, "actor": self.actor,
                "from_mode": self.from_mode, "to_mode": self.to_mode, "reason": self.reason}


@dataclass(frozen=True)
class ExplainRequest:
    """Inputs of one decision's explanation, captured when it was decided (the history moves on)."""

    obs: np.ndarray
    """(D,) float32 observation the ensemble saw."""
    confidence: float
    history: tuple[np.ndarray, np.ndarray] | None
    """(observations (T, D), actions (T, A)) up to this decision, kept for low-confidence ones."""


@dataclass
class ControlDecision:
    """Everything one decision produced; ``record()`` is the decision-table row."""

    greenhouse_id: str
    seq: int
    ts: datetime
    actor: str
    mode: Mode
    telemetry: dict[str, Any]
    estimate: dict[str, Any] | None
    member_actions: list[list[float]]
    voted: dict[str, Any]
    clipped: dict[str, Any]
    rules_fired: list[dict[str, Any]]
    confidence: float
    low_confidence: bool
    command: Command
    alarms: list[str] = field(default_factory=list)
    observation: list[float] | None = None
    explanation: dict[str, Any] | None = None
    events: list[ModeEvent] = field(default_factory=list)
    """Mode changes made while deciding (telemetry reporting the e-stop), to be recorded before it."""
    explain: ExplainRequest | None = None
    """What :func:`control.explain.explain_decisions` needs, for an ensemble decision whose
    explanation is still to come."""

    @property
    def is_override(self) -> bool:
        """An operator's manual action: stored with its observation, a demonstration for training."""
        return self.mode == "manual" and self.actor.startswith("operator:")

    def record(self) -> dict[str, Any]:
        estimate = self.estimate
        if self.is_override and self.observation is not None:
            estimate = {**(estimate or {}), "observation": self.observation}
        return {"greenhouse_id": self.greenhouse_id, "seq": self.seq, "ts": self.ts, "actor": self.actor,
                "mode": self.mode, "telemetry": self.telemetry, "estimate": estimate,
                "member_actions": self.member_actions, "voted": self.voted, "clipped": self.clipped,
                "rules_fired": self.rules_fired, "reward_terms": None, "confidence": self.confidence,
                "explanation": {**(self.explanation or {}), "alarms": self.alarms,
                                "low_confidence": self.low_confidence},
                "cmd_id": str(self.command.cmd_id), "ack_status": "pending"}


def action_dict(action: np.ndarray, zones: int) -> dict[str, Any]:
    """An action vector as the decision record shows it: valves on/off, pump and light percent."""
    return {"valves": [int(v >= 0.5) for v in action[:zones]], "pump_pct": float(action[zones]),
            "light_pct": float(action[zones + 1])}

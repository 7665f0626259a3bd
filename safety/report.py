"""What the safety layer decided and why: immutable records for the audit trail.

Reports hold read-only copies of the arrays so a record cannot be altered after the fact,
and every change to an action is a :class:`RuleFiring` naming the rule that made it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike


def frozen_array(values: ArrayLike) -> np.ndarray:
    """Read-only float64 copy, so records cannot be mutated through a shared buffer."""
    arr = np.array(values, dtype=np.float64, copy=True)
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, slots=True)
class RuleFiring:
    """One rule changing one actuator's value, e.g. ``valve[3]`` from 1.0 to 0.0."""

    rule_id: str
    actuator: str
    before: float
    after: float
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Note:
    """An observation that did not change the action (e.g. a rule that could not be checked)."""

    rule_id: str
    subject: str
    detail: str


@dataclass(frozen=True, eq=False)
class SafetyReport:
    """The clipper's input, output and every rule that fired, in the order applied."""

    action_in: np.ndarray
    action_out: np.ndarray
    firings: tuple[RuleFiring, ...] = ()
    notes: tuple[Note, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "action_in", frozen_array(self.action_in))
        object.__setattr__(self, "action_out", frozen_array(self.action_out))
        object.__setattr__(self, "firings", tuple(self.firings))
        object.__setattr__(self, "notes", tuple(self.notes))

    def fired(self, rule_id: str) -> bool:
        """Whether ``rule_id`` changed any actuator in this step."""
        return any(f.rule_id == rule_id for f in self.firings)

    @property
    def rule_ids(self) -> tuple[str, ...]:
        """Distinct ids of the rules that fired, in first-firing order."""
        return tuple(dict.fromkeys(str(f.rule_id) for f in self.firings))

    def firings_for(self, actuator: str) -> tuple[RuleFiring, ...]:
        """The firings that touched one actuator, e.g. ``"pump"`` or ``"valve[2]"``."""
        return tuple(f for f in self.firings if f.actuator == actuator)


@dataclass(frozen=True, eq=False)
class Decision:
    """The ensemble's voted action with how far its members agreed.

    ``action`` is a well-formed action but not yet a safe one: it still goes through the
    clipper. ``low_confidence`` lets the caller fall back (hold, expert controller, alert).
    """

    action: np.ndarray
    disagreement: float
    low_confidence: bool
    reasons: tuple[str, ...]
    used_members: tuple[int, ...] = ()
    dropped_members: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "action", frozen_array(self.action))
        object.__setattr__(self, "reasons", tuple(self.reasons))

    @property
    def confidence(self) -> float:
        """``1 - disagreement``, in [0, 1]."""
        return 1.0 - self.disagreement

    def has(self, reason: str) -> bool:
        """Whether ``reason`` is among the decision's reason codes."""
        return reason in self.reasons

"""One greenhouse's decision memory as one immutable value: everything a decision or a mode change writes.

The stages compute a new :class:`ControllerState` from the old one and the controller keeps the
latest, so what a decision changed is one replacement to look at, and a snapshot is this value
serialised. Nothing changes a state in place: its arrays are read-only copies.

The estimator, the crop twin and the observation builder still keep their own state as objects
(:class:`control.decision_setup.DecisionMemory`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, TypeVar, cast

import numpy as np

from control.records import Mode, ModeEvent
from control.valve_evidence import ValveEvidence
from safety import safe_state

T = TypeVar("T")

ARRAYS = ("manual_action", "prev_action", "valve_failed", "water_today_l")
"""The fields held as read-only float arrays."""


def frozen(values: Any) -> np.ndarray:
    """A read-only float copy: the caller's array stays the caller's, and the state's stays put. An
    array that is already one (a field carried over by ``replace``) is kept, not copied again."""
    if (isinstance(values, np.ndarray) and values.dtype == np.float64 and not values.flags.writeable
            and values.base is None):
        return values
    out = np.array(values, dtype=np.float64)
    out.flags.writeable = False
    return out


def _when(value: str | None) -> datetime | None:
    return None if value is None else datetime.fromisoformat(value)


@dataclass(frozen=True, eq=False)
class ControllerState:
    """A controller's counters, modes and memory between two decisions (compare with :meth:`to_json`:
    arrays have no single truth value, so the value defines no ``==``)."""

    manual_action: np.ndarray
    prev_action: np.ndarray
    """The last command's action: the clipper's rate and dwell limits count from it."""
    valve_failed: np.ndarray
    """1.0 for a valve the edge box held open that stayed closed, until it is seen open (as in the twin)."""
    water_today_l: np.ndarray
    valve_changed_at: tuple[datetime | None, ...]
    """When each valve last switched (dwell limits); None: never."""
    mode: Mode = "auto"
    estop_latched: bool = False
    manual_actor: str = "operator:manual"
    """Who set the manual action: its decisions are that operator's demonstrations."""
    seq: int = 0
    """The last decision's or mode event's number: records never share one."""
    cmd_seq: int = 0
    valve_evidence: ValveEvidence = field(default_factory=ValveEvidence)
    """The commands sent and what the box was seen holding: when feedback is evidence."""
    day: str | None = None
    """The site-local date the daily totals count."""
    lights_hours_today: float = 0.0
    """Lamp hours since site-local midnight: the one count the safety cap, the observation and the
    API read (the crop twin keeps none of its own)."""
    last_ts: datetime | None = None

    def __post_init__(self) -> None:
        for name in ARRAYS:
            object.__setattr__(self, name, frozen(getattr(self, name)))
        object.__setattr__(self, "valve_changed_at", tuple(self.valve_changed_at))

    @classmethod
    def initial(cls, zones: int) -> ControllerState:
        """A controller that never decided: auto mode, everything off, nothing counted."""
        return cls(manual_action=safe_state(zones), prev_action=safe_state(zones),
                   valve_failed=np.zeros(zones), water_today_l=np.zeros(zones),
                   valve_changed_at=(None,) * zones)

    @property
    def zones(self) -> int:
        return len(self.valve_changed_at)

    @property
    def effective_mode(self) -> Mode:
        """The mode a command carries: a latched e-stop overrides the selected mode."""
        return "estop" if self.estop_latched else self.mode

    # ---- transitions: each returns a new value ---------------------------------------------------
    def rolled(self, day: str) -> ControllerState:
        """On a new site-local day the daily water and light totals the caps count against start again."""
        if day == self.day:
            return self
        return replace(self, day=day, water_today_l=np.zeros(self.zones), lights_hours_today=0.0)

    def booked(self, zone_water: np.ndarray, lamp_hours: float) -> ControllerState:
        """A step's measured water per zone and lamp hours added to today's totals."""
        return replace(self, water_today_l=self.water_today_l + zone_water,
                       lights_hours_today=self.lights_hours_today + lamp_hours)

    def sent(self, action: np.ndarray) -> tuple[ControllerState, list[int]]:
        """The next command's number taken and its valves and pump noted as evidence to come; and those
        valves."""
        valves = [int(v >= 0.5) for v in action[: self.zones]]
        cmd_seq = self.cmd_seq + 1
        return replace(self, cmd_seq=cmd_seq,
                       valve_evidence=self.valve_evidence.with_sent(
                           cmd_seq, valves, float(action[self.zones]) > 0.0)), valves

    def decided(self, action: np.ndarray, ts: datetime) -> ControllerState:
        """A decision at ``ts`` took ``action``: it becomes the previous action (a valve it switches starts
        its dwell time), ``ts`` the last time heard, and the decision takes the next seq."""
        z = self.zones
        changed = tuple(ts if (a >= 0.5) != (p >= 0.5) else t
                        for a, p, t in zip(action[:z], self.prev_action[:z], self.valve_changed_at,
                                           strict=True))
        return replace(self, prev_action=action, valve_changed_at=changed, last_ts=ts, seq=self.seq + 1)

    def moved(self, gh: str, to: Mode, actor: str, reason: str, ts: datetime,
              **changes: Any) -> tuple[ControllerState, ModeEvent]:
        """A mode change and what comes with it as one new state, and its event (the next seq)."""
        state = replace(self, mode=to, seq=self.seq + 1, **changes)
        return state, ModeEvent(gh, state.seq, ts, actor, self.mode, to, reason)

    def valve_ages(self, ts: datetime) -> np.ndarray:
        """Seconds each valve has held its state (dwell limits); never switched counts as very old."""
        return np.array([1e9 if t is None else (ts - t).total_seconds() for t in self.valve_changed_at])

    # ---- persistence: the controller snapshot's keys, in its order --------------------------------
    def to_json(self) -> dict[str, Any]:
        """The snapshot's entries for this value (the controller adds the estimator's and the crop's)."""
        return {"mode": self.mode, "estop_latched": self.estop_latched,
                "manual_action": self.manual_action.tolist(), "manual_actor": self.manual_actor,
                "seq": self.seq, "cmd_seq": self.cmd_seq,
                "prev_action": self.prev_action.tolist(), "valve_failed": self.valve_failed.tolist(),
                "commands_sent": self.valve_evidence.to_json(),
                "valve_changed_at": [None if t is None else t.isoformat() for t in self.valve_changed_at],
                "water_today_l": self.water_today_l.tolist(), "lights_hours_today": self.lights_hours_today,
                "day": self.day, "last_ts": None if self.last_ts is None else self.last_ts.isoformat()}

    @classmethod
    def from_json(cls, snap: dict[str, Any], zones: int) -> ControllerState:
        """The value :meth:`to_json` wrote, or a snapshot written before the manual actor, the failed-valve
        latch or the command evidence were kept (their defaults then)."""
        return cls(mode=cast(Mode, snap["mode"]), estop_latched=bool(snap["estop_latched"]),
                   manual_action=snap["manual_action"],
                   manual_actor=str(snap.get("manual_actor", "operator:manual")),
                   seq=int(snap["seq"]), cmd_seq=int(snap["cmd_seq"]), prev_action=snap["prev_action"],
                   valve_failed=snap.get("valve_failed", np.zeros(zones)),
                   valve_evidence=ValveEvidence.from_json(snap.get("commands_sent")),
                   valve_changed_at=tuple(_when(v) for v in snap["valve_changed_at"]),
                   water_today_l=snap["water_today_l"], lights_hours_today=float(snap["lights_hours_today"]),
                   day=snap["day"], last_ts=_when(snap["last_ts"]))


class StateField(Generic[T]):
    """``ctl.<name>`` reads ``ctl.state.<name>``: code outside the control path keeps reading the
    controller. It cannot be assigned: a change is a new state value (``ctl.state = replace(...)``, or
    one of the controller's methods), so every write is one replacement to find."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:  # looked up on the class (introspection): the descriptor itself
            return cast(T, self)
        return cast(T, getattr(obj.state, self.name))

    def __set__(self, obj: Any, value: T) -> None:
        # Defined only to refuse: without it an assignment would shadow the state with a stale copy.
        raise AttributeError(f"{self.name} is part of the controller's state: replace the state value "
                             f"(ctl.state = replace(ctl.state, {self.name}=...)) or use a controller method")

"""One message on its way through the control path: what waits (:class:`Pending`) and what each
stage has added so far (:class:`Step`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from control.decision_setup import DecisionMemory, DecisionSetup
from control.outlook import Outlook
from control.records import ModeEvent
from twin.estimator import GreenhouseEstimate
from wire.topics import Telemetry


@dataclass(frozen=True)
class Pending:
    """One greenhouse's accepted telemetry, waiting for its decision, with the set-up it is decided
    under and the memory it moves on (``GreenhouseController.pending`` builds it)."""

    setup: DecisionSetup
    memory: DecisionMemory
    tel: Telemetry
    outlook: Outlook | None = None
    """The site's weather and price outlook at decision time (None: flat, see the observation)."""


@dataclass
class Step:
    """A decision between its stages; each stage fills the fields below its own."""

    item: Pending
    # accounting (estimation.begin)
    dt_s: float
    alarms: list[str]
    zone_water: np.ndarray
    day: float
    events: list[ModeEvent] = field(default_factory=list)
    without_flow: np.ndarray | None = None
    """Valves the box held open while its pump ran and nothing flowed: a dead-head (None: none)."""
    # evapotranspiration and the Kalman update (estimation.estimate)
    etc_mm: float = 0.0
    estimate: GreenhouseEstimate | None = None
    # the policy's view (estimation.observe)
    moisture: np.ndarray | None = None
    sensor_ok: np.ndarray | None = None
    obs: np.ndarray | None = None
    outlook: Outlook | None = None
    """The site outlook the observation was built on, moved on to the decision's hour."""
    # every member's action, batched (proposal.propose)
    members: np.ndarray | None = None

    @property
    def setup(self) -> DecisionSetup:
        """The set-up the message was taken under: every stage of one decision reads the same one."""
        return self.item.setup

    @property
    def memory(self) -> DecisionMemory:
        """The greenhouse's memory: its current state and the objects a decision changes in place."""
        return self.item.memory

"""What a decision reads but never writes (:class:`DecisionSetup`), and the objects that still keep
state of their own between decisions (:class:`DecisionMemory`).

A stage takes the set-up, the memory and the message; it never reaches for a controller, so the
control path's modules need not know the controller exists. The controller builds the set-up and
builds it anew whenever settings are applied or a proposer is swapped: a decision under way keeps
the one it began with.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, cast
from zoneinfo import ZoneInfo

import numpy as np

from control.crop_twin import CropTwin
from control.observation import ObservationBuilder
from control.records import ZoneSetup
from control.setup import GreenhouseSetup, SetupChange
from control.state import ControllerState
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from twin.config import ClimateConfig, CropConfig
from twin.estimator import GreenhouseEstimator

if TYPE_CHECKING:
    from policy.ensemble import Ensemble

T = TypeVar("T")


class Proposer(Protocol):
    """An ensemble as the controller, the writer and the forecast see it.

    The threshold expert serves behind the same face (:class:`control.proposal.ExpertProposer`), so
    no caller asks which kind it holds: what differs is declared here.
    """

    @property
    def policy_version(self) -> str:
        """The ensemble's version, as its decisions record it."""
        ...

    @property
    def ensemble(self) -> Ensemble | None:
        """The trained members an explanation attributes a decision to; None for a rule, whose
        decisions need no attribution (the expert)."""
        ...

    def propose(self, obs: np.ndarray) -> np.ndarray:
        """(D,) observation -> (K, Z + 2) member actions."""
        ...

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        """(N, D) observations -> (K, N, Z + 2): a micro-batch in one forward."""
        ...


@dataclass(frozen=True, eq=False)
class DecisionSetup:
    """One greenhouse's decision set-up at one settings version and proposer (identity compares: it
    holds a proposer and arrays)."""

    gh: str
    settings: GreenhouseSetup
    """The operator settings in force; :attr:`limits` already hold them."""
    limits: SafetyLimits
    """The site's safety limits, each cap the lower of it and the setting."""
    proposer: Proposer
    expert: ThresholdExpert
    """The low-confidence fallback, tuned behind the interlock it is served with."""
    step_s: float
    threshold: float
    """The members' disagreement above which the expert decides."""
    ttl_s: float
    site_tz: ZoneInfo
    """The daily caps count the site's calendar day, whatever offset an edge box writes."""
    new_cmd_id: Callable[[], uuid.UUID]
    crop: CropConfig
    climate: ClimateConfig
    gamma: float
    """The psychrometric constant of :attr:`climate`."""
    saturation: np.ndarray = field(init=False)
    """Each zone's saturation, from :attr:`zones`."""

    def __post_init__(self) -> None:
        saturation = np.array([z.saturation for z in self.zones], dtype=np.float64)
        saturation.flags.writeable = False
        object.__setattr__(self, "saturation", saturation)

    @property
    def zones(self) -> tuple[ZoneSetup, ...]:
        """The zones as the settings in force define them."""
        return self.settings.zones

    @property
    def z(self) -> int:
        return len(self.zones)

    def site_day(self, ts: datetime) -> str:
        """The site's calendar date at ``ts``: the daily caps count it, whatever offset the box writes."""
        return ts.astimezone(self.site_tz).date().isoformat()


@dataclass(eq=False)
class DecisionMemory:
    """The controller's current state and the objects a decision changes in place, as one holder the
    stages are handed (the controller shares it: its ``state`` is :attr:`state`, so a mode change
    between two stages is what the next stage reads)."""

    state: ControllerState
    estimator: GreenhouseEstimator
    obs_builder: ObservationBuilder
    crop_twin: CropTwin
    """The crop beside this greenhouse: crop age, today's light and lamp hours, yield to date."""
    history: Any = None
    """policy.explain.ExplanationHistory, created with the first explanation."""
    setup_change: SetupChange | None = None
    """A settings change not yet used by a decision: the next decision's record carries it."""


class SetupField(Generic[T]):
    """``ctl.<name>`` reads ``ctl.decision_setup.<field>``; assigning one builds a new set-up with it, so
    a decision under way keeps the set-up it began with."""

    def __init__(self, source: str | None = None) -> None:
        self.source = source

    def __set_name__(self, owner: type, name: str) -> None:
        self.source = self.source or name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return cast(T, self)
        return cast(T, getattr(obj.decision_setup, cast(str, self.source)))

    def __set__(self, obj: Any, value: T) -> None:
        obj.decision_setup = replace(obj.decision_setup, **{cast(str, self.source): value})


class MemoryField(Generic[T]):
    """``ctl.<name>`` is ``ctl.memory.<name>``: the controller and the stages share one object."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, obj: Any, owner: type | None = None) -> T:
        if obj is None:
            return cast(T, self)
        return cast(T, getattr(obj.memory, self.name))

    def __set__(self, obj: Any, value: T) -> None:
        setattr(obj.memory, self.name, value)

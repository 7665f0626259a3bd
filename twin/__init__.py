"""The greenhouse digital twin: batched soil-water, climate and weather simulation."""

from twin.config import FaultConfig, TwinConfig
from twin.dynamics import TERMINATION_REASONS, TwinModel
from twin.env import TWIN_VERSION, GreenhouseTwin
from twin.spec import OBS_VERSION, ActionSpec, ObservationSpec
from twin.types import StepOut, TwinParams, TwinState

__all__ = [
    "OBS_VERSION",
    "TERMINATION_REASONS",
    "TWIN_VERSION",
    "ActionSpec",
    "FaultConfig",
    "GreenhouseTwin",
    "ObservationSpec",
    "StepOut",
    "TwinConfig",
    "TwinModel",
    "TwinParams",
    "TwinState",
]

"""Stable identifiers of the clipper's rules and the vote's reason codes.

Ids are part of the audit trail and of alerting queries, so they never change meaning;
a new rule gets a new id. Both enums are ``StrEnum``: members compare equal to plain strings.
"""

from __future__ import annotations

from enum import StrEnum


class RuleId(StrEnum):
    """One id per hard limit the clipper enforces, listed in the order it applies them."""

    INPUT_SHAPE = "input.shape"
    """The action is not a numeric vector of length zones + 2; the safe state is proposed instead."""
    INPUT_NON_FINITE = "input.non_finite"
    """A NaN/inf entry is replaced by the previous safe value (0 when that is unknown)."""
    VALVES_BINARY = "valves.binary"
    """A valve value other than 0 or 1 is thresholded at 0.5."""
    PUMP_RANGE = "pump.range"
    """Pump clipped to [0, max]; a running command below min is raised to min."""
    LIGHTS_RANGE = "lights.range"
    """Lights clipped to [0, 100] %."""
    ZONE_SENSOR_FAILED = "zone.sensor_failed"
    """A zone without a trustworthy moisture reading follows the fallback schedule."""
    ZONE_DAILY_WATER_CAP = "zone.daily_water_cap"
    """A zone at (or not known to be under) its daily water cap is closed."""
    ZONE_SATURATION_MARGIN = "zone.saturation_margin"
    """A zone at or above saturation minus the margin is closed."""
    VALVE_FAILED = "valve.failed"
    """A valve that stayed closed when told to open is closed (it is no path for the pump) until seen open."""
    VALVE_MIN_DWELL = "valve.min_dwell"
    """A valve change before its minimum on/off time is undone (hard closes excepted)."""
    VALVES_MAX_OPEN = "valves.max_open"
    """More open valves than the pump can feed: the lowest-priority ones are closed."""
    PUMP_NEEDS_OPEN_VALVE = "pump.needs_open_valve"
    """A pump with no open valve would dead-head: it is stopped."""
    PUMP_RAMP_RATE = "pump.ramp_rate"
    """Pump speed changes are rate limited; stopping is always allowed."""
    PUMP_SINGLE_VALVE_CAP = "pump.single_valve_cap"
    """Exactly one valve open: the pump runs at most at the single-valve cap (the relief valve's setting)."""
    LIGHTS_DAILY_HOURS_CAP = "lights.daily_hours_cap"
    """Lights off once today's lit hours reach the cap (or are unknown)."""
    LIGHTS_STRONG_SUN = "lights.strong_sun"
    """Lights off while known natural PAR is at or above the strong-sun level."""
    LIGHTS_DARK_PERIOD = "lights.dark_period"
    """Lights off in the crop's daily dark period (or when the local hour is unknown)."""


CONTEXT_INVALID: str = "context.invalid"
"""Note code: a context field was unusable and was replaced by its conservative value."""


class VoteReason(StrEnum):
    """Reason codes attached to every :class:`~safety.report.Decision`."""

    OK = "vote.ok"
    """Quorum met and confidence above the threshold."""
    LOW_CONFIDENCE = "vote.low_confidence"
    """Quorum met but the members disagree more than the threshold allows."""
    MEMBER_INVALID = "vote.member_invalid"
    """At least one member proposed NaN/inf/out-of-range values and was dropped."""
    NO_QUORUM = "vote.no_quorum"
    """Too few valid members: the decision is the safe state."""
    BAD_SHAPE = "vote.bad_shape"
    """The proposals are not a numeric (K, zones + 2) array."""
    BAD_ARGUMENT = "vote.bad_argument"
    """Weights, threshold or quorum were unusable and were replaced by their defaults."""

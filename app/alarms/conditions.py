"""Process alarms from what the service already knows: facts in, which alarms hold out.

:func:`evaluate` is pure: a greenhouse's :class:`Facts` and its :class:`Thresholds` give
:class:`Reading` s, one per alarm kind that holds now. :class:`ConditionTracker` turns readings into
alarms: a kind is raised once it has held for its hold time and cleared as soon as a reading no
longer reports it. Where the facts cannot tell (no telemetry yet, or stale telemetry for the zone
checks) a code is left out of ``known`` and its alarms keep their state: an alarm is neither raised
nor cleared without evidence.

Zone and fallback durations run on the greenhouse's own clock (its telemetry timestamps: a plant
simulated faster than real time is dry for its own half hour); the edge box's silence and the
writer's lag run on the service's clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field


class Thresholds(BaseModel):
    """A greenhouse's alarm limits; every field has the site's default, so an override names only what
    differs."""

    model_config = ConfigDict(extra="forbid")

    zone_band_minutes: float = Field(30.0, ge=1.0, le=24 * 60.0,
                                     description="minutes a zone's moisture may stay outside its band before "
                                                 "zone_dry / zone_wet is raised")
    zone_band_margin_pct: float = Field(0.0, ge=0.0, le=20.0,
                                        description="percentage points of VWC beyond the band before a zone "
                                                    "counts as dry or wet")
    water_cap_pct: float = Field(100.0, ge=50.0, le=100.0,
                                 description="share of a zone's daily water cap that raises water_cap [%]")
    edge_offline_minutes: float = Field(5.0, ge=1.0, le=24 * 60.0,
                                        description="minutes without telemetry before edge_offline is raised")
    expert_fallback_minutes: float = Field(10.0, ge=1.0, le=24 * 60.0,
                                           description="minutes every decision fell back to the expert rule "
                                                       "before expert_fallback is raised")
    audit_behind_s: float = Field(120.0, ge=10.0, le=86400.0,
                                  description="seconds a record may wait to be stored or sealed before "
                                              "audit_behind is raised")


@dataclass(frozen=True)
class Facts:
    """One greenhouse as the service knows it now (read from the controller between decisions)."""

    gh: str
    now: datetime
    """The service's clock."""
    telemetry_ts: datetime | None
    """The latest decided telemetry's timestamp (None: never heard since registration)."""
    silent_s: float = 0.0
    """Seconds since the service last saw new telemetry decided, on its own clock (an edge clock that runs
    ahead, as a simulated plant's does, cannot hide a silent box)."""
    moisture: tuple[float, ...] = ()
    band: tuple[tuple[float, float], ...] = ()
    water_today_l: tuple[float, ...] = ()
    water_cap_l: tuple[float, ...] = ()
    valves_failed: tuple[int, ...] = ()
    probes_faulty: tuple[int, ...] = ()
    estop_latched: bool = False
    fallback_since: datetime | None = None
    """Timestamp of the first of the current run of expert fallbacks (greenhouse clock)."""
    outlook_alarms: tuple[str, ...] = ()
    writer_behind_s: float = 0.0
    """The longer of: the oldest journaled record not yet stored, audit events waiting to be sealed."""


@dataclass(frozen=True)
class Reading:
    kind: str
    at: datetime
    """When it was seen, on the clock its hold time counts on."""
    hold_s: float = 0.0


@dataclass(frozen=True)
class Evaluation:
    readings: list[Reading]
    known: frozenset[str]
    """Codes the facts decided: their kinds not among the readings do not hold."""


def _zones(kind: str, zones: list[int] | tuple[int, ...]) -> str:
    return f"{kind}:{','.join(str(i) for i in zones)}"


def evaluate(f: Facts, th: Thresholds) -> Evaluation:
    """Which alarm kinds hold for one greenhouse, and which codes the facts could judge at all."""
    out: list[Reading] = []
    known = {"outlook_weather", "outlook_prices", "outlook", "estop_latched", "audit_behind"}
    now, ts = f.now, f.telemetry_ts
    if f.estop_latched:
        out.append(Reading("estop_latched", now))
    if f.writer_behind_s > th.audit_behind_s:
        out.append(Reading("audit_behind", now))
    out += [Reading(kind, now) for kind in f.outlook_alarms]
    if ts is None:  # never heard: nothing to say about the zones, the box or the loop
        return Evaluation(out, frozenset(known))
    known |= {"edge_offline", "expert_fallback", "valve_failed", "water_cap"}
    offline = f.silent_s > th.edge_offline_minutes * 60.0
    if offline:
        out.append(Reading("edge_offline", now))
    if f.fallback_since is not None \
            and ts - f.fallback_since >= timedelta(minutes=th.expert_fallback_minutes):
        out.append(Reading("expert_fallback", ts))
    if f.valves_failed:
        out.append(Reading(_zones("valve_failed", f.valves_failed), ts))
    capped = [i for i, (w, cap) in enumerate(zip(f.water_today_l, f.water_cap_l, strict=True))
              if cap > 0 and w >= cap * th.water_cap_pct / 100.0 - 1e-9]
    out += [Reading(f"water_cap:{i}", ts) for i in capped]
    if offline:  # the estimate runs on stale probes: dry, wet and probe states are left as they are
        return Evaluation(out, frozenset(known))
    known |= {"zone_dry", "zone_wet", "probe_fault"}
    margin, hold = th.zone_band_margin_pct / 100.0, th.zone_band_minutes * 60.0
    for i, (theta, (low, high)) in enumerate(zip(f.moisture, f.band, strict=True)):
        if theta < low - margin:
            out.append(Reading(f"zone_dry:{i}", ts, hold))
        elif theta > high + margin:
            out.append(Reading(f"zone_wet:{i}", ts, hold))
    out += [Reading(f"probe_fault:{i}", ts) for i in f.probes_faulty]
    return Evaluation(out, frozenset(known))


class ConditionTracker:
    """Which watched alarms are active, from successive evaluations (one owner: the housekeeping round;
    readers on other threads only look up single keys)."""

    def __init__(self) -> None:
        self._pending: dict[str, dict[str, datetime]] = {}
        """greenhouse -> kind -> when it was first seen holding, on its reading's clock."""
        self._active: dict[str, dict[str, datetime]] = {}
        """greenhouse -> kind -> when it was raised (service clock)."""
        self.cleared_at: dict[tuple[str, str], datetime] = {}
        """(greenhouse, kind) -> when it last cleared (service clock)."""

    def apply(self, gh: str, ev: Evaluation, now: datetime) -> tuple[list[str], list[str]]:
        """Fold one evaluation in; returns the kinds raised and cleared by it."""
        pending = self._pending.setdefault(gh, {})
        active = self._active.setdefault(gh, {})
        raised: list[str] = []
        holding = {r.kind for r in ev.readings}
        for r in ev.readings:
            since = pending.setdefault(r.kind, r.at)
            if r.kind not in active and (r.at - since).total_seconds() >= r.hold_s:
                active[r.kind] = now
                self.cleared_at.pop((gh, r.kind), None)
                raised.append(r.kind)
        cleared: list[str] = []
        for kind in [k for k in {*pending, *active} if k not in holding and k.partition(":")[0] in ev.known]:
            pending.pop(kind, None)
            if active.pop(kind, None) is not None:
                self.cleared_at[(gh, kind)] = now
                cleared.append(kind)
        return raised, cleared

    def forget(self, gh: str) -> list[str]:
        """A greenhouse this replica no longer decides: its watched alarms are another's to judge."""
        self._pending.pop(gh, None)
        return list(self._active.pop(gh, {}))

    def is_active(self, gh: str, kind: str) -> bool:
        return kind in self._active.get(gh, {})

    def active(self) -> list[tuple[str, str, datetime]]:
        """(greenhouse, kind, raised at) of every active watched alarm."""
        return [(gh, kind, at) for gh, kinds in list(self._active.items())
                for kind, at in list(kinds.items())]

"""One site-local clock for a decision: the safety clipper's dark period and lamp-hour cap read the
same local time as the observation, and today's lamp hours are one count everywhere."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import numpy as np

from control import ExpertProposer, GreenhouseController, ZoneSetup
from policy.tuning import served_expert
from safety import SafetyLimits
from wire.topics import Telemetry

ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]
LAMPS_ON = np.array([0.0] * 6 + [0.0, 100.0])


def _telemetry(ts: datetime, seq: int, light_pct: float = 100.0) -> Telemetry:
    return Telemetry(ts=ts, boot_id="b", seq=seq, soil_vwc=[[0.24, 0.24]] * 6, air_temp_c=20.0,
                     air_rh_pct=70.0,
                     par_umol_m2_s=0.0, co2_ppm=600.0, leaf_temp_c=19.0, flow_l_min=0.0, pump_current_a=0.0,
                     valve_open=[0] * 6, pump_pct=0.0, light_pct=light_pct, estop=False)


def _controller(tz: str = "Europe/Amsterdam") -> GreenhouseController:
    ctl = GreenhouseController("gh1", ZONES, ExpertProposer(served_expert(6)), SafetyLimits.default(),
                               site_timezone=tz)
    ctl.set_mode("manual", "operator:test", "lamps on", datetime(2026, 12, 1, tzinfo=UTC), LAMPS_ON)
    return ctl


def _dark_fired(ctl: GreenhouseController, ts: datetime) -> tuple[bool, float]:
    d = ctl.on_telemetry(_telemetry(ts, ctl.seq + 1))
    return any(r["rule"] == "lights.dark_period" for r in d.rules_fired), d.clipped["light_pct"]


def test_an_edge_box_in_utc_gets_the_sites_dark_period() -> None:
    """Amsterdam in winter is UTC+1: 22:30Z is 23:30 local (dark), 04:30Z is 05:30 local (lit)."""
    ctl = _controller()
    assert _dark_fired(ctl, datetime(2026, 12, 2, 21, 30, tzinfo=UTC)) == (False, 100.0)  # 22:30 local
    assert _dark_fired(ctl, datetime(2026, 12, 2, 22, 30, tzinfo=UTC)) == (True, 0.0)  # 23:30 local
    ctl = _controller()
    assert _dark_fired(ctl, datetime(2026, 12, 3, 3, 30, tzinfo=UTC)) == (True, 0.0)  # 04:30 local
    assert _dark_fired(ctl, datetime(2026, 12, 3, 4, 30, tzinfo=UTC)) == (False, 100.0)  # 05:30 local


def test_the_offset_the_box_writes_does_not_matter() -> None:
    """The same instant written with another offset is the same site-local hour."""
    instant = datetime(2026, 12, 2, 22, 30, tzinfo=UTC)
    for offset_h in (0, 5, -8):
        ctl = _controller()
        ts = instant.astimezone(timezone(timedelta(hours=offset_h)))
        assert _dark_fired(ctl, ts) == (True, 0.0)


def test_one_count_of_lamp_hours_for_cap_observation_and_api() -> None:
    """The crop twin keeps no count of its own: a controller restored with today's cap count shows
    that count in the observation and the record, and both restart at site-local midnight."""
    ctl = _controller()
    t0 = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)  # 13:00 local
    ctl.on_telemetry(_telemetry(t0, 1))
    snap = ctl.snapshot()
    snap["lights_hours_today"] = 10.0  # e.g. counted by an earlier replica before a restart
    ctl = _controller()
    ctl.restore(snap)
    sl = ctl.obs_builder.spec.slices["lamp_hours_today"]
    d = ctl.on_telemetry(_telemetry(t0 + timedelta(minutes=1), ctl.seq + 1))
    expected = 10.0 + 1.0 / 60.0
    assert ctl.lights_hours_today == expected
    assert d.observation is not None and d.observation[sl.start] == np.float32(expected)
    assert d.record()["estimate"]["crop_twin"]["lamp_hours_today"] == round(expected, 3)
    assert ctl.crop_estimates()["lamp_hours_today"] == round(expected, 3)
    # 23:00 UTC is midnight in Amsterdam: a new day for the cap and the observation alike.
    d = ctl.on_telemetry(_telemetry(datetime(2026, 12, 2, 23, 0, 30, tzinfo=UTC), ctl.seq + 1, light_pct=0.0))
    assert ctl.lights_hours_today == 0.0
    assert d.observation is not None and d.observation[sl.start] == 0.0
    assert d.record()["estimate"]["crop_twin"]["lamp_hours_today"] == 0.0

"""Edge input the service must not trust too far: clocks ahead, the site's calendar day, floods.

The bridge's callbacks are driven directly with paho messages (no broker needed): what they
admit or refuse is decided before any network effect.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import paho.mqtt.client as mqtt
import pytest

from app.intake import Intake
from app.mqtt.admission import RateLimit
from app.mqtt.bridge import MqttBridge
from control import ExpertProposer, GreenhouseController, ZoneSetup
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from wire.topics import (
    Ack,
    Command,
    EstopEvent,
    Telemetry,
    ack_topic,
    encode,
    estop_topic,
    telemetry_topic,
)

GH = "gh1"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(2)]


def _telemetry(seq: int, ts: datetime) -> Telemetry:
    return Telemetry(ts=ts, boot_id="b1", seq=seq, soil_vwc=[[0.2, 0.2]] * 2, air_temp_c=20.0,
                     air_rh_pct=50.0, par_umol_m2_s=0.0, co2_ppm=400.0, leaf_temp_c=19.5, flow_l_min=0.0,
                     pump_current_a=0.0, valve_open=[0, 0], pump_pct=0.0, light_pct=0.0, estop=False)


def _msg(topic: str, payload: bytes) -> mqtt.MQTTMessage:
    msg = mqtt.MQTTMessage(topic=topic.encode())
    msg.payload = payload
    return msg


class Seen:
    def __init__(self) -> None:
        self.telemetry: list[Telemetry] = []
        self.acks: list[Ack] = []
        self.estops: list[EstopEvent] = []
        self.shed: list[str] = []


def _bridge(seen: Seen, **kw: Any) -> MqttBridge:
    return MqttBridge("mqtt://127.0.0.1:1", zones=2, wall_clock=NOW.timestamp, max_future_s=30.0,
                      on_telemetry=lambda _g, t: seen.telemetry.append(t),
                      on_ack=lambda _g, a: seen.acks.append(a),
                      on_estop=lambda _g, e: seen.estops.append(e), on_shed=seen.shed.append, **kw)


def _sent(bridge: MqttBridge) -> uuid.UUID:
    """The id of a command the bridge sent to ``GH`` (an ack for any other matches nothing)."""
    cmd = Command(cmd_id=uuid.uuid4(), ts=NOW, seq=1, ttl_s=30.0, mode="auto", valves=[0, 0], pump_pct=0.0,
                  light_pct=0.0, policy_version="test")
    bridge.tracker.record(GH, cmd)
    return cmd.cmd_id


def test_timestamps_beyond_the_skew_into_the_future_are_refused() -> None:
    seen = Seen()
    bridge = _bridge(seen)
    ahead, within = NOW + timedelta(minutes=5), NOW + timedelta(seconds=20)
    bridge.inbound.on_telemetry_msg(bridge.client, None,
                                    _msg(telemetry_topic(GH), encode(_telemetry(1, ahead))))
    bridge.inbound.on_telemetry_msg(bridge.client, None,
                                    _msg(telemetry_topic(GH), encode(_telemetry(2, within))))
    for ts in (ahead, within):
        ack = Ack(cmd_id=_sent(bridge), ts=ts, status="applied")
        bridge.inbound.on_ack_msg(bridge.client, None, _msg(ack_topic(GH), encode(ack)))
        press = EstopEvent(ts=ts, pressed=True, source="panel")
        bridge.inbound.on_estop_msg(bridge.client, None, _msg(estop_topic(GH), encode(press)))
    assert [t.seq for t in seen.telemetry] == [2]
    assert [a.ts for a in seen.acks] == [within] and [e.ts for e in seen.estops] == [within]
    assert bridge.stats["rejected"] == {"future": 3}


def test_a_flood_from_one_greenhouse_is_shed_and_counted_not_queued() -> None:
    seen = Seen()
    bridge = _bridge(seen, rate_limit=RateLimit(rate_per_s=0.001, burst=3))
    for seq in range(10):
        bridge.inbound.on_telemetry_msg(bridge.client, None,
                                        _msg(telemetry_topic(GH), encode(_telemetry(seq, NOW))))
    other = "gh2"  # its own bucket: one noisy box does not starve another
    bridge.inbound.on_telemetry_msg(bridge.client, None,
                                    _msg(telemetry_topic(other), encode(_telemetry(0, NOW))))
    assert [t.seq for t in seen.telemetry] == [0, 1, 2, 0]
    assert seen.shed == [GH] * 7 and bridge.stats["shed"] == 7


def test_rate_limit_refills_at_its_rate() -> None:
    limit = RateLimit(rate_per_s=2.0, burst=2)
    assert [limit.allow(GH, 0.0) for _ in range(3)] == [True, True, False]
    assert limit.allow(GH, 0.5) and not limit.allow(GH, 0.5)
    with pytest.raises(ValueError):
        RateLimit(rate_per_s=0)


def test_the_inbox_is_bounded_per_greenhouse_and_sheds_the_oldest() -> None:
    shed: list[tuple[str, str]] = []

    async def fill() -> Intake:
        intake = Intake({}, lambda _d, _a: None, max_waiting=2,
                        on_shed=lambda gh, why: shed.append((gh, why)))
        for seq in range(5):
            intake.put(GH, _telemetry(seq, NOW))
        intake.close()  # before the drainer runs: only the queue is under test
        return intake

    intake = asyncio.run(fill())
    assert intake.waiting == 2 and intake.shed == 3 and shed == [(GH, "inbox_full")] * 3
    assert [tel.seq for tel, _ in intake._inbox[GH]] == [3, 4]


def _controller(**kw: Any) -> GreenhouseController:
    return GreenhouseController(GH, ZONES, ExpertProposer(ThresholdExpert(zones=2)),
                                SafetyLimits.default().model_copy(update={"zones": 2}), step_s=60.0, **kw)


def test_a_far_future_timestamp_does_not_silence_the_watchdog() -> None:
    ctl = _controller(max_age_s=120.0, max_future_s=30.0)
    ctl.on_telemetry(_telemetry(1, NOW + timedelta(days=365)))
    d = ctl.watchdog(NOW)
    assert d is not None and "telemetry_stale" in d.alarms and d.command.pump_pct == 0
    fresh = _controller(max_age_s=120.0, max_future_s=30.0)
    fresh.on_telemetry(_telemetry(1, NOW + timedelta(seconds=10)))  # within the skew: still fresh
    assert fresh.watchdog(NOW) is None


def test_the_daily_cap_counts_the_sites_calendar_day_not_the_payloads_offset() -> None:
    ctl = _controller(site_timezone="Europe/Amsterdam")
    late_evening_utc = datetime(2026, 6, 1, 23, 30, tzinfo=UTC)  # 01:30 on 2 June in Amsterdam
    ctl.roll_day(late_evening_utc)
    assert ctl.day == "2026-06-02"
    ctl.state = replace(ctl.state, water_today_l=np.array([50.0, 0.0]))
    # The same site day, written by an edge box in another offset (its date reads 1 June):
    ctl.roll_day(late_evening_utc.astimezone(timezone(timedelta(hours=-10))) + timedelta(hours=1))
    assert ctl.day == "2026-06-02" and ctl.water_today_l[0] == 50.0
    ctl.roll_day(datetime(2026, 6, 2, 22, 30, tzinfo=UTC))  # 00:30 on 3 June in Amsterdam: a new day
    assert ctl.day == "2026-06-03" and ctl.water_today_l[0] == 0.0


def test_an_unknown_site_time_zone_is_refused() -> None:
    with pytest.raises(Exception, match="Nowhere/Atlantis"):
        _controller(site_timezone="Nowhere/Atlantis")

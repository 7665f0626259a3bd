"""PlantSim against the real broker, observed through the service's own MqttBridge."""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion

from app.mqtt.bridge import MqttBridge
from plantsim.sim import PlantSim
from wire.topics import Ack, Command, EstopEvent, Telemetry, ack_topic, command_topic, status_topic

pytestmark = pytest.mark.mqtt
ZONES = 3


def _wait(pred: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.02)
    return pred()


def _command(**overrides: Any) -> Command:
    fields: dict[str, Any] = {"cmd_id": uuid.uuid4(), "ts": datetime.now(UTC), "seq": 1, "ttl_s": 30.0,
                              "mode": "auto", "valves": [1, 0, 1], "pump_pct": 60.0, "light_pct": 20.0,
                              "policy_version": "test"}
    fields.update(overrides)
    return Command(**fields)


class Rig:
    """One simulated greenhouse plus the service bridge watching it. Acks are read off the bus as the box
    sent them (the bridge passes on only the first answer to a command it sent)."""

    def __init__(self, host: str, port: int) -> None:
        self.gh = f"t-{uuid.uuid4().hex[:12]}"
        self.url = f"mqtt://{host}:{port}"
        self.telemetry: queue.Queue[Telemetry] = queue.Queue()
        self.acks: queue.Queue[Ack] = queue.Queue()
        self.estops: queue.Queue[EstopEvent] = queue.Queue()
        self.rejected: list[str] = []
        self.bridge = MqttBridge(
            self.url, zones=ZONES, known_greenhouses=lambda g: g == self.gh,
            will_topic=f"greentwin/svc-{uuid.uuid4().hex[:10]}/status",
            on_telemetry=lambda _g, t: self.telemetry.put(t),
            on_estop=lambda _g, e: self.estops.put(e),
            on_reject=lambda g, reason, _d: self.rejected.append(reason) if g == self.gh else None,
            max_future_s=3600.0)  # the test steps the simulator faster than the wall clock
        self.sim = PlantSim(self.url, [self.gh], zones=ZONES, dt_s=60, seed=1)
        self.ack_reader = mqtt.Client(CallbackAPIVersion.VERSION2)
        subscribed = threading.Event()
        self.ack_reader.on_message = lambda _c, _u, msg: self.acks.put(Ack.model_validate_json(msg.payload))
        self.ack_reader.on_subscribe = lambda *_a: subscribed.set()
        self.ack_reader.connect(host, port)
        self.ack_reader.loop_start()
        self.ack_reader.subscribe(ack_topic(self.gh), qos=1)
        assert subscribed.wait(10)
        self.bridge.start()
        assert self.bridge.wait_ready(10)
        assert self.sim.start(10)

    @property
    def st(self) -> Any:
        return self.sim.state[self.gh]

    def step(self) -> Telemetry:
        sent = self.sim.step_once()[self.gh]
        got = self.telemetry.get(timeout=5)
        assert got == sent
        return got

    def send(self, cmd: Command) -> Ack:
        self.bridge.publish_command(self.gh, cmd)
        return self.acks.get(timeout=5)

    def close(self) -> None:
        self.sim.close()
        self.bridge.close()
        self.ack_reader.disconnect()
        self.ack_reader.loop_stop()
        cleaner = mqtt.Client(CallbackAPIVersion.VERSION2)
        cleaner.connect(self.bridge.target.host, self.bridge.target.port)
        cleaner.loop_start()
        for name in (status_topic(self.gh), self.bridge.will_topic):
            cleaner.publish(name, b"", qos=1, retain=True).wait_for_publish(5)
        cleaner.disconnect()
        cleaner.loop_stop()


@pytest.fixture
def rig(mqtt_available: tuple[str, int]) -> Iterator[Rig]:
    r = Rig(*mqtt_available)
    yield r
    r.close()


def test_telemetry_is_valid_and_accepted_by_the_bridge(rig: Rig) -> None:
    first, second = rig.step(), rig.step()
    assert (first.seq, second.seq) == (0, 1) and first.boot_id == second.boot_id
    assert second.ts - first.ts == timedelta(seconds=60) and first.ts.utcoffset() is not None
    assert len(first.soil_vwc) == ZONES and first.valve_open == [0] * ZONES and not first.estop
    rig.sim.inject(rig.gh, "sensor_nan", zone=1)
    assert rig.step().soil_vwc[1] == [None, None]  # a failed probe travels as null and still validates
    assert rig.rejected == []


def test_command_applied_once_even_when_published_twice(rig: Rig) -> None:
    cmd = _command()
    first, second = rig.send(cmd), rig.send(cmd)
    assert (first.status, second.status) == ("applied", "applied")
    assert first.cmd_id == second.cmd_id == cmd.cmd_id
    assert rig.st.applied_count == 1
    tel = rig.step()
    assert (tel.valve_open, tel.pump_pct, tel.light_pct) == ([1, 0, 1], 60.0, 20.0)
    assert tel.pump_current_a > 0 and tel.flow_l_min > 0


def test_expired_command_is_not_applied(rig: Rig) -> None:
    ack = rig.send(_command(ts=datetime.now(UTC) - timedelta(seconds=10), ttl_s=5.0))
    assert ack.status == "expired"
    assert rig.st.applied_count == 0 and rig.step().valve_open == [0] * ZONES


def test_silence_beyond_ttl_falls_back_to_safe_state(rig: Rig) -> None:
    assert rig.send(_command(ttl_s=0.4)).status == "applied"
    assert rig.step().valve_open == [1, 0, 1]
    time.sleep(0.5)
    tel = rig.step()
    assert (tel.valve_open, tel.pump_pct, tel.light_pct) == ([0] * ZONES, 0.0, 0.0)
    assert rig.st.failsafe


def test_estop_latches_until_released(rig: Rig) -> None:
    assert rig.send(_command()).status == "applied"
    rig.sim.press_estop(rig.gh)
    assert rig.estops.get(timeout=5).pressed is True
    tel = rig.step()
    assert tel.estop and tel.valve_open == [0] * ZONES and tel.pump_pct == 0.0
    refused = rig.send(_command())
    assert (refused.status, refused.reason) == ("rejected", "estop latched")
    rig.sim.release_estop(rig.gh)
    assert rig.estops.get(timeout=5).pressed is False
    tel = rig.step()
    assert not tel.estop and tel.valve_open == [0] * ZONES  # never resumes the pre-e-stop command
    assert rig.send(_command()).status == "applied"
    assert rig.step().valve_open == [1, 0, 1]


def test_bad_commands_are_rejected_with_a_reason(rig: Rig, mqtt_available: tuple[str, int]) -> None:
    wrong_zones = rig.send(_command(valves=[1, 1]))
    assert wrong_zones.status == "rejected" and (wrong_zones.reason or "").startswith("zone_count")
    body = json.loads(_command().model_dump_json())
    body["pump_pct"] = 150
    rig.bridge.client.publish(command_topic(rig.gh), json.dumps(body), qos=1)
    out_of_range = rig.acks.get(timeout=5)
    assert str(out_of_range.cmd_id) == body["cmd_id"]
    assert out_of_range.status == "rejected" and (out_of_range.reason or "").startswith("schema")
    assert rig.st.applied_count == 0


def test_stuck_valve_and_drift_faults(rig: Rig) -> None:
    assert rig.send(_command(valves=[1, 1, 1])).status == "applied"
    rig.sim.inject(rig.gh, "stuck_valve", zone=0)
    rig.sim.inject(rig.gh, "drift")
    assert rig.send(_command(valves=[0, 1, 1])).status == "applied"
    assert rig.sim._effective_action(rig.st)[0] == 1.0  # the plant ignores the close
    assert rig.step().valve_open == [0, 1, 1]  # telemetry reports the command, like a box without feedback
    assert rig.st.drift_vwc > 0
    rig.sim.clear_faults(rig.gh)
    assert rig.sim._effective_action(rig.st)[0] == 0.0


def test_broker_disconnect_fires_the_will_and_recovers(rig: Rig, mqtt_available: tuple[str, int]) -> None:
    seen: queue.Queue[bytes] = queue.Queue()
    watcher = mqtt.Client(CallbackAPIVersion.VERSION2)
    watcher.on_message = lambda _c, _u, msg: seen.put(msg.payload)
    watcher.connect(*mqtt_available)
    watcher.loop_start()
    try:
        watcher.subscribe(status_topic(rig.gh), qos=1)
        assert seen.get(timeout=5) == b"online"
        rig.sim.inject(rig.gh, "broker_disconnect", seconds=1)
        assert seen.get(timeout=5) == b"offline"
        assert seen.get(timeout=10) == b"online"
        assert rig.st.subscribed.wait(5)
        assert rig.send(_command()).status == "applied"
    finally:
        watcher.disconnect()
        watcher.loop_stop()


@pytest.mark.parametrize("offset_s", [300.0, -300.0])
def test_a_box_whose_clock_is_set_wrong_stamps_and_judges_by_it(mqtt_available: tuple[str, int],
                                                                 offset_s: float) -> None:
    """Five minutes ahead: its telemetry and acks are refused as from the future, and a command
    stamped by the service's clock is already past its TTL to it. Five minutes behind: accepted
    (within the age bound), and it applies the service's commands."""
    host, port = mqtt_available
    gh = f"t-{uuid.uuid4().hex[:12]}"
    telemetry: queue.Queue[Telemetry] = queue.Queue()
    acks: queue.Queue[Ack] = queue.Queue()
    rejected: list[str] = []
    bridge = MqttBridge(f"mqtt://{host}:{port}", zones=ZONES, known_greenhouses=lambda g: g == gh,
                        will_topic=f"greentwin/svc-{uuid.uuid4().hex[:10]}/status",
                        on_telemetry=lambda _g, t: telemetry.put(t), on_ack=lambda _g, a: acks.put(a),
                        on_reject=lambda g, reason, _d: rejected.append(reason) if g == gh else None,
                        max_age_s=600.0)  # the default skew bound (30 s) into the future
    sim = PlantSim(f"mqtt://{host}:{port}", [gh], zones=ZONES, dt_s=1.0, seed=1, clock_offset_s=offset_s)
    bridge.start()
    try:
        assert bridge.wait_ready(10) and sim.start(10)
        sent = sim.step_once()[gh]
        assert abs((sent.ts - datetime.now(UTC)).total_seconds() - offset_s) < 5.0
        bridge.publish_command(gh, _command(ts=datetime.now(UTC)))
        if offset_s > 0:
            assert _wait(lambda: rejected.count("future") == 2), rejected  # the telemetry and the ack
            assert telemetry.empty() and acks.empty() and sim.state[gh].applied_count == 0
        else:
            assert telemetry.get(timeout=5) == sent
            ack = acks.get(timeout=5)
            assert ack.status == "applied" \
                and abs((ack.ts - datetime.now(UTC)).total_seconds() - offset_s) < 5.0
            assert rejected == [] and sim.state[gh].applied_count == 1
    finally:
        sim.close()
        bridge.close()
        cleaner = mqtt.Client(CallbackAPIVersion.VERSION2)
        cleaner.connect(host, port)
        cleaner.loop_start()
        for name in (status_topic(gh), bridge.will_topic):
            cleaner.publish(name, b"", qos=1, retain=True).wait_for_publish(5)
        cleaner.disconnect()
        cleaner.loop_stop()


def test_lamps_left_to_the_site_run_on_its_schedule_through_the_fall_back() -> None:
    """A command with ``light_pct`` null (the greenhouse's lamps are not greentwin's) leaves them to the
    site's climate computer: they burn on its schedule, the box reports the level they run at, and the
    TTL fall-back does not switch them off; a command with a level takes them back."""
    noon = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
    # The site's schedule: on all day outside the dark period, whatever the sun does.
    site = {"schedule_on_h": 5.0, "schedule_off_h": 22.0, "schedule_par_umol": 3000.0}
    sim = PlantSim("mqtt://127.0.0.1:1", ["gh1"], zones=ZONES, dt_s=60, seed=1, start_time=noon,
                   clock=lambda: noon.timestamp(), twin_overrides={"lighting": site})
    try:
        st = sim.state["gh1"]
        assert st.decide(_command(ts=noon, light_pct=None, ttl_s=90.0), noon.timestamp())[0] == "applied"
        assert sim.step_once()["gh1"].light_pct == 100.0  # the site's lamps burn, though 0 would be "off"
        assert st.site_lamps and float(sim.twin.params.lamps_ours[0]) == 0.0
        st.check_watchdog(noon.timestamp() + 120.0)  # silence beyond the TTL: valves and pump go safe
        tel = sim.step_once()["gh1"]
        assert st.failsafe and tel.valve_open == [0] * ZONES and tel.pump_pct == 0.0 \
            and tel.light_pct == 100.0
        later = noon + timedelta(minutes=3)
        assert st.decide(_command(ts=later, seq=2, light_pct=20.0), later.timestamp())[0] == "applied"
        assert sim.step_once()["gh1"].light_pct == 20.0 and float(sim.twin.params.lamps_ours[0]) == 1.0
    finally:
        sim.close()

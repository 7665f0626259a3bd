"""The service's timer work: overdue acks re-sent or given up on, stale greenhouses made safe."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from app.dispatch import Dispatcher
from app.housekeeping import Housekeeping
from app.intake import Intake
from app.journal import DecisionJournal, JournalReader
from app.metrics import Metrics
from app.mqtt.tracker import PendingCommand
from app.snapshots import SnapshotStore
from app.writer import WriterProcess
from control import ExpertProposer, GreenhouseController, ZoneSetup
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from tests.app.disk_full import disk_full_at
from wire.topics import Command, Telemetry

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]


class FakeBridge:
    """The bridge's side of housekeeping: overdue commands, their re-send budget, reconnects."""

    def __init__(self, overdue: list[PendingCommand], max_attempts: int = 3) -> None:
        self.overdue = overdue
        self.max_attempts = max_attempts
        self.reconnects = 0
        self.retried: list[PendingCommand] = []
        self.published: list[tuple[str, Command]] = []

    def overdue_commands(self) -> list[PendingCommand]:
        out, self.overdue = self.overdue, []
        return out

    def can_retry(self, entry: PendingCommand) -> bool:
        return entry.attempts < self.max_attempts

    def retry(self, entry: PendingCommand) -> None:
        self.retried.append(entry)

    def publish_command(self, gh: str, command: Command) -> None:
        self.published.append((gh, command))


def _telemetry(ts: datetime) -> Telemetry:
    return Telemetry(ts=ts, boot_id="b1", seq=1, soil_vwc=[[0.22, 0.23]] * 6, air_temp_c=22.0,
                     air_rh_pct=60.0, par_umol_m2_s=50.0, co2_ppm=420.0, leaf_temp_c=21.0, flow_l_min=0.0,
                     pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0, light_pct=0.0, estop=False)


def _service(tmp_path: Path, ghs: list[str]) -> tuple[Housekeeping, dict[str, GreenhouseController], Metrics]:
    controllers = {gh: GreenhouseController(gh, ZONES, ExpertProposer(ThresholdExpert()),
                                            SafetyLimits.default(), max_age_s=120.0) for gh in ghs}
    metrics = Metrics()
    writer = WriterProcess()  # never started: it only counts what is journaled
    journal, snapshots = DecisionJournal(tmp_path / "journal"), SnapshotStore(tmp_path)
    dispatch = Dispatcher(controllers, journal, writer, snapshots, metrics)
    intake = Intake(controllers, dispatch.emit)
    return Housekeeping(controllers, intake, dispatch, writer, snapshots, metrics), controllers, metrics


def _pending(gh: str, attempts: int) -> PendingCommand:
    command = Command(cmd_id=uuid.uuid4(), ts=T0, seq=1, ttl_s=30.0, mode="auto", valves=[0] * 6,
                      pump_pct=0.0, light_pct=0.0, policy_version="expert")
    return PendingCommand(gh=gh, command=command, sent_at=0.0, attempts=attempts)


def test_an_overdue_command_is_resent_until_its_attempts_are_used_then_recorded_as_timed_out(
        tmp_path: Path) -> None:
    hk, _, metrics = _service(tmp_path, ["ga", "gb"])
    again, given_up = _pending("ga", attempts=1), _pending("gb", attempts=3)
    bridge = FakeBridge([again, given_up])
    hk.dispatch.bridge = bridge  # type: ignore[assignment]
    hk.tick(T0)
    assert bridge.retried == [again]
    assert [(a.greenhouse_id, a.kind) for a in hk.dispatch.alarms] == [("ga", "ack_timeout"),
                                                                       ("gb", "ack_timeout")]
    assert metrics.ack_timeouts.labels("gb")._value.get() == 1.0
    hk.dispatch.journal.close()
    [entry] = JournalReader(tmp_path / "journal").read()
    assert entry["kind"] == "ack" and entry["audit_kind"] == "command_ack"
    assert entry["row"] == {"greenhouse_id": "gb", "cmd_id": str(given_up.cmd_id), "status": "timeout",
                            "reason": "no ack after 3 attempts", "ts": T0}


def test_a_stale_greenhouse_gets_the_safe_state_unless_it_is_being_decided(tmp_path: Path) -> None:
    hk, controllers, _ = _service(tmp_path, ["ga", "gb", "gc"])
    for gh in ("ga", "gb"):
        controllers[gh].on_telemetry(_telemetry(T0))
    bridge = FakeBridge([])
    hk.dispatch.bridge = bridge  # type: ignore[assignment]
    hk.intake.in_flight = frozenset({"gb"})
    hk.tick(T0 + timedelta(seconds=121))  # gc never reported: nothing to be stale about
    assert [(gh, c.pump_pct, c.valves) for gh, c in bridge.published] == [("ga", 0.0, [0] * 6)]
    assert [(a.greenhouse_id, a.kind) for a in hk.dispatch.alarms] == [("ga", "telemetry_stale")]
    hk.dispatch.journal.close()
    [entry] = JournalReader(tmp_path / "journal").read()
    assert (entry["kind"], entry["row"]["actor"], entry["row"]["greenhouse_id"]) == \
        ("decision", "watchdog", "ga")


def test_reconnects_are_counted_once(tmp_path: Path) -> None:
    hk, _, metrics = _service(tmp_path, ["ga"])
    bridge = FakeBridge([])
    hk.dispatch.bridge = bridge  # type: ignore[assignment]
    bridge.reconnects = 2
    hk.tick(T0)
    hk.tick(T0)
    bridge.reconnects = 3
    hk.tick(T0)
    assert metrics.mqtt_reconnects._value.get() == 3.0


def test_with_leases_only_held_greenhouses_are_watched_retried_and_commanded_with_their_token(
        tmp_path: Path) -> None:
    hk, controllers, _ = _service(tmp_path, ["ga", "gb"])
    for gh in ("ga", "gb"):
        controllers[gh].on_telemetry(_telemetry(T0))
    mine, theirs = _pending("ga", attempts=1), _pending("gb", attempts=1)
    bridge = FakeBridge([mine, theirs])
    hk.dispatch.bridge = bridge  # type: ignore[assignment]
    hk.dispatch.fence = {"ga": 7}.get  # another replica holds gb
    hk.tick(T0 + timedelta(seconds=121))
    assert [(gh, c.fencing_token) for gh, c in bridge.published] == [("ga", 7)], "gb is not ours to make safe"
    assert bridge.retried == [mine], "a command of a lost lease is not re-sent: its new holder decides afresh"
    hk.dispatch.journal.close()
    entries = JournalReader(tmp_path / "journal").read()
    assert [(e["kind"], e["row"]["greenhouse_id"]) for e in entries] == [("decision", "ga"), ("ack", "gb")]
    assert entries[1]["row"]["reason"] == "lease lost before an ack"


def test_a_decision_the_journal_cannot_take_is_not_published_but_alarmed_and_commanding_resumes(
        tmp_path: Path) -> None:
    hk, controllers, metrics = _service(tmp_path, ["ga"])
    controllers["ga"].on_telemetry(_telemetry(T0))
    bridge = FakeBridge([])
    hk.dispatch.bridge = bridge  # type: ignore[assignment]
    with disk_full_at(1):  # the state directory is full
        hk.tick(T0 + timedelta(seconds=121))
        hk.tick(T0 + timedelta(seconds=123))
    assert bridge.published == [], "journal before publish: nothing unrecorded reaches the plant"
    assert [a.kind for a in hk.dispatch.alarms] == ["journal_unwritable"] * 2
    assert metrics.unjournaled.labels("ga")._value.get() == 2.0
    assert hk.dispatch.journal_failing_since is not None
    hk.tick(T0 + timedelta(seconds=125))  # room again
    assert [(gh, c.pump_pct) for gh, c in bridge.published] == [("ga", 0.0)]
    assert hk.dispatch.journal_failing_since is None
    hk.dispatch.journal.close()
    entries = JournalReader(tmp_path / "journal").read()
    assert [e["row"]["cmd_id"] for e in entries] == [str(bridge.published[0][1].cmd_id)], \
        "what was published is what was journaled, and only that"


def test_a_panel_estop_and_an_ack_the_journal_refused_are_journaled_with_its_next_write(
        tmp_path: Path) -> None:
    """A full disk delays the records of what already happened at the plant (the button was pressed, the
    box answered); it must not lose them. The refused decision itself was never commanded."""
    hk, controllers, _ = _service(tmp_path, ["ga"])
    ctl, dispatch = controllers["ga"], hk.dispatch
    bridge = FakeBridge([])
    dispatch.bridge = bridge  # type: ignore[assignment]
    pressed = _telemetry(T0).model_copy(update={"estop": True})
    with disk_full_at(1):
        latched = ctl.on_telemetry(pressed)
        assert latched.events, "the panel e-stop latches as a mode change on the decision"
        dispatch.emit([latched])
        dispatch.record_ack("ga", uuid.uuid4(), "applied", None, T0)
    assert bridge.published == [] and ctl.estop_latched
    later = ctl.on_telemetry(
        _telemetry(T0 + timedelta(seconds=60)).model_copy(update={"seq": 2, "estop": True}))
    dispatch.emit([later])
    dispatch.journal.close()
    kinds = [(e["kind"], e["row"].get("to_mode")) for e in JournalReader(tmp_path / "journal").read()]
    assert kinds == [("mode_change", "estop"), ("ack", None), ("decision", None)]
    assert [gh for gh, _ in bridge.published] == ["ga"]

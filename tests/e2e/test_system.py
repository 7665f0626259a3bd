"""The real system end to end: load, faults and hostile input, each followed by the invariants.

One system for the module (``tests/e2e/system.py``: PostgreSQL with an owner and a restricted
service role, the shipped Mosquitto config and ACL, ``greentwin serve``, three edge boxes and a
hostile one). The scenarios run in file order on it; after each, :meth:`System.check` proves by
code that every stored decision, mode change and ack is sealed and every chain verifies, that no
edge box applied a command twice or anything but all-off during an e-stop, that no actuator ran
outside the safety limits at any moment by the plant simulator's own step log
(``tests/e2e/plant_log.py``), that every quarantined record has its alarm, and that the service
never exited on its own. The table of what was
injected and counted is printed at the end (and written to ``test-artifacts/e2e-summary.md``).

Runs in about two minutes. The soak variant (same scenarios, longer load) is opt-in:
``GREENTWIN_E2E_SOAK_S=600 pytest -m soak tests/e2e``.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import paho.mqtt.client as mqtt
import pytest
from paho.mqtt.enums import CallbackAPIVersion
from sqlalchemy import func, select

from app.core.db import make_engine
from app.models import AlarmGroup, Decision
from audit.store import AuditStore
from tests.app.disk_full import disk_full_at
from tests.app.mqtt.telemetry_fuzz import TelemetryFuzzer, expected_counts
from tests.app.procs import MOSQUITTO, wait_until
from tests.e2e import summary
from tests.e2e.system import (
    ADMIN,
    COMMAND_TTL_S,
    CRASH_MARKS,
    HOSTILE,
    OPERATOR,
    PLANTS,
    SERVICE_USER,
    VIEWER,
    System,
    payload,
    running_system,
)
from wire.connection import RECONNECT_MAX_S
from wire.topics import MAX_PAYLOAD_BYTES

pytestmark = [pytest.mark.postgres, pytest.mark.mqtt]

LOAD_S = 8.0
AHEAD, BEHIND = "gh-a", "gh-b"
SKEW_EDGE_S = 300.0
SOAK_S = float(os.environ.get("GREENTWIN_E2E_SOAK_S", "0") or 0)
OUTAGE_S = float(os.environ.get("GREENTWIN_E2E_DB_OUTAGE_S", "0") or 0)
"""Hold the database away at least this long (by hand: 60 for the issue's minute); CI keeps it short."""


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: required services must be present)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory, pg_url: str) -> Iterator[System]:
    for tool in (MOSQUITTO, shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"):
        if not Path(tool).exists():
            _unavailable(f"{Path(tool).name} not installed")
    t0 = time.monotonic()
    with running_system(tmp_path_factory.mktemp("e2e"), pg_url) as sys_:
        wait_until(lambda: all(sys_.service_decisions(gh) >= 3 for gh in PLANTS), 60,
                   "every greenhouse decided", context=sys_.service.tail)
        summary.add("start", "owner migrates, service as restricted role, shipped broker ACL, 3 edge boxes",
                    {"greenhouses": len(PLANTS) + 1}, time.monotonic() - t0)
        yield sys_


class Publisher:
    """A plain MQTT client with one broker account (what a hostile or replaying client would be)."""

    def __init__(self, system: System, user: str) -> None:
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2,
                                  client_id=f"gt-e2e-{user}-{uuid.uuid4().hex[:6]}")
        self.client.username_pw_set(user, system.passwords[user])
        self.client.max_inflight_messages_set(200)
        self.client.connect("127.0.0.1", system.broker.port, keepalive=30)
        self.client.loop_start()

    def send(self, messages: list[tuple[str, bytes]]) -> None:
        infos = [self.client.publish(t, p, qos=1) for t, p in messages]
        for info in infos:
            info.wait_for_publish(30)

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()


def _manual(system: System, gh: str, action: list[float], reason: str) -> None:
    r = system.api("POST", f"/api/greenhouses/{gh}/mode", OPERATOR,
                   json={"mode": "manual", "reason": reason, "manual_action": action})
    assert r.status_code == 200, r.text


def _pump_rests(system: System, gh: str) -> float:
    """Times the clipper stopped ``gh``'s pump for want of a path (no valve, or none that moved water)."""
    return system.service.metric("greentwin_safety_clips_total", greenhouse=gh, rule="pump.needs_open_valve")


def _progress(system: System, gh: str, more: int, timeout: float, what: str) -> None:
    base = system.service_decisions(gh)
    wait_until(lambda: system.service_decisions(gh) >= base + more, timeout, what,
               context=system.service.tail)


def test_load_several_greenhouses_and_a_burst(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    applied0 = system.applied()
    time.sleep(LOAD_S)
    # A burst at 3x the per-greenhouse rate from the hostile box: admitted up to the bucket, shed beyond.
    fuzz = TelemetryFuzzer(HOSTILE, 7, max_age_s=120.0)
    burst = [fuzz.valid() for _ in range(120)]
    shed0 = system.service.metric("greentwin_telemetry_shed_total")
    accepted0 = _accepted_from(system, HOSTILE)
    pub = Publisher(system, HOSTILE)
    try:
        pub.send([(c.topic, c.payload) for c in burst])
    finally:
        pub.close()

    def burst_counted() -> bool:
        shed = system.service.metric("greentwin_telemetry_shed_total") - shed0
        return shed > 0 and shed + _accepted_from(system, HOSTILE) - accepted0 >= len(burst)

    wait_until(burst_counted, 30, "every burst message admitted or shed, visibly")
    shed = system.service.metric("greentwin_telemetry_shed_total") - shed0
    assert system.service.metric("greentwin_alarms_total", greenhouse=HOSTILE, kind="telemetry_shed") >= 1
    counts = system.check(expect_pid=pid)
    rate = (system.applied() - applied0) / (time.monotonic() - t0)
    summary.add("load", f"3 greenhouses at {600}x (10 steps/s each) + 120-message burst", {
        "commands applied/s": round(rate, 1), "burst shed": int(shed), **counts}, time.monotonic() - t0)


def _accepted_from(system: System, gh: str) -> float:
    """Telemetry the service took from ``gh`` (its decisions: one per accepted message)."""
    return system.service_decisions(gh)


def test_broker_killed_and_restarted(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    system.broker.kill()
    wait_until(lambda: system.service.readyz()["checks"]["mqtt"] == "down", 15,
               "the service to see the broker gone")
    time.sleep(2.0)
    system.broker.restart()
    for gh in PLANTS:
        _progress(system, gh, 5, 45, f"{gh} decided again after the broker came back")
    counts = system.check(expect_pid=pid)
    summary.add("broker restart", "SIGKILL of Mosquitto, 2 s away, restart on the same port",
                {"reconnects": int(system.service.metric("greentwin_mqtt_reconnects_total")), **counts},
                time.monotonic() - t0)


def test_broker_away_longer_than_the_command_ttl(system: System) -> None:
    """A routine outage past the TTL: every edge box falls back to all-off on its own. The service is
    back within the reconnect back-off's cap, latches no valve for the fall-back and waters again."""
    t0 = time.monotonic()
    pid = system.service.pid
    away_s = COMMAND_TTL_S + 3.0
    system.broker.kill()
    wait_until(lambda: system.service.readyz()["checks"]["mqtt"] == "down", 15,
               "the service to see the broker gone")
    time.sleep(away_s)
    fell_back = [gh for gh in PLANTS if system.edges[gh].sim.state[gh].failsafe]
    assert fell_back == list(PLANTS), f"only {fell_back} fell back to their safe state"
    applied = {gh: len(system.edges[gh].sim.applied) for gh in PLANTS}
    system.broker.restart()
    back = time.monotonic()
    wait_until(lambda: system.service.readyz()["checks"]["mqtt"] == "ok", 2 * RECONNECT_MAX_S + 5,
               "the service reconnected within its back-off cap", context=system.service.tail)
    reconnected_s = time.monotonic() - back
    wait_until(lambda: all(len(system.edges[gh].sim.applied) > applied[gh] + 5 for gh in PLANTS), 45,
               "every box commanded again", context=system.service.tail)
    counts = system.check(expect_pid=pid)
    assert counts["false latches"] == 0
    summary.add("broker outage > TTL", f"Mosquitto SIGKILLed {away_s:g} s (TTL {COMMAND_TTL_S:g} s): "
                "every box "
                "fell back to all-off", {"service reconnected after s": round(reconnected_s, 1), **counts},
                time.monotonic() - t0)


def test_database_unavailable_then_back(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    system.proxy.cut()
    wait_until(lambda: system.service.readyz()["checks"]["database"] != "ok", 15,
               "/readyz to report the database")
    wait_until(lambda: system.service.readyz()["checks"].get("spooled_decisions", 0) >= 20, 30,
               "decisions spooled while the database is away", context=system.service.tail)
    applied_during = system.applied()
    time.sleep(max(3.0, OUTAGE_S - (time.monotonic() - t0)))
    assert system.applied() > applied_during, "control goes on while the database is down"
    spooled = system.service.readyz()["checks"]["spooled_decisions"]
    system.proxy.restore()
    wait_until(lambda: system.service.readyz()["ready"]
               and system.service.readyz()["checks"]["spooled_decisions"] == 0,
               45, "the spool written back", context=system.service.tail)
    counts = system.check(expect_pid=pid)
    summary.add("database outage", f"every PostgreSQL connection cut, new ones refused, "
                f"{time.monotonic() - t0:.0f} s with the write-back, then back",
                {"spooled": spooled, "refused connects": system.proxy.refused, **counts},
                time.monotonic() - t0)


def test_state_directory_full_then_room_again(system: System) -> None:
    """No file of the service may grow (RLIMIT_FSIZE on its process, as a full disk under its state
    directory): journal before publish, so nothing is commanded, every refused decision is
    alarmed, an operator's e-stop is refused (503) without latching, and /readyz fails;
    commanding resumes by itself when there is room again."""
    t0 = time.monotonic()
    svc = system.service
    pid = svc.pid
    refused0 = svc.metric("greentwin_decisions_unjournaled_total")
    with disk_full_at(1, pid):
        wait_until(lambda: svc.metric("greentwin_decisions_unjournaled_total") >= refused0 + 20, 20,
                   "decisions refused by the full journal", context=svc.tail)
        ready = svc.readyz()
        assert not ready["ready"] and str(ready["checks"]["journal"]).startswith("unwritable"), ready
        applied = system.applied()
        r = system.api("POST", "/api/greenhouses/gh-c/estop", OPERATOR, json={"reason": "disk full, e2e"})
        assert r.status_code == 503 and "neither recorded nor applied" in r.text, r.text
        time.sleep(1.5)
        assert system.applied() == applied, "a command reached the plant that is not on the journal"
        refused = svc.metric("greentwin_decisions_unjournaled_total") - refused0
    wait_until(lambda: svc.readyz()["ready"], 20, "ready again once the journal takes writes",
               context=svc.tail)
    alarms = svc.metric("greentwin_alarms_total", kind="journal_unwritable")
    assert alarms >= refused, "every refused decision alarmed"
    for gh in PLANTS:
        _progress(system, gh, 5, 30, f"{gh} commanded again")
    assert svc.metric("greentwin_estops_total", greenhouse="gh-c") == 0 \
        and "gh-c" not in system.estop_windows()
    counts = system.check(expect_pid=pid)
    summary.add("full disk", "no file of the service may grow (RLIMIT_FSIZE) for ~3 s, then room again",
                {"decisions refused, not commanded": int(refused), "journal alarms": int(alarms),
                 "operator e-stop refused (503)": 1, **counts},
                time.monotonic() - t0)


def test_estop_holds_until_an_operator_resets_it(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    gh = "gh-b"
    edge = system.edges[gh].sim
    edge.press_estop(gh)
    wait_until(lambda: system.service.metric("greentwin_estops_total", greenhouse=gh) >= 1, 15,
               "the e-stop latched")
    edge.release_estop(gh)  # the button comes back up; the service's latch holds
    _progress(system, gh, 10, 30, "decisions while latched")
    viewer = system.api("POST", f"/api/greenhouses/{gh}/estop/reset", VIEWER,
                        json={"reason": "not mine to reset"})
    assert viewer.status_code == 403
    r = system.api("POST", f"/api/greenhouses/{gh}/estop/reset", OPERATOR,
                   json={"reason": "valve checked, e2e"})
    assert r.status_code == 200 and r.json()["to_mode"] == "manual", r.text  # a safe hold, not the policy
    _progress(system, gh, 5, 30, "decisions after the reset, held off in manual")
    r = system.api("POST", f"/api/greenhouses/{gh}/mode", OPERATOR,
                   json={"mode": "auto", "reason": "hand back to the policy, e2e"})
    assert r.status_code == 200, r.text
    _progress(system, gh, 5, 30, "decisions after the hand-back")
    counts = system.check(expect_pid=pid)
    windows = system.estop_windows()[gh]
    assert windows and windows[-1][1] is not None, "the reset is on record"
    summary.add("e-stop", "panel e-stop on gh-b, button released, reset by an operator (a viewer refused)",
                {"latched decisions": windows[-1][1] - windows[-1][0] - 1, **counts}, time.monotonic() - t0)


def test_edge_faults_sensors_valve_and_link(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    edges = {gh: system.edges[gh].sim for gh in PLANTS}
    # gh-b: an operator closes every valve, zone 0 sticks shut, then the operator runs the pump on zone 0
    # alone. The box's feedback echoes the command, so only the flow tells: the pump must rest.
    zones = len(edges["gh-b"].state["gh-b"].action) - 2
    shut = [0.0] * (zones + 2)
    _manual(system, "gh-b", shut, "all valves shut for a valve test, e2e")
    _progress(system, "gh-b", 3, 30, "gh-b held shut")
    rested = _pump_rests(system, "gh-b")
    edges["gh-a"].inject("gh-a", "sensor_nan", zone=1)
    edges["gh-b"].inject("gh-b", "stuck_valve", zone=0)
    edges["gh-c"].inject("gh-c", "drift")
    edges["gh-c"].inject("gh-c", "broker_disconnect", seconds=3.0)
    _manual(system, "gh-b", [1.0] + [0.0] * (zones - 1) + [60.0, 0.0], "zone 0 alone on the pump, e2e")
    for gh in PLANTS:
        _progress(system, gh, 20, 45, f"{gh} decided through its fault")
    assert _pump_rests(system, "gh-b") > rested, "the pump never rested on a path that moved no water"
    r = system.api("POST", "/api/greenhouses/gh-b/mode", OPERATOR,
                   json={"mode": "auto", "reason": "valve test done, e2e"})
    assert r.status_code == 200, r.text
    for gh, sim in edges.items():
        sim.clear_faults(gh)
    _progress(system, "gh-c", 5, 30, "gh-c back after its link came back")
    counts = system.check(expect_pid=pid)
    summary.add("edge faults", "gh-a probe NaN, gh-b valve stuck shut under an operator's pump on it alone, "
                "gh-c probe drift and its broker link cut 3 s",
                {"alarms": int(system.service.metric("greentwin_alarms_total")), **counts},
                time.monotonic() - t0)


def test_service_sigkilled_and_restarted(system: System) -> None:
    t0 = time.monotonic()
    old = system.service
    assert old.kill() < 0
    old.http.close()
    decided = system.decisions()
    new = system.new_service()
    new.start()
    for gh in PLANTS:
        _progress(system, gh, 5, 60, f"{gh} decided after the restart")
    counts = system.check(expect_pid=new.pid)
    after = system.decisions()
    assert all(after[gh] > decided.get(gh, 0) for gh in PLANTS)
    summary.add("service crash", "SIGKILL of greentwin serve mid-run, restart on the same state and database",
                {"restarts": system.restarts, **counts}, time.monotonic() - t0)


def test_service_restart_longer_than_the_command_ttl(system: System) -> None:
    """A restart as a key rotation needs it (SIGTERM, away past the TTL, start): the boxes fall back,
    the restarted service latches nothing for it and commands every greenhouse again."""
    t0 = time.monotonic()
    system.service.stop()
    system.service.http.close()
    time.sleep(COMMAND_TTL_S + 3.0)
    assert all(system.edges[gh].sim.state[gh].failsafe for gh in PLANTS), "every box fell back"
    new = system.new_service()
    new.start()
    for gh in PLANTS:
        _progress(system, gh, 5, 60, f"{gh} decided after the restart")
    counts = system.check(expect_pid=new.pid)
    assert counts["false latches"] == 0
    summary.add("service restart > TTL", f"SIGTERM, {COMMAND_TTL_S + 3:g} s away (TTL {COMMAND_TTL_S:g} s), "
                "restart on the same state", {"restarts": system.restarts, **counts}, time.monotonic() - t0)


def test_an_ack_flood_from_one_credential(system: System) -> None:
    """The hostile box's credential sends acks for commands nobody sent, 1,000 a second for 10 s: none
    is sealed, every other greenhouse goes on being decided and recorded, recording stays ready."""
    t0 = time.monotonic()
    pid = system.service.pid
    acks_before = _sealed_kinds(system, HOSTILE).get("command_ack", 0)
    stored0, counted0 = system.decisions(), _flood_counted(system)
    flood = [(f"greentwin/{HOSTILE}/ack", payload({"cmd_id": str(uuid.uuid4()),
                                                  "ts": datetime.now(UTC).isoformat(),
                                                  "status": "applied"})) for _ in range(10_000)]
    pub = Publisher(system, HOSTILE)
    try:
        for lo in range(0, len(flood), 100):
            pub.send(flood[lo:lo + 100])
            time.sleep(max(0.0, t0 + (lo + 100) / 1000 - time.monotonic()))
            if lo % 2000 == 0:
                assert system.service.readyz()["checks"]["recording"] == "ok", system.service.readyz()
    finally:
        pub.close()
    flood_s = time.monotonic() - t0
    wait_until(lambda: _flood_counted(system) - counted0 >= len(flood), 30,
               "every flooded ack dropped, visibly", context=system.service.tail)
    stored = system.decisions()
    counts = system.check(expect_pid=pid)
    assert _sealed_kinds(system, HOSTILE).get("command_ack", 0) == acks_before, "a flooded ack was sealed"
    assert all(stored[gh] - stored0.get(gh, 0) >= 10 for gh in PLANTS), "recording stalled for the others"
    summary.add("ack flood", f"{len(flood)} acks for unknown commands from {HOSTILE}'s credential "
                f"in {flood_s:.0f} s",
                {"acks sealed": 0, "dropped or shed": int(_flood_counted(system) - counted0), **counts},
                time.monotonic() - t0)


def _flood_counted(system: System) -> float:
    """Acks the service refused as answering nothing it sent, or shed over the box's rate."""
    svc = system.service
    return (svc.metric("greentwin_telemetry_total", outcome="rejected", reason="unknown_command")
            + svc.metric("greentwin_telemetry_shed_total", greenhouse=HOSTILE))


def _sealed_kinds(system: System, gh: str) -> dict[str, int]:
    keyring, signer = system.keys.open()
    engine = make_engine(system.roles.owner_url)
    try:
        return dict(Counter(r.kind for r in AuditStore(engine, keyring, signer).iter_records(gh)))
    finally:
        engine.dispose()


def _decided_since(system: System, since: dict[str, int]) -> dict[str, list[Decision]]:
    with system.owner_session() as s:
        return {gh: list(s.scalars(select(Decision).where(Decision.greenhouse_id == gh, Decision.seq > seq)))
                for gh, seq in since.items()}


def test_edge_clocks_five_minutes_ahead_and_behind(system: System) -> None:
    """Edge boxes on the wall clock (one step a second) under the site's bounds: at most 30 s into
    the future, 7 minutes old. The box 5 minutes ahead is refused (telemetry and acks, as from the
    future) and its greenhouse made safe by the stale-telemetry watchdog, with nothing stamped in
    the future on record; the box 5 minutes behind is accepted and controlled as usual. Then the
    accelerated boxes come back under the suite's bounds."""
    t0 = time.monotonic()
    system.stop_edges()
    plant_clock = {gh: system.edges[gh].sim.sim_time for gh in PLANTS}
    for gh in (AHEAD, BEHIND):
        system.retire_edge(gh)
    system.service.stop()
    svc = system.new_service(dict(system.env, GREENTWIN_MAX_CLOCK_SKEW_S="30", GREENTWIN_MAX_AGE_S="420"))
    svc.start()
    with system.owner_session() as s:
        since = {gh: int(s.scalar(select(func.max(Decision.seq)).where(Decision.greenhouse_id == gh)) or 0)
                 for gh in (AHEAD, BEHIND)}
    system.start_edge(AHEAD, seed=31, speed=1.0, dt_s=1.0, clock_offset_s=SKEW_EDGE_S)
    system.start_edge(BEHIND, seed=32, speed=1.0, dt_s=1.0, clock_offset_s=-SKEW_EDGE_S)
    ahead, behind = system.edges[AHEAD].sim, system.edges[BEHIND].sim
    wait_until(lambda: svc.metric("greentwin_alarms_total", greenhouse=AHEAD, kind="telemetry_stale") >= 1,
               20, "the watchdog to make the greenhouse of the box ahead safe", context=svc.tail)
    _progress(system, BEHIND, 5, 30, "decisions on the telemetry of the box behind")
    wait_until(lambda: svc.metric("greentwin_telemetry_total", outcome="rejected", reason="future") >= 5, 20,
               "telemetry and acks of the box ahead refused as from the future", context=svc.tail)
    future = svc.metric("greentwin_telemetry_total", outcome="rejected", reason="future")
    system.stop_edges()
    now = datetime.now(UTC)
    decided = _decided_since(system, since)
    assert decided[AHEAD] and all(d.actor == "watchdog" and d.clipped["pump_pct"] == 0.0
                                  for d in decided[AHEAD])
    assert all(not any(st.commanded) for st in ahead.steps[AHEAD]), "the box ahead ran nothing"
    on_policy = [d for d in decided[BEHIND] if d.actor != "watchdog"]
    assert len(on_policy) >= 5 and len(behind.applied) >= 5, "the box behind is controlled"
    # The restored state is the accelerated box's, days ahead: the watchdog may act once before the
    # box behind reports; after that its telemetry keeps the watchdog quiet.
    first = min(d.seq for d in on_policy)
    assert [d.seq for d in decided[BEHIND] if d.actor == "watchdog" and d.seq > first] == []
    assert all(d.ts <= now + timedelta(seconds=30) for ds in decided.values() for d in ds), \
        "a future stamp on record"
    with system.owner_session() as s:
        latest = s.scalar(select(func.max(AlarmGroup.last_at))
                          .where(AlarmGroup.greenhouse_id.in_((AHEAD, BEHIND))))
    assert latest is None or latest <= now + timedelta(seconds=30)
    assert svc.alive and not any(m in svc.output() for m in CRASH_MARKS), svc.tail()

    for gh in (AHEAD, BEHIND):  # back to the accelerated boxes, on their plants' clocks
        system.retire_edge(gh)
    system.service.stop()
    system.new_service().start()
    for i, gh in enumerate((AHEAD, BEHIND)):
        system.start_edge(gh, seed=40 + i, start_time=plant_clock[gh])
    system.resume_edges()
    for gh in PLANTS:
        _progress(system, gh, 5, 45, f"{gh} decided again on its accelerated box")
    counts = system.check(expect_pid=system.service.pid)
    summary.add("edge clock skew", f"{AHEAD} box 5 min ahead, {BEHIND} box 5 min behind, real time, "
                "site bounds "
                "+30 s / 7 min; then the accelerated boxes back", {
                    "refused as future": int(future), f"{AHEAD} watchdog decisions": len(decided[AHEAD]),
                    f"{BEHIND} decisions": len(on_policy), "restarts": system.restarts, **counts},
                time.monotonic() - t0)


def test_hostile_mqtt_input(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    before = system.rejected()
    estops_a = system.service.metric("greentwin_estops_total", greenhouse="gh-a")

    # 1. Malformed, oversized, deep, non-finite, schema-breaking, stale, replayed telemetry, from an
    #    edge box with a valid account; cases aimed at other topics are the ACL's to drop.
    fuzz = TelemetryFuzzer(HOSTILE, 20261202, max_age_s=120.0)
    cases = fuzz.stream(400, 5)
    own = [c for c in cases if c.topic == fuzz.topic]
    elsewhere = [c for c in cases if c.topic != fuzz.topic]
    # 2. Schema-valid but hostile acks, e-stops and telemetry on its own topics: control characters,
    #    over-long strings, far-future stamps.
    future = (datetime.now(UTC) + timedelta(days=3650)).isoformat()
    now = datetime.now(UTC).isoformat()
    foreign_cmd = system.edges["gh-a"].sim.applied[-1]
    hostile = [
        (f"greentwin/{HOSTILE}/ack", payload({"cmd_id": str(uuid.uuid4()), "ts": now, "status": "applied",
                                              "reason": "ok\x00\x1b[2J"})),
        (f"greentwin/{HOSTILE}/ack", payload({"cmd_id": str(uuid.uuid4()), "ts": now, "status": "rejected",
                                              "reason": "x" * 100_000})),
        (f"greentwin/{HOSTILE}/ack", payload({"cmd_id": str(uuid.uuid4()), "ts": future,
                                              "status": "applied"})),
        (f"greentwin/{HOSTILE}/estop", payload({"ts": future, "pressed": True, "source": "panel"})),
        (fuzz.topic, payload(dict(fuzz.body(seq=10**6, ts=datetime.now(UTC) + timedelta(days=3650)),
                                  boot_id="boot-far-future"))),
        (f"greentwin/{HOSTILE}/estop", b"\xff\xfe not json"),
        (f"greentwin/{HOSTILE}/estop", b"[" * 5000 + b"]" * 5000),
    ]
    # 3. Cross-greenhouse: the hostile box speaks for others (the broker drops these).
    cross = [
        ("greentwin/gh-a/estop", payload({"ts": now, "pressed": True, "source": "panel"})),
        ("greentwin/gh-b/telemetry", own[0].payload),
        ("greentwin/gh-c/ack", payload({"cmd_id": str(foreign_cmd.cmd_id), "ts": now, "status": "rejected"})),
        ("greentwin/gh-a/command", foreign_cmd.model_dump_json().encode()),
    ]
    pub = Publisher(system, HOSTILE)
    try:
        pub.send([(c.topic, c.payload) for c in cases] + hostile + cross)
        # An ack on its own topic for gh-a's command is refused as foreign (while tracked) or matches nothing.
        pub.send([(f"greentwin/{HOSTILE}/ack", payload({"cmd_id": str(foreign_cmd.cmd_id), "ts": now,
                                                         "status": "rejected", "reason": "forged"}))])
    finally:
        pub.close()
    expected = expected_counts(own)
    # The shipped broker drops payloads over the service's cap (message_size_limit) before anyone sees them.
    broker_dropped = expected.pop("too_large", 0) + sum(len(p) > MAX_PAYLOAD_BYTES for _, p in hostile)
    want = sum(expected.values()) + len(hostile) - sum(len(p) > MAX_PAYLOAD_BYTES for _, p in hostile)

    def rejected_now() -> float:
        after = system.rejected()
        return sum(after.values()) - sum(before.values())

    wait_until(lambda: rejected_now() >= want, 60, f"{want} hostile messages rejected",
               context=lambda: f"{rejected_now()} of {want}: {system.rejected()}\n{system.service.tail(10)}")
    after = system.rejected()
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}
    for reason, n in expected.items():
        assert delta.get(reason, 0) >= n, f"{reason}: {delta.get(reason, 0)} rejected, {n} sent"
    assert broker_dropped > 0 and delta.get("too_large", 0) <= 1, "oversized payloads reached the service"
    assert delta.get("unknown_greenhouse", 0) == 0 and delta.get("bad_topic", 0) == 0, \
        "messages on topics outside its account never reached the service"
    assert system.service.metric("greentwin_estops_total", greenhouse="gh-a") == estops_a, \
        "no e-stop latched by another greenhouse's box"

    # 4. Replays from the right accounts: gh-a's own last ack again, and the service's command again.
    replay_cmd = system.edges["gh-a"].sim.applied[-1]
    applied_ids = {str(c.cmd_id) for c in system.edges["gh-a"].sim.applied}
    seen0 = system.edges["gh-a"].sim.received[str(replay_cmd.cmd_id)]
    svc = Publisher(system, SERVICE_USER)
    edge_a = Publisher(system, "gh-a")
    try:
        svc.send([("greentwin/gh-a/command", replay_cmd.model_dump_json().encode())] * 3)
        edge_a.send([("greentwin/gh-a/ack", payload({"cmd_id": str(replay_cmd.cmd_id), "ts": now,
                                                     "status": "applied"}))] * 3)
    finally:
        svc.close()
        edge_a.close()
    wait_until(lambda: system.edges["gh-a"].sim.received[str(replay_cmd.cmd_id)] >= seen0 + 3, 20,
               "the replayed commands handled by the edge box")
    assert sum(1 for c in system.edges["gh-a"].sim.applied
               if str(c.cmd_id) in applied_ids) == len(applied_ids)
    with system.owner_session() as s:
        status = s.scalar(select(Decision.ack_status).where(Decision.cmd_id == str(foreign_cmd.cmd_id)))
    assert status in (None, "pending", "applied"), \
        "a forged ack from another greenhouse changed gh-a's command"
    counts = system.check(expect_pid=pid)
    summary.add("hostile MQTT", f"{len(cases)} fuzzed telemetry, {len(hostile)} hostile acks/e-stops, "
                f"{len(cross)} cross-greenhouse publishes, 3 replayed commands, 3 replayed acks, "
                "1 forged ack", {
                    "rejected": int(sum(delta.values())), "dropped by ACL": len(elsewhere) + len(cross),
                    "dropped by the broker's size limit": broker_dropped,
                    "replays applied": 0, **counts}, time.monotonic() - t0)


def test_hostile_api_input(system: System) -> None:
    t0 = time.monotonic()
    pid = system.service.pid
    http = system.service.http
    tried = 0

    def expect(status: int | tuple[int, ...], method: str, path: str, user: str | None = None,
               **kw: object) -> None:
        nonlocal tried
        tried += 1
        r = system.api(method, path, user, **kw)
        want = (status,) if isinstance(status, int) else status
        assert r.status_code in want, f"{method} {path} as {user}: {r.status_code} {r.text[:200]}"

    expect(401, "GET", "/api/greenhouses")
    expect(401, "POST", "/api/greenhouses/gh-a/estop", json={"reason": "no token"})
    expect(401, "GET", "/api/greenhouses", headers={"Authorization": "Bearer forged.token.value"})
    expect(403, "POST", "/api/greenhouses/gh-a/estop", VIEWER, json={"reason": "wrong role"})
    expect(403, "POST", "/api/greenhouses", OPERATOR, json={"id": "gh-new", "zones": 2})
    expect(403, "GET", "/api/users", OPERATOR)
    expect((404, 422), "GET", "/api/greenhouses/..%2F..%2Fetc%2Fpasswd/decisions", VIEWER)
    expect((404, 422), "GET", "/api/greenhouses/gh-a'%3B%20DROP%20TABLE%20decision%3B--/decisions", VIEWER)
    expect(422, "POST", "/api/greenhouses", ADMIN, json={"id": "gh'; DROP TABLE audit_record;--", "zones": 2})
    expect(413, "POST", "/api/greenhouses/gh-a/estop", OPERATOR,
           content=b'{"reason": "' + b"x" * 400_000 + b'"}', headers={"Content-Type": "application/json"})
    expect(401, "POST", "/api/auth/login", json={"username": "adam' OR '1'='1", "password": "x"})
    # A browser session with a forged CSRF token: the cookie alone changes nothing.
    login = http.post("/api/auth/login",
                      json={"username": OPERATOR, "password": system.user_passwords[OPERATOR]})
    assert login.status_code == 200
    tried += 1
    forged = http.post("/api/greenhouses/gh-a/estop", json={"reason": "csrf"},
                       headers={"X-CSRF-Token": "forged"})
    assert forged.status_code == 403, forged.text
    http.cookies.clear()
    assert system.service.metric("greentwin_estops_total", greenhouse="gh-a") == 0
    counts = system.check(expect_pid=pid)
    summary.add("hostile API", "no token, forged token, wrong role, traversal and injection strings, "
                "400 KB body, "
                "forged CSRF", {"requests refused": tried, **counts}, time.monotonic() - t0)


def test_end_state(system: System) -> None:
    """Every greenhouse back in auto control or in a recorded, alarmed safe state; the CLI agrees."""
    t0 = time.monotonic()
    pid = system.service.pid
    system.stop_edges()
    counts = system.check(expect_pid=pid)
    overview = system.api("GET", "/api/overview", VIEWER)
    assert overview.status_code == 200, overview.text
    modes = {g["id"]: g["mode"] for g in overview.json()}
    latched = {g["id"] for g in overview.json() if g["estop_latched"]}
    windows = system.estop_windows()
    for gh, mode in modes.items():
        if mode == "estop":  # a safe state that is on record, latched and shown to the operators
            assert windows.get(gh) and windows[gh][-1][1] is None, f"{gh} in e-stop without a recorded latch"
            assert gh in latched and system.service.metric("greentwin_estops_total", greenhouse=gh) >= 1
        else:
            assert mode == "auto", f"{gh} left in {mode}"
    assert all(modes[gh] == "auto" for gh in PLANTS)
    verify = system.audit_verify_cli()
    assert verify.returncode == 0, verify.stdout + verify.stderr
    lines = verify.stdout.splitlines()
    assert sum(1 for ln in lines if ln.startswith("ok ")) >= 2 * len(modes)
    anchored = [ln for ln in lines if ": anchor: holds" in ln]
    assert {ln.split()[1].rstrip(":") for ln in anchored} >= set(modes), \
        "every chain's exported head still holds"
    summary.add("end state", "edge boxes stopped; greentwin audit verify as the owner, "
                "against the exported heads",
                {"modes": json.dumps(modes, sort_keys=True).replace('"', ""), **counts},
                time.monotonic() - t0,
                invariants=summary.HELD + "; audit verify exit 0")


@pytest.mark.soak
@pytest.mark.skipif(SOAK_S <= 0, reason="soak by hand: GREENTWIN_E2E_SOAK_S=600 pytest -m soak tests/e2e")
def test_soak(system: System) -> None:
    """Hours of plant time: the edge boxes run on, a broker restart every minute, invariants each time."""
    t0 = time.monotonic()
    for gh in PLANTS:
        if not system.edges[gh].thread.is_alive():
            system.start_edge(gh, seed=100 + PLANTS.index(gh))
    rounds = 0
    while time.monotonic() - t0 < SOAK_S:
        time.sleep(50.0)
        system.broker.kill()
        time.sleep(2.0)
        system.broker.restart()
        rounds += 1
        counts = system.check()
    summary.add("soak", f"{SOAK_S:g} s of load, a broker restart every minute", {"rounds": rounds, **counts},
                time.monotonic() - t0)

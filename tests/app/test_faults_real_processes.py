"""Faults with real processes: broker restart, database outage, service crash, hostile telemetry.

Each test runs ``greentwin serve`` as a child process against its own Mosquitto on a free port,
so nothing here depends on (or disturbs) the shared broker on 1883 or the API port 8000. The
threshold expert decides (no policy directory), which keeps start-up to the service's imports.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import make_url, select
from sqlalchemy.orm import Session

from app.cli import db as db_cli
from app.core.db import make_engine
from app.models import Decision, ModeChange
from app.services.greenhouses import add_greenhouse
from audit.store import AuditStore
from plantsim.sim import PlantSim
from tests.app.mqtt.telemetry_fuzz import TelemetryFuzzer, expected_counts
from tests.app.procs import (
    MOSQUITTO,
    AuditKeys,
    CuttableProxy,
    Mosquitto,
    MqttObserver,
    Proc,
    Service,
    plant_sim_argv,
    publish_all,
    running,
    service_env,
    wait_until,
)
from wire.topics import Command

pytestmark = [pytest.mark.mqtt, pytest.mark.slow]

GH = "gh1"


def _unavailable(reason: str) -> None:
    """Skip locally, fail in CI (as tests/conftest.py does for the shared services)."""
    if os.environ.get("CI", "").strip().lower() == "true":
        pytest.fail(f"{reason} (CI=true: required services must be present)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> AuditKeys:
    return AuditKeys.generate(tmp_path_factory.mktemp("audit-keys"))


@pytest.fixture(scope="module")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite database with ``gh1`` registered; each test works on a copy."""
    path = tmp_path_factory.mktemp("db") / "template.sqlite3"
    url = f"sqlite:///{path}"
    db_cli.upgrade(url)
    add_greenhouse(url, GH, zones=6, soil="loam")
    return path


@pytest.fixture
def sqlite_url(tmp_path: Path, sqlite_template: Path) -> str:
    path = tmp_path / "greentwin.sqlite3"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite:///{path}"


def _mosquitto(folder: Path, extra_config: str = "") -> Mosquitto:
    if not Path(MOSQUITTO).exists():
        _unavailable(f"mosquitto not installed at {MOSQUITTO}")
    return Mosquitto(folder, extra_config=extra_config)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    with running(_mosquitto(tmp_path / "broker")) as b:
        yield b


def _env(tmp_path: Path, database_url: str, broker: Mosquitto, keys: AuditKeys,
         **extra: str) -> dict[str, str]:
    return service_env(database_url=database_url, mqtt_url=broker.url, keys=keys,
                       policy_dir=tmp_path / "no-policy", extra=extra)


def _crash_lines(log: str) -> list[str]:
    """Lines that mean an exception escaped a handler (the service logs and survives those)."""
    marks = ("Traceback", "Exception in callback", "unexpected error", "handler failed",
             "housekeeping round failed")
    return [ln for ln in log.splitlines() if any(m in ln for m in marks)]


# --- 1. broker restarted mid-run -------------------------------------------------------------


def test_service_reconnects_and_commands_resume_after_a_broker_restart(
        tmp_path: Path, keys: AuditKeys, broker: Mosquitto, sqlite_url: str) -> None:
    service = Service(tmp_path, _env(tmp_path, sqlite_url, broker, keys))
    sim = Proc(plant_sim_argv(broker.url, [GH], speed=600), tmp_path / "plant-sim.log")
    with running(sim), running(service):
        wait_until(lambda: service.decisions(GH) >= 5, 30, "decisions before the restart", context=sim.tail)
        pid = service.pid

        broker.kill()
        wait_until(lambda: service.readyz()["checks"]["mqtt"] == "down", 10,
                   "the service to see the broker gone")
        decided_during_outage = service.decisions(GH)
        broker.restart()
        observer = MqttObserver(broker.port, [f"greentwin/{GH}/command", f"greentwin/{GH}/ack"])
        try:
            wait_until(lambda: service.metric("greentwin_mqtt_reconnects_total") >= 1, 20,
                       "the reconnect counter in /metrics", context=service.tail)

            def applied_new_commands() -> int:
                sent = {json.loads(m.payload)["cmd_id"] for m in observer.seen("/command")}
                acks = [json.loads(m.payload) for m in observer.seen("/ack")]
                return sum(1 for a in acks if a["cmd_id"] in sent and a["status"] == "applied")

            wait_until(lambda: applied_new_commands() >= 3, 20,
                       "commands published and applied after the restart",
                       context=lambda: sim.tail() + "\n" + service.tail())
        finally:
            observer.close()
        assert service.decisions(GH) > decided_during_outage
        assert service.readyz()["ready"] is True
        assert service.alive and service.pid == pid, "the service process must survive the broker restart"
        assert _crash_lines(service.output()) == []


# --- helpers shared by the database and crash tests -------------------------------------------


class RecordingPlantSim(PlantSim):
    """The plant simulator, noting every command it really applies (after its own cmd_id de-duplication)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[Command] = []

    def _decide(self, st: Any, cmd: Command) -> tuple[Any, str | None]:
        status, reason = super()._decide(st, cmd)
        if status == "applied":
            self.applied.append(cmd)  # under the simulator's lock
        return status, reason


def _history(url: str, gh: str) -> tuple[list[Decision], list[ModeChange]]:
    engine = make_engine(url)
    try:
        with Session(engine) as s:
            decisions = list(s.scalars(select(Decision).where(Decision.greenhouse_id == gh)
                                       .order_by(Decision.seq)))
            changes = list(s.scalars(select(ModeChange).where(ModeChange.greenhouse_id == gh)
                                     .order_by(ModeChange.seq)))
        return decisions, changes
    finally:
        engine.dispose()


def _utc(ts: datetime) -> datetime:
    """SQLite hands timestamps back naive (they were stored in UTC)."""
    return ts.replace(tzinfo=UTC) if ts.tzinfo is None else ts.astimezone(UTC)


def _verify_audit(url: str, keys: AuditKeys, gh: str) -> list[str]:
    """Kinds of the greenhouse's audit records, after checking that its chain verifies."""
    keyring, signer = keys.open()
    engine = make_engine(url)
    try:
        store = AuditStore(engine, keyring, signer)
        [result] = store.verify(gh)
        assert result.ok, result.reason
        return [r.kind for r in store.iter_records(gh)]
    finally:
        engine.dispose()


# --- 2. database unavailable ------------------------------------------------------------------


@pytest.fixture
def pg_behind_proxy(make_pg_database: Any) -> Iterator[tuple[str, str, CuttableProxy]]:
    """(direct URL, URL through the proxy, proxy) of a fresh, migrated PostgreSQL database with ``gh1``."""
    with make_pg_database("gt_faults") as url:
        db_cli.upgrade(url)
        add_greenhouse(url, GH, zones=6, soil="loam")
        target = make_url(url)
        proxy = CuttableProxy((target.host or "127.0.0.1", target.port or 5432))
        try:
            yield (url, target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False),
                   proxy)
        finally:
            proxy.close()


@pytest.mark.postgres
def test_database_outage_spools_decisions_and_writes_each_back_exactly_once(
        tmp_path: Path, keys: AuditKeys, broker: Mosquitto,
        pg_behind_proxy: tuple[str, str, CuttableProxy]) -> None:
    direct_url, proxied_url, proxy = pg_behind_proxy
    service = Service(tmp_path, _env(tmp_path, proxied_url, broker, keys))
    sim = RecordingPlantSim(broker.url, [GH], speed=600.0, dt_s=60.0, seed=1)  # one step every 100 ms
    stop = threading.Event()
    stepping = threading.Thread(target=sim.run, args=(stop,), name="plant-sim", daemon=True)
    try:
        with running(service):
            assert sim.start(), "plant simulator connected"
            stepping.start()
            wait_until(lambda: service.decisions(GH) >= 5 and service.readyz()["ready"], 30,
                       "decisions with the database up", context=service.tail)

            proxy.cut()
            decided, applied = service.decisions(GH), len(sim.applied)
            wait_until(lambda: service.readyz()["checks"]["database"] != "ok", 10,
                       "/readyz to report the database")
            # The gauge is set by each write-back round: one has run, and failed, while the database is away.
            wait_until(lambda: service.metric("greentwin_decisions_spooled") > 0, 20,
                       "a failed write-back round", context=service.tail)
            wait_until(lambda: service.readyz()["checks"]["spooled_decisions"] >= 10, 20, "decisions spooled")
            assert service.decisions(GH) >= decided + 10, "control goes on while the database is down"
            assert len(sim.applied) >= applied + 10, "and its commands reach the plant"
            assert proxy.refused > 0, "the service did try the database during the outage"

            proxy.restore()
            wait_until(lambda: service.readyz()["ready"]
                       and service.readyz()["checks"]["spooled_decisions"] == 0
                       and service.metric("greentwin_decisions_spooled") == 0, 30, "the spool written back",
                       context=service.tail)
            stop.set()
            stepping.join(timeout=10)
            made = wait_until(lambda: (n := service.decisions(GH)) == len(_history(direct_url, GH)[0])
                              and n, 20, "every decision in the database")
            wait_until(lambda: _verify_audit(direct_url, keys, GH).count("decision") == made, 30,
                       "every decision in the audit trail",
                       context=lambda: f"{_verify_audit(direct_url, keys, GH).count('decision')} of {made}")
            assert service.alive
            crash_lines = _crash_lines(service.output())
    finally:
        stop.set()
        sim.close()

    decisions, changes = _history(direct_url, GH)
    assert [d.seq for d in decisions] == list(range(1, made + 1)), \
        "one row per decision: none lost, none doubled"
    assert changes == []
    assert len({d.cmd_id for d in decisions}) == made
    assert crash_lines == []


# --- 3. service SIGKILLed and restarted ------------------------------------------------------


def test_sigkilled_service_restarts_without_losing_doubling_or_reapplying(
        tmp_path: Path, keys: AuditKeys, broker: Mosquitto, sqlite_url: str) -> None:
    env = _env(tmp_path, sqlite_url, broker, keys)
    sim = RecordingPlantSim(broker.url, [GH], speed=600.0, dt_s=60.0, seed=0)  # one step every 100 ms
    stop = threading.Event()
    stepping = threading.Thread(target=sim.run, args=(stop,), name="plant-sim", daemon=True)
    first, second = Service(tmp_path, env, name="serve-1"), Service(tmp_path, env, name="serve-2")
    try:
        with running(first):
            assert sim.start(), "plant simulator connected"
            stepping.start()
            wait_until(lambda: first.decisions(GH) >= 5, 30, "decisions before the e-stop",
                       context=first.tail)
            # The physical button: the service latches its own e-stop, which outlives the button's release.
            sim.press_estop(GH)
            wait_until(lambda: first.metric("greentwin_estops_total", greenhouse=GH) >= 1, 10,
                       "the e-stop latched")
            sim.release_estop(GH)
            latched_at = first.decisions(GH)
            wait_until(lambda: first.decisions(GH) >= latched_at + 5, 20, "decisions after the release")
            assert first.kill() == -signal.SIGKILL

        with running(second):
            wait_until(lambda: second.decisions(GH) >= 5, 30, "decisions after the restart",
                       context=second.tail)
            stop.set()
            stepping.join(timeout=10)
            newest = wait_until(lambda: _history(sqlite_url, GH)[0][-1].cmd_id, 5, "the newest decision")
            wait_until(lambda: any(str(c.cmd_id) == newest for c in sim.applied), 10,
                       "the last command applied")
            crash_lines = _crash_lines(second.output())
    finally:
        stop.set()
        sim.close()

    decisions, changes = _history(sqlite_url, GH)
    seqs = sorted([d.seq for d in decisions] + [c.seq for c in changes])
    assert seqs == list(range(1, len(seqs) + 1)), "decisions and mode changes: one row per seq, none missing"
    [change] = changes
    assert (change.from_mode, change.to_mode) == ("auto", "estop") and change.actor.startswith("edge:")
    after_estop = [d for d in decisions if d.seq > change.seq]
    assert after_estop and all(d.mode == "estop" and d.clipped["pump_pct"] == 0.0
                               and not any(d.clipped["valves"]) for d in after_estop), \
        "every decision after the e-stop, restart included, is all-off"

    applied_ids = [str(c.cmd_id) for c in sim.applied]
    assert len(applied_ids) == len(set(applied_ids)), "no cmd_id applied twice"
    assert all(a.seq < b.seq for a, b in zip(sim.applied, sim.applied[1:], strict=False)), \
        "command seq keeps increasing across the restart"
    recorded = {d.cmd_id for d in decisions}
    # Every applied command has its decision row, except possibly the e-stop's own immediate safe command.
    unrecorded = [(_utc(c.ts), c.mode, c.pump_pct, sum(c.valves)) for c in sim.applied
                  if str(c.cmd_id) not in recorded]
    assert unrecorded in ([], [(_utc(change.ts), "estop", 0.0, 0)])
    first_estop = next(i for i, c in enumerate(sim.applied) if c.mode == "estop")
    assert all(c.mode == "estop" and c.pump_pct == 0 and not any(c.valves) for c in sim.applied[first_estop:])

    # The chain verifies and doubles nothing. Audit events still queued in memory when the process
    # was killed (up to one housekeeping round) are not in it: the sink is not durable across a crash.
    kinds = _verify_audit(sqlite_url, keys, GH)
    assert kinds.count("decision") <= len(decisions) and kinds.count("estop") <= 1
    assert crash_lines == []


# --- 4. hostile telemetry through the real broker ----------------------------------------------

FUZZ_MESSAGES, FUZZ_VALID, FUZZ_SEED = 10_000, 20, 20261130
MAX_AGE_S = 300.0


@pytest.mark.postgres
def test_ten_thousand_hostile_telemetry_messages_are_each_rejected_with_a_reason(
        tmp_path: Path, keys: AuditKeys, make_pg_database: Any) -> None:
    # No cap on the service's queue at the broker: every message must arrive to be counted.
    with make_pg_database("gt_fuzz") as url, \
            running(_mosquitto(tmp_path / "broker", "max_queued_messages 0\n")) as broker:
        db_cli.upgrade(url)
        add_greenhouse(url, GH, zones=6, soil="loam")
        # Every message parsed, so every refusal has its reason: a byte budget that 10,000 messages fit.
        service = Service(tmp_path, _env(tmp_path, url, broker, keys, GREENTWIN_MAX_AGE_S=str(MAX_AGE_S),
                                         GREENTWIN_TELEMETRY_BYTES_BURST=str(256 * 1024 * 1024)))
        try:
            service.launch()
            cases = TelemetryFuzzer(GH, FUZZ_SEED, max_age_s=MAX_AGE_S).stream(FUZZ_MESSAGES, FUZZ_VALID)
            expected = expected_counts(cases)
            service.wait_started()
            wait_until(lambda: service.readyz()["ready"], 20, "the service subscribed")
            publish_all(broker.port, [(c.topic, c.payload) for c in cases])

            def counted() -> float:
                return service.metric("greentwin_telemetry_total")

            wait_until(lambda: counted() == FUZZ_MESSAGES, 120, f"{FUZZ_MESSAGES} messages counted",
                       interval=0.5, context=lambda: f"counted {counted()}\n{service.tail()}")
            wait_until(lambda: service.decisions(GH) == FUZZ_VALID, 20, "a decision for every valid message")
            rejected = {dict(labels)["reason"]: v for (name, labels), v in service.metrics().items()
                        if name == "greentwin_telemetry_total" and dict(labels)["outcome"] == "rejected"}
            accepted = service.metric("greentwin_telemetry_total", outcome="accepted")
            latched = service.metric("greentwin_estops_total", greenhouse=GH, source="telemetry")
            assert service.alive
            crash_lines = _crash_lines(service.output())
        finally:
            service.stop()
        decisions, changes = _history(url, GH)

    assert sum(rejected.values()) == FUZZ_MESSAGES - FUZZ_VALID
    assert rejected == dict(expected), "every rejection counted under the reason the contract names"
    assert accepted == FUZZ_VALID
    assert crash_lines == []
    # The last valid message reports the e-stop pressed: latched, recorded and sequenced like any mode change.
    assert latched == 1
    assert [(c.actor, c.from_mode, c.to_mode) for c in changes] == [("edge:estop", "auto", "estop")]
    seqs = sorted([d.seq for d in decisions] + [c.seq for c in changes])
    assert seqs == list(range(1, FUZZ_VALID + 2))
    assert decisions[-1].mode == "estop" and decisions[-1].clipped["pump_pct"] == 0.0

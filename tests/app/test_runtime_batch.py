"""The service's micro-batches end to end: journal before publish, group commit, replay after a crash."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt
from sqlalchemy import select

from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.models import Decision, ModeChange
from app.recorder import DecisionRecorder
from app.runtime import Runtime
from app.services.greenhouses import add_greenhouse
from tests.control.test_decision_batch import _ensemble
from wire.topics import EstopEvent, Telemetry, encode, estop_topic, telemetry_topic

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)


def _telemetry(k: int, ts: datetime | None = None, theta: float = 0.2) -> Telemetry:
    return Telemetry(ts=ts or T0 + timedelta(seconds=60 * k), boot_id="b1", seq=k,
                     soil_vwc=[[theta, theta + 0.01]] * 6, air_temp_c=22.0, air_rh_pct=60.0,
                     par_umol_m2_s=50.0, co2_ppm=420.0, leaf_temp_c=21.0, flow_l_min=0.0, pump_current_a=0.0,
                     valve_open=[0] * 6, pump_pct=0.0, light_pct=0.0, estop=False)


def _database(tmp_path: Path, ghs: list[str]) -> str:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    for gh in ghs:
        add_greenhouse(url, gh, zones=6, soil="loam")
    return url


def _runtime(url: str, state: Path, **kw) -> Runtime:
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1883", policy_dir=state / "no-policy",
                        max_age_s=3600.0, ack_timeout_s=300.0)  # nothing acks here: no re-sends either
    return Runtime(settings, make_session_factory(make_engine(url)), state_dir=state, **kw)


def _rows(url: str) -> tuple[list[Decision], list[ModeChange]]:
    with make_session_factory(make_engine(url))() as s:
        return (list(s.scalars(select(Decision).order_by(Decision.greenhouse_id, Decision.seq))),
                list(s.scalars(select(ModeChange).order_by(ModeChange.greenhouse_id, ModeChange.seq))))


def test_journaled_decisions_of_a_crashed_run_are_stored_once_with_explanations(tmp_path: Path) -> None:
    ghs = ["ga", "gb", "gc"]
    url = _database(tmp_path, ghs)
    state = tmp_path / "state"
    ensemble = _ensemble()
    first = _runtime(url, state, proposer=ensemble)
    first.load_greenhouses()

    async def decide() -> None:  # the writer never runs: the process "dies" with everything journaled
        for k in range(3):
            items = [first.controllers[gh].pending(_telemetry(k)) for gh in ghs]
            await first.intake.decide(items, [time.perf_counter()] * len(items))
        first.estop("gb", "op1", "leak")

    asyncio.run(decide())  # no writer process was started: nothing is stored, everything is journaled
    assert first.writer.backlog == first.journal.appended == 3 * 3 + 1 and _rows(url) == ([], [])
    first.journal.close()
    [segment] = sorted((state / "journal").iterdir())
    with segment.open("ab") as fh:
        fh.write(b"\xff\x00\x00\x00\x80\x05")  # an append torn by the crash: never published

    second = _runtime(url, state, proposer=ensemble)
    second.load_greenhouses()
    decisions, changes = _rows(url)
    assert [(d.greenhouse_id, d.seq) for d in decisions] == [(gh, s) for gh in ghs for s in (1, 2, 3)]
    assert [(c.greenhouse_id, c.seq, c.to_mode) for c in changes] == [("gb", 4, "estop")]
    assert all(d.explanation["top"] for d in decisions if d.actor.startswith("policy:"))
    assert any(d.actor.startswith("policy:") for d in decisions), [(d.actor, d.confidence) for d in decisions]
    assert second.controllers["gb"].seq == 4 and second.controllers["gb"].estop_latched
    assert not list((state / "journal").iterdir())

    third = _runtime(url, state, proposer=ensemble)  # nothing left to replay, nothing doubled
    third.load_greenhouses()
    assert [len(r) for r in _rows(url)] == [9, 1]


def test_group_commit_spools_while_the_database_is_down_and_never_doubles(tmp_path: Path) -> None:
    url = _database(tmp_path, ["ga"])
    live = make_session_factory(make_engine(url))
    dead = make_session_factory(make_engine(f"sqlite:///{tmp_path / 'missing' / 'nope.sqlite3'}"))
    rec = DecisionRecorder(dead, tmp_path / "spool.jsonl")

    def row(seq: int) -> dict:
        return {"greenhouse_id": "ga", "seq": seq, "ts": T0 + timedelta(minutes=seq), "actor": "policy:test",
                "mode": "auto", "telemetry": {}, "estimate": None, "member_actions": [], "voted": {},
                "clipped": {}, "rules_fired": [], "reward_terms": None, "confidence": 1.0,
                "explanation": None, "cmd_id": str(uuid.UUID(int=seq)), "ack_status": "pending"}

    assert not rec.record_many([("decision", row(1)), ("decision", row(2))])
    assert rec.spooled == 2
    rec.sessions = live
    assert not rec.record_many([("decision", row(3))])  # behind the spool, in order
    assert rec.flush_spool() == 3 and rec.spooled == 0
    assert rec.record_many([("decision", row(2)), ("decision", row(4))])  # 2 is a replay: skipped
    assert [d.seq for d in _rows(url)[0]] == [1, 2, 3, 4]


def test_estop_is_never_overtaken_by_a_command_decided_before_it(tmp_path: Path, mqtt_available) -> None:
    """Through the real broker: a burst of telemetry, then the e-stop button of one greenhouse."""
    prefix = "rb" + uuid.uuid4().hex[:6]
    ghs = [f"{prefix}-{i}" for i in range(12)]
    url = _database(tmp_path, ghs)
    runtime = _runtime(url, tmp_path / "state", max_batch=8)
    commands: dict[str, list[dict]] = {gh: [] for gh in ghs}
    decided: dict[str, set[str]] = {gh: set() for gh in ghs}  # command ts = its telemetry's ts
    sent: dict[str, set[str]] = {gh: set() for gh in ghs}
    got = threading.Event()
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{prefix}-sub")

    def on_command(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        gh = msg.topic.split("/")[1]
        if gh in commands:
            cmd = json.loads(msg.payload)
            commands[gh].append(cmd)
            decided[gh].add(cmd["ts"])
            if all(sent[g] <= decided[g] for g in ghs) and sum(map(len, sent.values())) == 3 * len(ghs):
                got.set()

    sub.on_message = on_command
    sub.connect(*mqtt_available)
    sub.subscribe("greentwin/+/command", qos=1)
    sub.loop_start()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{prefix}-pub")
    pub.connect(*mqtt_available)
    pub.loop_start()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        asyncio.run_coroutine_threadsafe(runtime.start(), loop).result(30)
        assert runtime.bridge is not None and runtime.bridge.wait_ready(10)
        victim = ghs[5]
        now = datetime.now(UTC)
        for k in range(3):
            for gh in ghs:
                tel = _telemetry(k, now + timedelta(seconds=k), 0.12)
                sent[gh].add(json.loads(encode(tel))["ts"])
                pub.publish(telemetry_topic(gh), encode(tel), qos=1)
            if k == 0:  # while the first burst is being decided
                event = EstopEvent(ts=now + timedelta(seconds=0.5), pressed=True, source="panel")
                pub.publish(estop_topic(victim), encode(event), qos=1)
        assert got.wait(30), {gh: len(v) for gh, v in commands.items()}
    finally:
        if runtime.bridge is not None:
            asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
        for client in (sub, pub):
            client.disconnect()
            client.loop_stop()

    modes = [c["mode"] for c in commands[victim]]
    first_estop = modes.index("estop")
    assert all(m == "estop" for m in modes[first_estop:]), modes
    assert all(c["pump_pct"] == 0 and not any(c["valves"]) for c in commands[victim][first_estop:])
    assert [c["seq"] for c in commands[victim]] == sorted(c["seq"] for c in commands[victim])
    assert all(c["mode"] == "auto" for gh in ghs if gh != victim for c in commands[gh])
    decisions, changes = _rows(url)
    for gh in ghs:
        seqs = sorted([d.seq for d in decisions if d.greenhouse_id == gh] +
                      [c.seq for c in changes if c.greenhouse_id == gh])
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) == (4 if gh == victim else 3), (gh, seqs)
    assert runtime.batches < 3 * len(ghs)  # greenhouses were decided together
    assert np.mean([runtime.last_decision[gh]["seq"] for gh in ghs]) >= 3

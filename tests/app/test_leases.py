"""Leases: one holder per greenhouse, fair shares, take-over after expiry, tokens that only grow.

Run against SQLite and PostgreSQL through the same code (the database's clock on PostgreSQL).
Lease lengths are short and real (the database decides expiry), local validity runs on a fake clock.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.leases import LeaseBook, catch_up, default_holder, seq_floor
from app.models import GreenhouseLease
from app.services.greenhouses import add_greenhouse
from plantsim.edge import GreenhouseState
from safety import SafetyLimits
from wire.topics import Command, encode, parse_payload

GHS = [f"gh{i}" for i in range(1, 7)]
TTL, RENEW = 1.0, 0.25


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def sessions(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    def build(url: str) -> Iterator[Any]:
        db_cli.upgrade(url)
        for gh in GHS:
            add_greenhouse(url, gh, zones=2, soil="loam")
        engine = make_engine(url)
        try:
            yield make_session_factory(engine)
        finally:
            engine.dispose()

    if request.param == "sqlite":
        yield from build(f"sqlite:///{tmp_path / 'leases.sqlite3'}")
    else:
        with request.getfixturevalue("make_pg_database")("gt_leases") as url:
            yield from build(url)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _book(sessions: Any, holder: str, clock: Clock | None = None) -> LeaseBook:
    return LeaseBook(sessions, holder, ttl_s=TTL, renew_s=RENEW, clock=clock or Clock())


def _settle(books: list[LeaseBook], rounds: int = 3) -> None:
    for _ in range(rounds):
        for b in books:
            b.activate(b.round(GHS).gained, b.clock())


def _rows(sessions: Any) -> dict[str, tuple[str | None, int]]:
    with sessions() as s:
        return {r.greenhouse_id: (r.holder, r.fencing_token) for r in s.scalars(select(GreenhouseLease))}


def test_two_replicas_share_the_greenhouses_each_held_by_exactly_one(sessions: Any) -> None:
    a, b = _book(sessions, "a"), _book(sessions, "b")
    first = a.round(GHS)
    assert sorted(first.gained) == GHS and set(first.gained.values()) == {1}, \
        "alone: takes everything, token 1"
    a.activate(first.gained, a.clock())
    assert b.round(GHS).gained == {}, "nothing is free yet"
    _settle([a, b])
    held_a, held_b = a.held(), b.held()
    assert len(held_a) == len(held_b) == 3 and not set(held_a) & set(held_b)
    rows = _rows(sessions)
    assert {gh: h for gh, (h, _) in rows.items()} == {**dict.fromkeys(held_a, "a"),
                                                      **dict.fromkeys(held_b, "b")}
    assert all(rows[gh][1] == 2 for gh in held_b), "a moved lease has a higher token"
    assert all(rows[gh][1] == 1 for gh in held_a)


def test_a_dead_replicas_greenhouses_are_taken_over_after_expiry_with_higher_tokens(sessions: Any) -> None:
    a, b = _book(sessions, "a"), _book(sessions, "b")
    _settle([a, b])
    dead = a.held()  # "a" stops renewing
    before = _rows(sessions)
    taken = b.round(GHS).gained
    assert not set(taken) & set(dead), "an unexpired lease is never taken"
    time.sleep(TTL + 0.2)
    _settle([b], rounds=1)
    assert set(b.held()) == set(GHS)
    after = _rows(sessions)
    assert all(after[gh] == ("b", before[gh][1] + 1) for gh in dead)


def test_a_lease_counts_locally_only_until_ttl_minus_renew_unless_alone(sessions: Any) -> None:
    clock = Clock()
    a, b = _book(sessions, "a", clock), _book(sessions, "b")
    _settle([a, b])
    gh = next(iter(a.held()))
    clock.t += TTL - RENEW - 0.01
    assert a.token(gh) is not None
    clock.t += 0.02
    assert a.token(gh) is None, "not renewed in time: stop commanding before anyone can take it over"

    lone = _book(sessions, "lone", Clock())
    time.sleep(TTL + 0.2)  # a and b are gone
    _settle([lone], rounds=2)
    lone.clock.t += 3600  # type: ignore[attr-defined]
    assert lone.token(gh) is not None, "alone at the last good round: keeps commanding through an outage"


def test_a_restarted_replica_takes_its_own_leases_back_at_once_with_the_same_token(sessions: Any) -> None:
    a = _book(sessions, "a")
    _settle([a], rounds=1)
    again = _book(sessions, "a")  # same holder id, fresh process
    gained = again.round(GHS).gained
    assert gained == dict.fromkeys(GHS, 1)


def test_release_hands_everything_over_at_once(sessions: Any) -> None:
    a, b = _book(sessions, "a"), _book(sessions, "b")
    _settle([a, b])
    a.release_all()
    assert a.held() == {}
    _settle([b], rounds=1)
    assert set(b.held()) == set(GHS)


def test_settings_and_holder_validation(tmp_path: Path) -> None:
    from app.core.config import Settings

    with pytest.raises(ValueError, match="at most half"):
        Settings(lease_ttl_s=4, lease_renew_s=3)
    with pytest.raises(ValueError, match="1-128"):
        LeaseBook(None, "", ttl_s=10, renew_s=1)  # type: ignore[arg-type]
    assert default_holder(tmp_path / "a") != default_holder(tmp_path / "b")
    assert default_holder(tmp_path / "a") == default_holder(tmp_path / "a")


def _command(token: int | None, ts: datetime) -> Command:
    import uuid

    return Command(cmd_id=uuid.uuid4(), ts=ts, seq=1, ttl_s=30, mode="auto", valves=[1, 0], pump_pct=50.0,
                   light_pct=0.0, policy_version="test", fencing_token=token)


def test_the_edge_box_refuses_a_lower_token_than_it_has_seen() -> None:
    st = GreenhouseState(gh="gh1", zones=2, client=None)  # type: ignore[arg-type]
    now = datetime.now(UTC)
    assert st.decide(_command(None, now), now.timestamp()) == ("applied", None), "no leases: token 0"
    assert st.decide(_command(3, now), now.timestamp()) == ("applied", None)
    status, reason = st.decide(_command(2, now), now.timestamp())
    assert status == "rejected" and reason is not None and reason.startswith("fenced: token 2 < 3")
    assert st.decide(_command(None, now), now.timestamp())[0] == "rejected"
    old = now - timedelta(seconds=60)
    assert st.decide(_command(5, old), now.timestamp())[0] == "expired"
    assert st.decide(_command(4, now), now.timestamp())[0] == "rejected", \
        "an expired newer token still fences"


def test_the_token_travels_in_the_command_payload_and_is_optional() -> None:
    cmd = _command(7, datetime.now(UTC))
    assert parse_payload(encode(cmd), Command).fencing_token == 7
    legacy = encode(cmd).replace(b',"fencing_token":7', b"")
    assert b"fencing_token" not in legacy and parse_payload(legacy, Command).fencing_token is None


def test_catch_up_continues_after_the_records_and_keeps_a_latch() -> None:
    from control import GreenhouseController, ZoneSetup

    ctl = GreenhouseController("gh1", [ZoneSetup("loam", 0.2, 0.3, 0.45, 100.0)] * 2, _proposer(),
                               SafetyLimits.default().model_copy(update={"zones": 2}))
    ctl.state = replace(ctl.state, seq=5, cmd_seq=4)
    catch_up(ctl, 9, "estop", 1)
    assert (ctl.seq, ctl.cmd_seq, ctl.estop_latched, ctl.mode) == (9, 8, True, "estop")
    catch_up(ctl, 3, "auto", 1)
    assert (ctl.seq, ctl.estop_latched) == (9, True), "never backwards, and a latch is never lifted here"
    catch_up(ctl, 12, None, 3)
    assert ctl.seq == seq_floor(3) == 2 * 2**32, \
        "a new tenure starts past anything the previous one may still store"


def _proposer() -> Any:
    from control import load_proposer

    return load_proposer(Path("/nonexistent-policy-dir"), 2)


def test_the_runtime_ignores_and_refuses_what_another_replica_holds(tmp_path: Path) -> None:
    import uuid

    from app.core.config import Settings
    from app.runtime import Runtime
    from tests.app.test_runtime_batch import _telemetry
    from wire.topics import Ack, EstopEvent

    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6, soil="loam")
    settings = Settings(database_url=url, policy_dir=tmp_path / "no-policy", replica_id="r1")
    engine = make_engine(url)
    try:
        rt = Runtime(settings, make_session_factory(engine), state_dir=tmp_path / "state")
        rt.load_greenhouses()
        rt.dispatch.fence = {}.get  # held by another replica
        rt.on_telemetry("gh1", _telemetry(1))
        rt.on_estop("gh1", EstopEvent(ts=datetime.now(UTC), pressed=True, source="panel"))
        rt.on_ack("gh1", Ack(cmd_id=uuid.uuid4(), ts=datetime.now(UTC), status="rejected", reason="x"))
        assert rt.waiting == 0 and "gh1" in rt.last_telemetry
        assert rt.metrics.telemetry.labels("ignored", "not_mine")._value.get() == 1.0
        assert not rt.controllers["gh1"].estop_latched and rt.alarms == []
        with pytest.raises(ValueError, match="controlled by another replica"):
            rt.estop("gh1", "operator:ann", "test")
        assert rt.leases.holder == "r1"
    finally:
        rt.journal.close()
        rt.snapshots.close()
        engine.dispose()


def _start_together(url: str, keys: tuple[Any, Any],
                    replicas: int) -> tuple[list[str | None], list[BaseException]]:
    """Each replica's start-up records, sealed by threads with stores of their own released at one moment
    (a store's lock is per store, so they race as processes do)."""
    import threading

    from app.audit_sink import record_at_start, record_key_in_use, record_policy_in_force
    from audit.store import AuditStore

    engines = [make_engine(url) for _ in range(replicas)]
    together = threading.Barrier(replicas)
    kinds: list[str | None] = []
    errors: list[BaseException] = []

    def start(engine: Any) -> None:
        try:
            store = AuditStore(engine, *keys)
            together.wait()
            kinds.append(record_at_start(record_key_in_use, store))
            kinds.append(record_at_start(record_policy_in_force, store, ["expert"]))
        except BaseException as exc:  # noqa: BLE001 - the test reports it
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(e,)) for e in engines]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in engines:
        e.dispose()
    return kinds, errors


@pytest.mark.postgres
def test_replicas_starting_together_seal_each_start_up_record_once(make_pg_database: Any) -> None:
    """Three replicas starting at the same moment each decide the key and policy records on what the access
    chain holds: one of them seals each, the others read it and record nothing, and none seals on a head
    it did not decide on (which once sealed ``key_in_use`` twice or failed the start)."""
    from app.audit_sink import ACCESS_CHAIN
    from audit import Keyring, Signer
    from audit.store import AuditStore

    keys = (Keyring.generate(), Signer.generate())
    for _round in range(4):
        with make_pg_database("gt_start_race") as url:
            db_cli.upgrade(url)
            kinds, errors = _start_together(url, keys, replicas=3)
            assert errors == []
            assert sorted(k for k in kinds if k) == ["key_in_use", "policy_in_use"]
            engine = make_engine(url)
            try:
                tail = AuditStore(engine, *keys).tail_entries(ACCESS_CHAIN, 5)
            finally:
                engine.dispose()
            assert [e.kind for e in tail] == ["key_in_use", "policy_in_use"]

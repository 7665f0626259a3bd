"""Migrations against SQLite and PostgreSQL: head matches the models, round trip, constraints hold."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.cli import db as db_cli
from app.core.db import SchemaOutOfDate, head_revisions, make_engine, schema_is_current
from app.models import SCHEMA, Decision, Greenhouse, ModeChange, Zone
from app.services.greenhouses import GreenhouseExists, add_greenhouse


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty database: a temp SQLite file, or a throw-away PostgreSQL database dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'gt.sqlite3'}"
        return
    with request.getfixturevalue("make_pg_database")("greentwin_test") as url:
        yield url


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    eng = make_engine(db_url)
    yield eng
    eng.dispose()


def _diffs(engine: Engine) -> list[object]:
    """What autogenerate would still emit: empty when migrations and models agree."""
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "compare_server_default": False})
        return list(compare_metadata(ctx, list(SCHEMA)))


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_head_matches_models(db_url: str, engine: Engine) -> None:
    assert not schema_is_current(engine)
    assert db_cli.current(db_url) is None
    db_cli.upgrade(db_url)
    assert schema_is_current(engine)
    assert db_cli.current(db_url) == ",".join(sorted(head_revisions()))
    assert _tables(engine) == {name for metadata in SCHEMA for name in metadata.tables}
    assert _diffs(engine) == []


def test_downgrade_base_and_upgrade_again(db_url: str, engine: Engine, tmp_path) -> None:
    db_cli.upgrade(db_url)
    db_cli.downgrade(db_url, "base", drop_audit_trail="schema test", state_dir=tmp_path)
    assert _tables(engine) == set()
    assert db_cli.current(db_url) is None
    assert not schema_is_current(engine)
    db_cli.upgrade(db_url, "head")
    assert schema_is_current(engine)
    assert _diffs(engine) == []


def test_cell_price_columns_upgrade_existing_cells_and_downgrade(db_url: str, engine: Engine) -> None:
    """0008 keeps the cells rolled up before it (no price recorded: a count of 0) and has the roll-up
    start over so they gain their prices; downgrading drops the columns and keeps the cells."""
    db_cli.upgrade(db_url, "0007_policy_registry")
    with engine.begin() as conn:  # the code's models expect head: plain SQL at 0007
        conn.execute(text("INSERT INTO greenhouse (id, name, zones) VALUES ('gh-1', 'North', 1)"))
        conn.execute(text("INSERT INTO trend_cell (greenhouse_id, cell, decisions, sums, counts) "
                          "VALUES ('gh-1', 7, 2, '[0.5]', '[2]')"))
        conn.execute(text("INSERT INTO trend_progress (id, last_decision_id) VALUES (1, 99)"))
    db_cli.upgrade(db_url, "0008_cell_price")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT cell, decisions, price_sum, price_count FROM trend_cell")).all() == [
            (7, 2, 0.0, 0)]
        assert conn.execute(text("SELECT count(*) FROM trend_progress")).scalar() == 0
    assert {c["name"] for c in inspect(engine).get_columns("trend_cell")} >= {"price_sum", "price_count"}
    db_cli.downgrade(db_url, "0007_policy_registry")
    assert {c["name"] for c in inspect(engine).get_columns("trend_cell")} == {
        "greenhouse_id", "cell", "decisions", "sums", "counts"}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT cell, decisions FROM trend_cell")).all() == [(7, 2)]
    db_cli.upgrade(db_url)
    assert _diffs(engine) == []


def test_settings_columns_keep_existing_greenhouses_as_they_ran_and_downgrade(
        db_url: str, engine: Engine) -> None:
    """0010 gives a greenhouse registered before it its lamps, the limits' lamp budget and version 1, its
    zones no name ("Zone N"), and keeps their zones (no table copy on SQLite, whose drop would cascade);
    PostgreSQL refuses a budget over 24 h; downgrading keeps bands and caps."""
    db_cli.upgrade(db_url, "0009_login_lock")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO greenhouse (id, name, zones) VALUES ('gh-1', 'North', 1)"))
        conn.execute(text("INSERT INTO zone (greenhouse_id, zone_index, soil_type, target_low_vwc, "
                          "target_high_vwc, saturation_vwc, daily_water_cap_l) "
                          "VALUES ('gh-1', 0, 'loam', 0.2, 0.27, 0.45, 250)"))
    db_cli.upgrade(db_url, "0010_greenhouse_settings")
    with engine.connect() as conn:
        assert conn.execute(text("SELECT lamps_ours, lamp_hours_per_day, settings_version "
                                 "FROM greenhouse")).one() == (True, None, 1)
        assert conn.execute(text("SELECT name, daily_water_cap_l FROM zone")).one() == (None, 250.0)
    if engine.dialect.name == "postgresql":  # SQLite adds no check to an existing table: the API refuses it
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text("UPDATE greenhouse SET lamp_hours_per_day = 25"))
    db_cli.downgrade(db_url, "0009_login_lock")
    assert "settings_version" not in {c["name"] for c in inspect(engine).get_columns("greenhouse")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT target_low_vwc, daily_water_cap_l FROM zone")).one() == (0.2, 250.0)
    db_cli.upgrade(db_url)
    assert _diffs(engine) == []


def test_user_language_keeps_existing_accounts_in_english_and_downgrades(db_url: str, engine: Engine) -> None:
    """0012 gives an account made before it English and keeps its roles (no table copy on SQLite, whose
    drop would cascade to them); PostgreSQL refuses a language the catalogue lacks; downgrading drops it."""
    db_cli.upgrade(db_url, "0011_alarm_operations")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO app_user (username, password_hash, token_epoch) "
                          "VALUES ('olga', 'x', 0)"))
        conn.execute(text("INSERT INTO app_user_role (user_id, role) SELECT id, 'operator' FROM app_user"))
    db_cli.upgrade(db_url, "0012_user_language")
    with engine.begin() as conn:
        assert conn.execute(text("SELECT language FROM app_user")).scalar_one() == "en"
        assert conn.execute(text("SELECT role FROM app_user_role")).scalar_one() == "operator"
        conn.execute(text("UPDATE app_user SET language = 'zh-Hans'"))
    if engine.dialect.name == "postgresql":  # SQLite adds no check to an existing table: the API refuses it
        with pytest.raises(IntegrityError), engine.begin() as conn:
            conn.execute(text("UPDATE app_user SET language = 'fr'"))
    db_cli.downgrade(db_url, "0011_alarm_operations")
    assert "language" not in {c["name"] for c in inspect(engine).get_columns("app_user")}
    with engine.connect() as conn:
        assert conn.execute(text("SELECT role FROM app_user_role")).scalar_one() == "operator"
    db_cli.upgrade(db_url)
    assert _diffs(engine) == []


def test_add_greenhouse_refuses_unmigrated_db(db_url: str) -> None:
    with pytest.raises(SchemaOutOfDate, match="greentwin db upgrade"):
        add_greenhouse(db_url, "gh-1")


def _decision(gh: str, seq: int, cmd_id: str | None = None) -> Decision:
    return Decision(
        greenhouse_id=gh,
        seq=seq,
        ts=datetime(2026, 5, 1, 12, 0, tzinfo=UTC),
        actor="loop",
        mode="auto",
        telemetry={"soil_vwc": [[0.21, None]]},
        estimate={"theta": [0.2]},
        member_actions=[[1, 0, 50.0]],
        voted={"valves": [1], "pump_pct": 50.0},
        clipped={"valves": [1], "pump_pct": 40.0},
        rules_fired=["pump_rate_limit"],
        reward_terms=None,
        confidence=0.9,
        explanation={"top": "soil_vwc[0]"},
        cmd_id=cmd_id or str(uuid.uuid4()),
        ack_status="pending",
    )


def test_greenhouse_decisions_and_constraints(db_url: str, engine: Engine) -> None:
    db_cli.upgrade(db_url)
    gh = add_greenhouse(db_url, "gh-1", zones=3, soil="clay", name="North house")
    assert (gh.id, gh.name, gh.zones) == ("gh-1", "North house", 3)
    add_greenhouse(db_url, "gh-2")
    with pytest.raises(GreenhouseExists):
        add_greenhouse(db_url, "gh-1")

    with Session(engine) as s:
        zones = s.scalars(select(Zone).where(Zone.greenhouse_id == "gh-1").order_by(Zone.index)).all()
        assert [z.index for z in zones] == [0, 1, 2]
        assert all(z.soil_type == "clay" and z.target_low_vwc < z.target_high_vwc <= z.saturation_vwc
                   for z in zones)
        assert s.get(Greenhouse, "gh-1").created_at is not None  # type: ignore[union-attr]

        s.add_all([_decision("gh-1", 1), _decision("gh-1", 2), _decision("gh-2", 1)])
        s.add(ModeChange(greenhouse_id="gh-1", seq=1, ts=datetime.now(UTC), actor="op", from_mode=None,
                         to_mode="auto"))
        s.commit()
        stored = s.scalars(select(Decision).where(Decision.greenhouse_id == "gh-1", Decision.seq == 1)).one()
        assert stored.telemetry == {"soil_vwc": [[0.21, None]]} and stored.rules_fired == ["pump_rate_limit"]

        s.add(_decision("gh-1", 2))  # same (greenhouse, seq)
        with pytest.raises(IntegrityError):
            s.commit()
        s.rollback()

        dup_cmd = str(uuid.uuid4())
        s.add_all([_decision("gh-1", 10, dup_cmd), _decision("gh-1", 11, dup_cmd)])
        with pytest.raises(IntegrityError):
            s.commit()
        s.rollback()

        s.add(_decision("no-such-greenhouse", 1))  # foreign keys are on, SQLite included
        with pytest.raises(IntegrityError):
            s.commit()
        s.rollback()

        bad = _decision("gh-1", 3)
        bad.mode = "turbo"
        s.add(bad)
        with pytest.raises(IntegrityError):
            s.commit()
        s.rollback()


@pytest.mark.parametrize(
    "kwargs, match",
    [({"gh_id": "GH 1"}, "invalid greenhouse id"), ({"soil": "peat"}, "soil"), ({"zones": 0}, "zones")],
)
def test_add_greenhouse_validates_input(kwargs: dict[str, object], match: str, tmp_path: Path) -> None:
    args: dict[str, object] = {"gh_id": "gh-1", **kwargs}
    with pytest.raises(ValueError, match=match):
        add_greenhouse(f"sqlite:///{tmp_path / 'x.sqlite3'}", **args)  # type: ignore[arg-type]

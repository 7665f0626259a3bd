"""The policy registry on SQLite and PostgreSQL: adoption, promotion, rollback, one promoted at a time."""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app import registry
from app.cli import db as db_cli
from app.cli import main as cli_main
from app.core.config import DEFAULT_POLICY_DIR
from app.core.db import make_engine, make_session_factory
from app.models import PolicyVersion


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
        db_cli.upgrade(url)
        yield url
        return
    with request.getfixturevalue("make_pg_database")("h_retrain_registry") as url:
        db_cli.upgrade(url)
        yield url


@pytest.fixture
def sessions(db_url: str) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_url)
    yield make_session_factory(engine)
    engine.dispose()


def _copy_ensemble(tmp_path: Path, name: str) -> Path:
    """A registered version needs an ensemble directory; the shipped one stands in for any."""
    out = tmp_path / name
    shutil.copytree(DEFAULT_POLICY_DIR, out)
    return out


def test_empty_registry_adopts_the_configured_ensemble(sessions: sessionmaker[Session]) -> None:
    info = registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    assert info is not None and info.status == "promoted"
    assert info.version == registry.manifest_version(DEFAULT_POLICY_DIR)
    again = registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    assert again == info and len(registry.list_versions(sessions)) == 1


def test_promote_then_rollback(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    first = registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    assert first is not None
    registry.add_candidate(sessions, "cand-1", _copy_ensemble(tmp_path, "c1"), parent=first.version,
                           metrics={"x": 1})
    with pytest.raises(registry.RegistryError, match="unknown"):
        registry.promote(sessions, "nope", "cli:test")
    registry.promote(sessions, "cand-1", "cli:test")
    assert registry.promoted(sessions).version == "cand-1"  # type: ignore[union-attr]
    assert registry.get(sessions, first.version).status == "retired"  # type: ignore[union-attr]
    back, again = registry.rollback(sessions, "cli:ops", "worse at night")
    assert (back.version, back.status) == ("cand-1", "rolled_back")
    assert (again.version, again.promoted_by) == (first.version, "cli:ops")
    assert registry.promoted(sessions).version == first.version  # type: ignore[union-attr]
    with pytest.raises(registry.RegistryError, match="no earlier"):
        registry.rollback(sessions, "cli:ops")


def test_a_second_promoted_row_is_refused(sessions: sessionmaker[Session], tmp_path: Path) -> None:
    registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
    registry.add_candidate(sessions, "cand-1", _copy_ensemble(tmp_path, "c1"), parent=None)
    with sessions() as s, pytest.raises(IntegrityError):
        s.execute(update(PolicyVersion).where(PolicyVersion.version == "cand-1").values(status="promoted"))
        s.commit()


@pytest.mark.postgres
def test_concurrent_promotions_leave_one_promoted(  # type: ignore[no-untyped-def]
        make_pg_database, tmp_path: Path) -> None:
    with make_pg_database("h_retrain_race") as url:
        db_cli.upgrade(url)
        engine = make_engine(url, pool_size=10)
        sessions = make_session_factory(engine)
        registry.ensure_seeded(sessions, DEFAULT_POLICY_DIR)
        folder = _copy_ensemble(tmp_path, "c")
        names = [f"cand-{i}" for i in range(8)]
        for n in names:
            registry.add_candidate(sessions, n, folder, parent=None)
        errors: list[BaseException] = []
        start = threading.Barrier(len(names))

        def go(name: str) -> None:
            start.wait()
            try:
                registry.promote(sessions, name, f"cli:{name}")
            except BaseException as exc:  # noqa: BLE001 - collected for the assertion
                errors.append(exc)

        threads = [threading.Thread(target=go, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        rows = registry.list_versions(sessions)
        assert sum(r.status == "promoted" for r in rows) == 1
        assert sum(r.status == "retired" for r in rows) == len(names)  # every other promotion was replaced
        engine.dispose()


def test_policy_cli(db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["policy", "list", "--url", db_url]) == 0
    shipped = registry.manifest_version(DEFAULT_POLICY_DIR)
    assert shipped in capsys.readouterr().out
    assert cli_main(["policy", "promote", "missing", "--url", db_url]) == 2
    assert "unknown policy version" in capsys.readouterr().err
    assert cli_main(["policy", "rollback", "--url", db_url]) == 2
    engine = make_engine(db_url)
    registry.add_candidate(make_session_factory(engine), "cand-9", _copy_ensemble(tmp_path, "c9"),
                           parent=shipped)
    engine.dispose()
    assert cli_main(["policy", "promote", "cand-9", "--url", db_url]) == 0
    assert cli_main(["policy", "rollback", "--url", db_url, "--reason", "test"]) == 0
    out = capsys.readouterr().out
    assert "rolled back cand-9" in out and f"{shipped} is promoted again" in out

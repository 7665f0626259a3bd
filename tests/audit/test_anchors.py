"""Chain heads exported outside the database catch a chain cut or rewritten in it, even one that
still verifies on its own (the attacker here holds the keys and the owner's rights)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, text

from app.cli import db as db_cli
from app.core.db import make_engine
from audit import AuditEvent, Keyring, Signer
from audit.anchors import append_anchors, check_anchors, read_anchors, sign_heads
from audit.store import AuditStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'audit.sqlite3'}"
        db_cli.upgrade(url)
        eng = make_engine(url)
        yield eng
        eng.dispose()
        return
    with request.getfixturevalue("make_pg_database")("gt_anchors") as url:
        db_cli.upgrade(url)
        eng = make_engine(url)
        yield eng
        eng.dispose()


@pytest.fixture
def keys() -> tuple[Keyring, Signer]:
    return Keyring.generate(), Signer.generate()


def _events(n: int, start: int = 0, note: str = "as it happened") -> list[AuditEvent]:
    return [AuditEvent("decision", "loop", {"i": i, "note": note}, T0 + timedelta(minutes=i))
            for i in range(start, start + n)]


def _store(engine: Engine, keys: tuple[Keyring, Signer]) -> AuditStore:
    store = AuditStore(engine, *keys)
    for gh in ("gh-a", "gh-b"):
        store.append_many(gh, _events(20))
    return store


def _export(store: AuditStore, signer: Signer, path: Path) -> None:
    append_anchors(path, sign_heads(signer, store.heads()), signer.key_id)


def _cut_tail(engine: Engine, gh: str, from_seq: int) -> None:
    """Delete records past the triggers (owner rights), as someone covering tracks would."""
    with engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_record DISABLE TRIGGER USER"))
        else:
            conn.execute(text("DROP TRIGGER IF EXISTS audit_record_purge_only"))
        conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id = :g AND seq >= :s"),
                     {"g": gh, "s": from_seq})
        if conn.dialect.name == "postgresql":
            conn.execute(text("ALTER TABLE audit_record ENABLE TRIGGER USER"))


def test_exported_heads_hold_while_the_chains_grow(engine: Engine, keys: tuple[Keyring, Signer],
                                                   tmp_path: Path) -> None:
    store = _store(engine, keys)
    path = tmp_path / "anchors.jsonl"
    _export(store, keys[1], path)
    assert path.stat().st_mode & 0o777 == 0o600
    store.append_many("gh-a", _events(5, start=20))
    anchors, problems = read_anchors(path, keys[1].public_key)
    assert problems == [] and {g: cp.seq for g, cp in anchors.items()} == {"gh-a": 20, "gh-b": 20}
    assert all(c.ok for c in check_anchors(store, anchors))
    _export(store, keys[1], path)  # the newest line of a chain is the one that counts
    anchors, _ = read_anchors(path, keys[1].public_key)
    assert anchors["gh-a"].seq == 25 and len(path.read_text().splitlines()) == 4


def test_a_rewritten_tail_verifies_on_its_own_but_not_against_the_anchor(
        engine: Engine, keys: tuple[Keyring, Signer], tmp_path: Path) -> None:
    store = _store(engine, keys)
    path = tmp_path / "anchors.jsonl"
    _export(store, keys[1], path)
    _cut_tail(engine, "gh-a", 15)
    # Recomputed: a fresh writer resumes from the stored head and seals other events in their place.
    forger = AuditStore(engine, *keys)
    forger.append_many("gh-a", _events(8, start=14, note="what we would rather have happened"))
    [result] = forger.verify("gh-a")
    assert result.ok and result.head_seq == 22, "the rewritten chain is self-consistent"
    checks = {c.greenhouse_id: c for c in check_anchors(forger, read_anchors(path, keys[1].public_key)[0])}
    assert checks["gh-b"].ok
    assert not checks["gh-a"].ok and "rewritten" in str(checks["gh-a"].problem) and checks["gh-a"].seq == 20


def test_a_cut_tail_and_a_vanished_chain_are_found(engine: Engine, keys: tuple[Keyring, Signer],
                                                   tmp_path: Path) -> None:
    store = _store(engine, keys)
    path = tmp_path / "anchors.jsonl"
    _export(store, keys[1], path)
    _cut_tail(engine, "gh-a", 18)
    _cut_tail(engine, "gh-b", 1)
    assert store.verify("gh-a")[0].ok, "what is left verifies"
    checks = {c.greenhouse_id: c for c in check_anchors(store, read_anchors(path, keys[1].public_key)[0])}
    assert "chain cut" in str(checks["gh-a"].problem) and "now ends at seq 17" in str(checks["gh-a"].problem)
    assert "the chain is gone" in str(checks["gh-b"].problem)


def test_forged_or_damaged_lines_anchor_nothing(engine: Engine, keys: tuple[Keyring, Signer],
                                                tmp_path: Path) -> None:
    store = _store(engine, keys)
    path = tmp_path / "anchors.jsonl"
    other = Signer.generate()
    append_anchors(path, sign_heads(other, [("gh-a", 20, "0" * 64)]), other.key_id)  # someone else's key
    # ... claiming to be ours
    append_anchors(path, sign_heads(other, [("gh-a", 20, "0" * 64)]), keys[1].key_id)
    _export(store, keys[1], path)
    line = json.loads(path.read_text().splitlines()[-1])
    line["seq"] = 19  # a genuine line, edited
    with path.open("a") as fh:
        fh.write(json.dumps(line) + "\n{not json\n")
    anchors, problems = read_anchors(path, keys[1].public_key)
    assert "neither the signing key nor a retired one" in problems[0] and "signature invalid" in problems[1]
    assert len(problems) == 4 and {g: cp.seq for g, cp in anchors.items()} == {"gh-a": 20, "gh-b": 20}
    assert all(c.ok for c in check_anchors(store, anchors))


def test_anchors_and_checkpoints_signed_before_a_key_rotation_still_verify(
        engine: Engine, keys: tuple[Keyring, Signer], tmp_path: Path) -> None:
    keyring, old = keys
    store = AuditStore(engine, keyring, old, checkpoint_every=5)
    store.append_many("gh-a", _events(12))
    path = tmp_path / "anchors.jsonl"
    _export(store, old, path)
    new = Signer.generate()
    rotated = AuditStore(engine, keyring.rotate(), new, checkpoint_every=5, retired_keys=[old.public_key])
    rotated.append_many("gh-a", _events(8, start=12))
    _export(rotated, new, path)
    names = [json.loads(ln)["key_id"] for ln in path.read_text().splitlines()]
    assert names == [old.key_id, new.key_id]
    [result] = rotated.verify("gh-a")
    assert result.ok and result.head_seq == 20, "checkpoints of both keys verify"
    anchors, problems = read_anchors(path, list(rotated.verify_keys))
    assert problems == [] and anchors["gh-a"].seq == 20
    # Without the retired key the old line names a key nobody vouches for, and old checkpoints fail.
    _, problems = read_anchors(path, new.public_key)
    assert len(problems) == 1 and old.key_id in problems[0]
    [result] = AuditStore(engine, keyring.rotate(), new, checkpoint_every=5).verify("gh-a")
    assert not result.ok and "checkpoint signature invalid" in str(result.reason)


def test_lines_written_before_anchors_named_their_key_still_verify(
        engine: Engine, keys: tuple[Keyring, Signer], tmp_path: Path) -> None:
    store = _store(engine, keys)
    path = tmp_path / "anchors.jsonl"
    _export(store, keys[1], path)
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({k: v for k, v in ln.items() if k != "key_id"}) + "\n"
                            for ln in lines))
    old = Signer.generate()
    anchors, problems = read_anchors(path, [old.public_key, keys[1].public_key])
    assert problems == [] and set(anchors) == {"gh-a", "gh-b"}, \
        "checked against every key it may be signed by"
    _, problems = read_anchors(path, old.public_key)
    assert len(problems) == 2 and all("signature invalid" in p for p in problems)

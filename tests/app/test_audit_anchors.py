"""The service's head exports (app/anchoring.py) and ``greentwin audit verify`` against them."""

from __future__ import annotations

import argparse
import json
import logging
import stat
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from app.anchoring import HeadAnchoring, anchor_path
from app.audit_keys import load_retired_keys, retired_keys_path
from app.cli import db as db_cli
from app.cli.audit import run_keygen, run_verify
from app.core.config import Settings
from app.core.db import make_engine
from audit import AuditEvent, Keyring, Signer
from audit.anchors import read_anchors
from audit.store import AuditStore
from tests.app.disk_full import disk_full_at
from tests.app.procs import free_port


@pytest.fixture
def url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    return url


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    eng = make_engine(url)
    yield eng
    eng.dispose()


@pytest.fixture
def store(engine: Engine) -> AuditStore:
    s = AuditStore(engine, Keyring.generate(), Signer.generate())
    for gh in ("gh1", "gh2"):
        for i in range(5):
            s.append(gh, "decision", "loop", {"seq": i})
    return s


class _Collector(BaseHTTPRequestHandler):
    bodies: list[Any] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        """Quiet: the test reads what was posted, not the server's log."""


@pytest.fixture
def collector() -> Iterator[tuple[str, list[Any]]]:
    _Collector.bodies = []
    server = HTTPServer(("127.0.0.1", 0), _Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/anchors", _Collector.bodies
    server.shutdown()
    server.server_close()


def test_heads_that_moved_are_exported_to_the_file_and_posted(store: AuditStore, tmp_path: Path,
                                                               collector: tuple[str, list[Any]]) -> None:
    where, bodies = collector
    path = tmp_path / "state" / "audit-anchors.jsonl"
    anchoring = HeadAnchoring(store, path, 60.0, where)
    assert anchoring.anchor_now() == 2
    assert anchoring.anchor_now() == 0, "nothing moved, nothing exported"
    store.append("gh2", "decision", "loop", {"seq": 5})
    assert anchoring.anchor_now() == 1
    lines = [json.loads(ln) for ln in path.read_text().splitlines()]
    assert [(ln["greenhouse_id"], ln["seq"]) for ln in lines] == [("gh1", 5), ("gh2", 5), ("gh2", 6)]
    assert [[(a["greenhouse_id"], a["seq"]) for a in b["anchors"]] for b in bodies] == \
        [[("gh1", 5), ("gh2", 5)], [("gh2", 6)]]
    assert bodies[0]["anchors"][0] == lines[0], "the same signed line goes to both"


def test_a_failed_post_is_logged_without_credentials_and_the_file_still_written(
        store: AuditStore, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "anchors.jsonl"
    anchoring = HeadAnchoring(store, path, 60.0, f"http://keeper:s3cret-pw@127.0.0.1:{free_port()}/a")
    with caplog.at_level(logging.WARNING, logger="app.anchoring"):
        assert anchoring.anchor_now() == 2
    assert len(path.read_text().splitlines()) == 2
    assert "POST" in caplog.text and "s3cret-pw" not in caplog.text


def test_default_path_is_in_the_state_directory(tmp_path: Path) -> None:
    assert anchor_path(Settings(), tmp_path) == tmp_path / "audit-anchors.jsonl"
    assert anchor_path(Settings(audit_anchor_file=tmp_path / "x.jsonl"),
                       Path("elsewhere")) == tmp_path / "x.jsonl"


def test_audit_verify_fails_a_rewritten_chain_that_verifies_on_its_own(
        url: str, engine: Engine, store: AuditStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    pem = tmp_path / "signing.pem"
    pem.write_bytes(store.signer.to_pem())
    monkeypatch.setenv("GREENTWIN_AUDIT_KEYS", store.keyring.to_json())
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(pem))
    path = tmp_path / "anchors.jsonl"
    HeadAnchoring(store, path, 60.0).anchor_now()

    def verify(anchors: Path) -> int:
        return run_verify(argparse.Namespace(url=url, greenhouse=None, anchors=str(anchors)))

    assert verify(path) == 0
    out = capsys.readouterr().out
    assert "ok   gh1: anchor: holds the head anchored at" in out and "ok   gh2: anchor:" in out
    assert verify(tmp_path / "missing.jsonl") == 1
    assert "does not exist" in capsys.readouterr().out

    with engine.begin() as conn:  # owner rights: past the trigger, then the tail sealed anew
        conn.execute(text("DROP TRIGGER IF EXISTS audit_record_purge_only"))
        conn.execute(text("DELETE FROM audit_record WHERE greenhouse_id = 'gh1' AND seq >= 4"))
    forger = AuditStore(engine, store.keyring, store.signer)
    forger.append("gh1", "decision", "loop", {"seq": 3, "note": "rewritten"})
    forger.append("gh1", "decision", "loop", {"seq": 4, "note": "rewritten"})
    assert verify(path) == 1
    out = capsys.readouterr().out
    assert "ok   gh1: 5 records verified" in out, "the chain itself verifies"
    assert "FAIL gh1: anchor: chain rewritten: record seq 5" in out and "ok   gh2: anchor:" in out


def test_audit_verify_holds_old_anchors_and_checkpoints_after_the_signing_key_is_rotated(
        url: str, engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    keys = tmp_path / "keys"
    assert run_keygen(argparse.Namespace(out=str(keys), rotate=None, signing_key=None)) == 0
    ring, pem = keys / "greentwin_audit_key", keys / "audit_signing_key"
    for var in ("GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY", "GREENTWIN_AUDIT_SIGNING_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GREENTWIN_AUDIT_KEY", str(ring))
    monkeypatch.setenv("GREENTWIN_AUDIT_SIGNING_KEY", str(pem))
    old = Signer.from_pem(pem.read_bytes())
    before = AuditStore(engine, Keyring.from_file(ring), old, checkpoint_every=2)
    for gh in ("gh1", "gh2"):
        before.append_many(gh, [AuditEvent("decision", "loop", {"seq": i}) for i in range(5)])
    path = tmp_path / "anchors.jsonl"
    HeadAnchoring(before, path, 60.0).anchor_now()
    capsys.readouterr()

    assert run_keygen(argparse.Namespace(out=None, rotate=str(ring), signing_key=str(pem))) == 0
    out = capsys.readouterr().out
    new = Signer.from_pem(pem.read_bytes())
    assert new.key_id != old.key_id and f"signing key {new.key_id} (was {old.key_id})" in out
    retired = retired_keys_path(pem)
    assert stat.S_IMODE(retired.stat().st_mode) == 0o600 and load_retired_keys()[0] == old.public_key
    assert pem.read_bytes() not in out.encode(), "ids only, never key material"
    # The service restarts on the new keys: its first export signs every head anew; the lines the old
    # key signed stay in the file and must still verify.
    after = AuditStore(engine, Keyring.from_file(ring), new, checkpoint_every=2,
                       retired_keys=load_retired_keys())
    after.append_many("gh1", [AuditEvent("decision", "loop", {"seq": i}) for i in range(5, 9)])
    HeadAnchoring(after, path, 60.0).anchor_now()
    assert [json.loads(ln)["key_id"] for ln in path.read_text().splitlines()] == \
        [old.key_id] * 2 + [new.key_id] * 2

    def verify() -> int:
        return run_verify(argparse.Namespace(url=url, greenhouse=None, anchors=str(path)))

    assert verify() == 0
    out = capsys.readouterr().out
    assert "ok   gh1: 9 records verified" in out and "ok   gh2: 5 records verified" in out
    assert "ok   gh1: anchor: holds" in out and "ok   gh2: anchor: holds" in out
    retired.unlink()  # without the retired key, what it signed vouches for nothing
    assert verify() == 1
    out = capsys.readouterr().out
    assert "checkpoint signature invalid" in out and "neither the signing key nor a retired one" in out


def test_a_full_disk_leaves_no_torn_anchor_line_and_the_heads_go_out_at_the_next_round(
        store: AuditStore, tmp_path: Path) -> None:
    path = tmp_path / "anchors.jsonl"
    anchoring = HeadAnchoring(store, path, 60.0)
    assert anchoring.anchor_now() == 2
    size = path.stat().st_size
    store.append("gh1", "decision", "loop", {"seq": 5})
    with disk_full_at(size + 30), pytest.raises(OSError):  # part of the line would fit
        anchoring.anchor_now()
    assert path.stat().st_size == size
    assert anchoring.anchor_now() == 1, "room again: the head that moved is exported"
    anchors, problems = read_anchors(path, store.signer.public_key)
    assert problems == [] and anchors["gh1"].seq == 6

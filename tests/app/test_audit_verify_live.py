"""`greentwin audit verify` beside a service that is writing: exact, so a scheduled run raises no false alarm.

The writer stores a row before it seals its audit record (it seals in batches, every few seconds),
so at any moment the newest rows of a healthy service are not sealed yet. Here the real writer
process stores decisions and acks from its journal on PostgreSQL while verify runs again and
again; every run must pass, and a row that stays unsealed must still be reported.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, insert, select

from app import audit_coverage
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.journal import DecisionJournal
from app.models import Decision
from app.writer import Job, WriterConfig, WriterProcess
from audit.tables import AuditRecord
from tests.app.test_audit_verify import decision_job, keys, register, verify  # noqa: F401 (keys: a fixture)

pytestmark = [pytest.mark.postgres]


class Plant:
    """The control loop's side: journals a decision every ``period_s``, and the edge box's ack of the one
    before."""

    def __init__(self, journal: DecisionJournal, writer: WriterProcess, period_s: float = 0.05) -> None:
        self.journal, self.writer, self.period_s = journal, writer, period_s
        self.seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="plant", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            self.seq += 1
            job = decision_job(self.seq)
            entries = [job.entry()]
            if self.seq > 1:
                status = "rejected" if self.seq % 7 == 0 else "applied"
                entries.append(Job.ack("ga", uuid.UUID(int=self.seq - 1), status, None,
                                       job.ts + timedelta(seconds=1)).entry())
            self.writer.appended(self.journal.append(entries))

    def __enter__(self) -> Plant:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def service(make_pg_database, keys,  # noqa: F811
            tmp_path: Path) -> Iterator[tuple[str, WriterProcess, DecisionJournal]]:
    """A migrated PostgreSQL database with greenhouse ``ga`` and the writer process tailing a journal,
    sealing at least every 3 s while records keep coming (the service's default is 15 s)."""
    keyring, signer = keys
    with make_pg_database("gt_verify_live") as url:
        db_cli.upgrade(url)
        register(url, "ga")
        journal = DecisionJournal(tmp_path / "journal")
        writer = WriterProcess()
        writer.start(WriterConfig(database_url=url, spool_path=tmp_path / "spool.jsonl",
                                  journal=journal.folder, policy_dir=tmp_path / "no-policy",
                                  audit_keys=(keyring.to_json(), signer.to_pem()),
                                  audit_flush_s=1.0, audit_flush_busy_s=3.0))
        try:
            assert writer.wait_ready(120)
            yield url, writer, journal
        finally:
            journal.close()
            writer.stop()


def _counts(url: str) -> tuple[int, int]:
    """(decision rows, sealed records) of ``ga`` now."""
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as s:
            return (int(s.scalar(select(func.count()).select_from(Decision)) or 0),
                    int(s.scalar(select(func.count()).select_from(AuditRecord)) or 0))
    finally:
        engine.dispose()


def test_verify_passes_every_time_while_the_writer_writes(service, capsys) -> None:
    url, writer, journal = service
    runs: list[tuple[int, str]] = []
    with Plant(journal, writer):
        deadline = time.monotonic() + 60
        while _counts(url)[1] < 40 and time.monotonic() < deadline:  # the first batches are sealed
            time.sleep(0.2)
        # Four runs at least, and on until one met rows not sealed yet (a quiet machine's writer may
        # keep ahead of a few runs): that run is the one that shows the wait works.
        while len(runs) < 4 or (not any("sealed while verifying" in out for _, out in runs)
                                and len(runs) < 12):
            runs.append(verify(capsys, url))
        rows_then, _ = _counts(url)
    failed = [out for code, out in runs if code != 0]
    assert not failed, f"{len(failed)} of {len(runs)} runs failed; first:\n{failed[0]}"
    assert rows_then > 40 and all("ok   ga: every record in the tables is in the trail" in out
                                  for _, out in runs)
    assert any("sealed while verifying" in out for _, out in runs)  # the newest rows were waited for


def test_a_row_that_is_never_sealed_is_missing_once_the_lag_is_over(service, capsys, monkeypatch) -> None:
    """Rows wait for their records only as long as the writer's sealing lag, counted by verify's own
    clock: a row written behind the service's back, claiming to be from tomorrow, is still reported."""
    url, writer, journal = service
    lag = 8.0
    monkeypatch.setattr(audit_coverage, "SEAL_LAG_S", lag)
    with Plant(journal, writer):
        deadline = time.monotonic() + 60
        while _counts(url)[1] < 20 and time.monotonic() < deadline:
            time.sleep(0.2)
        forged = {**decision_job(100_000).row, "ts": datetime.now(UTC) + timedelta(days=1),
                  "actor": "operator:op1"}
        engine = make_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(insert(Decision), [forged])
        finally:
            engine.dispose()
        started = time.monotonic()
        code, out = verify(capsys, url)
        took = time.monotonic() - started
    assert code == 1, out
    [missing] = [line for line in out.splitlines() if line.startswith("MISSING ga: ")]
    assert missing.startswith("MISSING ga: 1 of ") \
        and missing.endswith("decisions without an audit record: 100000")
    assert took >= lag


def test_the_lag_verify_allows_covers_the_writer_s_pause_between_seals() -> None:
    assert audit_coverage.SEAL_LAG_S >= 2 * WriterConfig.audit_flush_busy_s

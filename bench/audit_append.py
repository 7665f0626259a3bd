"""Audit store throughput: batched ``append_many`` against one-by-one ``append`` (baseline), and verify rate.

Runs on a temp SQLite file and, when reachable, on a throw-away PostgreSQL database. Only the store
calls are timed (seal with AES-256-GCM, hash-chain, insert, commit); the synthetic payloads are built
before each call. ``cpu`` is this process's CPU time per batched record (all threads), which the
machine's load disturbs far less than the wall-clock rate; the load average is printed because the
machine may be shared.

    python bench/audit_append.py [--records 20000] [--batch 500] [--baseline 500] [--seal-ahead N] [--runs 1]
                                 [--pg-url URL]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.cli import db as db_cli
from app.core.db import make_engine
from audit import AuditEvent, Keyring, Signer, canonical_json
from audit.store import AuditStore

PG_URL = os.environ.get("GREENTWIN_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def _event(i: int) -> AuditEvent:
    """A decision-sized entry, ~1.5 KB of canonical JSON: some numbers, mostly text (rules, explanation)."""
    return AuditEvent(
        "decision",
        "loop",
        {
            "i": i,
            "soil_vwc": [round(0.2 + k / 1000, 4) for k in range(24)],
            "valves": [k % 2 for k in range(12)],
            "rules_fired": ["pump_rate_limit", "daily_water_cap", "vwc_ceiling"],
            "explanation": "zone 3 below target; irrigating 40 s at 60 % pump. " * 23,
        },
    )


@contextmanager
def _sqlite() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as tmp:
        yield f"sqlite:///{Path(tmp) / 'bench.sqlite3'}"


@contextmanager
def _postgres(base: str) -> Iterator[str]:
    name = f"greentwin_bench_{uuid.uuid4().hex[:12]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(base).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def run(url: str, records: int, batch: int, baseline: int, seal_ahead: int | None) -> dict[str, float]:
    db_cli.upgrade(url)
    engine = make_engine(url)
    store = AuditStore(engine, Keyring.generate(), Signer.generate(), seal_ahead=seal_ahead)
    try:
        wall = cpu = 0.0
        for start in range(0, records, batch):
            events = [_event(i) for i in range(start, min(start + batch, records))]
            t0, c0 = time.perf_counter(), time.process_time()
            store.append_many("gh-batched", events)
            wall, cpu = wall + time.perf_counter() - t0, cpu + time.process_time() - c0
        batched, cpu_us = records / wall, cpu / records * 1e6

        wall = 0.0
        for i in range(baseline):
            ev = _event(i)
            t0 = time.perf_counter()
            store.append("gh-single", ev.kind, ev.actor, ev.payload)
            wall += time.perf_counter() - t0
        single = baseline / wall

        t0 = time.perf_counter()
        [result] = store.verify("gh-batched")
        verify = result.records_checked / (time.perf_counter() - t0)
        assert result.ok and result.records_checked == records, result
    finally:
        engine.dispose()
    return {"batched": batched, "cpu_us": cpu_us, "single": single, "ratio": batched / single,
            "verify": verify}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--baseline", type=int, default=500, help="records appended one by one")
    parser.add_argument("--seal-ahead", type=int, default=None, metavar="N",
                        help="on PostgreSQL, seal chunks of N records in a worker thread ahead of the write")
    parser.add_argument("--runs", type=int, default=1, help="repeat each backend (fresh database each time)")
    parser.add_argument("--pg-url", default=PG_URL)
    args = parser.parse_args()
    print(
        f"payload {len(canonical_json(_event(0).payload))} B, {args.records} records, "
        f"batches of {args.batch}, seal-ahead {args.seal_ahead or 'off'}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    backends: list[tuple[str, Callable[[], AbstractContextManager[str]]]] = [("sqlite", _sqlite)]
    try:
        probe = create_engine(args.pg_url, connect_args={"connect_timeout": 3})
        with probe.connect():
            pass
        probe.dispose()
        backends.append(("postgresql", lambda: _postgres(args.pg_url)))
    except OperationalError as exc:
        print(f"postgresql: skipped ({str(exc.orig).strip().splitlines()[0]})")
    for _ in range(args.runs):
        for name, ctx in backends:
            with ctx() as url:
                r = run(url, args.records, args.batch, args.baseline, args.seal_ahead)
            print(
                f"{name:10s} batched {r['batched']:8.0f} rec/s ({r['cpu_us']:5.1f} us cpu/rec) | "
                f"one-by-one {r['single']:7.0f} rec/s | ratio {r['ratio']:5.1f}x | "
                f"verify {r['verify']:8.0f} rec/s"
            )


if __name__ == "__main__":
    main()

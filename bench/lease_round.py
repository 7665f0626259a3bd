"""What several replicas cost: one lease round per replica, and the telemetry every replica parses.

Two numbers for the capacity plan in ``deploy/README.md``: the wall time of one lease round
(heartbeat, renew, take) for ``--greenhouses`` greenhouses split between two replicas, on a
throw-away PostgreSQL database (SQLite when none is reachable); and how many telemetry messages
one core validates per second (:func:`wire.topics.parse_telemetry`), which every replica
pays for every greenhouse because each one hears all telemetry and drops what it does not hold.

    python bench/lease_round.py [--greenhouses 1000] [--rounds 20] [--pg-url URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.leases import LeaseBook
from app.models import Greenhouse
from wire.topics import Telemetry, encode, parse_telemetry

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"


@contextmanager
def database(pg_url: str) -> Iterator[str]:
    """A fresh, migrated database: PostgreSQL if reachable, else an SQLite file."""
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    try:
        with admin.connect() as conn:
            name = f"gt_bench_{uuid.uuid4().hex[:8]}"
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError:
        admin.dispose()
        with tempfile.TemporaryDirectory() as folder:
            url = f"sqlite:///{folder}/bench.sqlite3"
            db_cli.upgrade(url)
            yield url
        return
    try:
        url = make_url(pg_url).set(database=name).render_as_string(hide_password=False)
        db_cli.upgrade(url)
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def lease_rounds(url: str, greenhouses: int, rounds: int) -> list[float]:
    """Seconds per round of one replica while two share ``greenhouses`` (steady state: renewals)."""
    engine = make_engine(url)
    try:
        sessions = make_session_factory(engine)
        ghs = [f"gh{i:05d}" for i in range(greenhouses)]
        with sessions.begin() as s:  # registering zones is not what is measured: greenhouse rows suffice
            s.add_all(Greenhouse(id=gh, name=gh, zones=6) for gh in ghs)
        books = [LeaseBook(sessions, name, ttl_s=12.0, renew_s=3.0) for name in ("a", "b")]
        for _ in range(3):  # settle the split
            for b in books:
                b.activate(b.round(ghs).gained, b.clock())
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            books[0].round(ghs)
            times.append(time.perf_counter() - t0)
        assert len(books[0].held()) + len(books[1].held()) == greenhouses
        return times
    finally:
        engine.dispose()


def parse_rate(zones: int = 6, n: int = 5000) -> float:
    """Telemetry messages one core validates per second."""
    tel = Telemetry(ts=datetime.now(UTC), boot_id="bench", seq=1, soil_vwc=[[0.25, 0.26]] * zones,
                    air_temp_c=22.0, air_rh_pct=60.0, par_umol_m2_s=400.0, co2_ppm=450.0, leaf_temp_c=21.0,
                    flow_l_min=3.0, pump_current_a=2.0, valve_open=[0] * zones, pump_pct=0.0, light_pct=0.0,
                    estop=False)
    raw = encode(tel)
    t0 = time.process_time()
    for _ in range(n):
        parse_telemetry(raw, zones)
    return n / (time.process_time() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--greenhouses", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--pg-url", default=os.environ.get("GREENTWIN_TEST_PG_URL", PG_URL))
    args = ap.parse_args()
    with database(args.pg_url) as url:
        times = lease_rounds(url, args.greenhouses, args.rounds)
    print(f"{make_url(url).get_backend_name()}: lease round for {args.greenhouses} greenhouses "
          f"(two replicas): median {statistics.median(times) * 1e3:.1f} ms, max {max(times) * 1e3:.1f} ms "
          f"(load {os.getloadavg()[0]:.1f})")
    print(f"telemetry validation: {parse_rate():.0f} messages/s per core (6 zones)")


if __name__ == "__main__":
    main()

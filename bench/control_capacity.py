"""Decisions per second one replica makes and stores in PostgreSQL: the capacity plan's numbers.

Each step runs ``control_loop.run`` (the real service in this process: MQTT bridge, control
loop with the shipped ensemble, safety clipper, write-ahead journal, writer process, audit
trail) against a fresh PostgreSQL database and a Mosquitto of its own, with N greenhouses each
sending one telemetry message a second from a load-generator process (closed loop: it acks and
applies every command). Per step it prints what a replica and its neighbours pay:

* decisions/s answered, p50/p99 telemetry -> command latency, every decision stored or not;
* the service's CPU (this process and its writer) per decision, and in cores (the writer's share
  apart: it explains, seals and stores every decision, one process per replica) and the
  resident memory of both;
* PostgreSQL rows written per decision and per second (every table, counted after the run), and
  the CPU of the backends serving the run's database per decision (a local server: /proc);
* the broker's own CPU per 1,000 messages (telemetry, command and ack: three publishes and
  three deliveries per decision).

The steps stop at the first N that does not keep up (a backlog grows). A real edge box sends
one message a minute, so greenhouses per replica = sustained decisions/s x 60.

    python bench/control_capacity.py                                   # 50, 150, 300; 8 s each
    python bench/control_capacity.py --greenhouses 100,200 --seconds 8 --json capacity.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, make_url, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
import control_loop  # noqa: E402  (a sibling script, not a package)

PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
REGISTRATION_TABLES = {"alembic_version", "greenhouse", "zone"}
"""Rows made before the run (migrations, registered greenhouses), not by deciding."""


@contextlib.contextmanager
def scratch_database(pg_url: str) -> Iterator[str]:
    """An empty PostgreSQL database next to ``pg_url``, dropped afterwards."""
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 3})
    name = f"gt_capacity_{uuid.uuid4().hex[:10]}"
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        yield make_url(pg_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def rows_written(url: str) -> int:
    """Rows in every table except the registration's (exact counts, not statistics)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            tables = conn.execute(
                text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")).scalars().all()
            return sum(int(conn.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one())
                       for t in tables if t not in REGISTRATION_TABLES)
    finally:
        engine.dispose()


class BackendCpu(threading.Thread):
    """Samples the CPU time of every PostgreSQL backend serving one database (local server only:
    /proc), so the server's cost per decision is measured apart from everyone else's queries."""

    def __init__(self, pg_url: str, database: str) -> None:
        super().__init__(daemon=True)
        self.engine = create_engine(pg_url, connect_args={"connect_timeout": 3})
        self.database = database
        self.samples: list[tuple[float, dict[int, float]]] = []
        self.done = threading.Event()

    def run(self) -> None:
        with self.engine.connect() as conn:
            while not self.done.wait(0.5):
                pids = conn.execute(text("SELECT pid FROM pg_stat_activity WHERE datname = :d"),
                                    {"d": self.database}).scalars().all()
                conn.rollback()
                self.samples.append((time.time(), {p: control_loop.proc_cpu_s(p) for p in pids}))
        self.engine.dispose()

    def cpu_between(self, t0: float, t1: float) -> float:
        """CPU seconds the database's backends used from ``t0`` to ``t1`` (nearest samples)."""
        before = [s for t, s in self.samples if t <= t0] or self.samples[:1]
        after = [s for t, s in self.samples if t >= t1] or self.samples[-1:]
        if not before or not after:
            return float("nan")
        first, last = before[-1], after[0]
        return sum(cpu - first.get(pid, 0.0) for pid, cpu in last.items())


def step(n: int, args: argparse.Namespace, broker_pid: int, workdir: Path) -> dict[str, Any]:
    """One load level on a fresh database: the control-loop run plus the capacity figures."""
    with scratch_database(args.pg_url) as url:
        sampler = BackendCpu(args.pg_url, str(make_url(url).database))
        sampler.start()
        broker0 = control_loop.proc_cpu_s(broker_pid)
        try:
            r = control_loop.run(n, "uniform", args.seconds, args, workdir, url=url)
        finally:
            broker_s = control_loop.proc_cpu_s(broker_pid) - broker0
            sampler.done.set()
            sampler.join(10)
        rows = rows_written(url)
    pg_s = sampler.cpu_between(r["started_at"], r["started_at"] + r["wall_s"])
    decisions = r["decided"] or r["answered"]
    messages = 6 * r["answered"]  # telemetry, command, ack: each published once and delivered once
    r |= {
        "keeps_up": control_loop.keeps_up(r),
        "cpu_ms_per_decision": 1000.0 * r["service_cpu_s"] / decisions if decisions else float("nan"),
        "service_cores": r["service_cpu_s"] / r["wall_s"],
        "writer_cores": r["writer_cpu_s"] / r["wall_s"],
        "rows": rows, "rows_per_decision": rows / decisions if decisions else float("nan"),
        "rows_per_s": rows / decisions * r["rate_per_s"] if decisions else float("nan"),
        "pg_cpu_ms_per_decision": (1000.0 * pg_s / (r["rate_per_s"] * r["wall_s"]) if r["rate_per_s"]
                                   else float("nan")),
        "broker_cpu_ms_per_1000_msgs": 1e6 * broker_s / messages if messages else float("nan"),
    }
    return r


def line(r: dict[str, Any]) -> str:
    decided = r["decided"] if r["decided"] is not None else r["answered"]
    return (f"{r['greenhouses']:>4} gh: {r['rate_per_s']:6.1f} decisions/s  p50 {r['p50_ms']:6.1f} ms  "
            f"p99 {r['p99_ms']:7.1f} ms  stored {r['stored']}/{decided}  "
            f"service CPU {r['cpu_ms_per_decision']:.1f} ms/decision ({r['service_cores']:.2f} cores, writer "
            f"{r['writer_cores']:.2f}, {r['service_rss_mb']:.0f} MB)  "
            f"store lag p99 {r['store_lag_p99_ms'] or 0:.0f} ms  "
            f"PostgreSQL {r['rows_per_decision']:.1f} rows/decision, {r['rows_per_s']:.0f} rows/s, "
            f"{r['pg_cpu_ms_per_decision']:.1f} ms CPU/decision  "
            f"broker {r['broker_cpu_ms_per_1000_msgs']:.0f} ms CPU/1000 msgs  "
            f"{'keeps up' if r['keeps_up'] else 'FALLS BEHIND'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenhouses", default="50,150,300",
                        help="comma-separated load levels (messages/s), tried in turn until one falls behind")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--pg-url", default=os.environ.get("GREENTWIN_TEST_PG_URL", PG_URL),
                        help="a database on the server to test against "
                             "(scratch databases are made next to it)")
    parser.add_argument("--policy", default="shipped", help="'shipped', 'expert' or an ensemble directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    args.no_audit = False
    results = []
    with control_loop.private_broker() as (mqtt_url, broker_pid), tempfile.TemporaryDirectory() as tmp:
        args.mqtt_url = mqtt_url
        print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}; PostgreSQL "
              f"{make_url(args.pg_url).render_as_string(hide_password=True)}, private Mosquitto; "
              f"policy {args.policy}, audit on, {args.seconds:g} s per step", flush=True)
        for n in (int(c) for c in args.greenhouses.split(",") if c):
            t0 = time.perf_counter()
            r = step(n, args, broker_pid, Path(tmp))
            results.append(r)
            print(line(r) + f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
            if not r["keeps_up"]:
                break
    kept = [r for r in results if r["keeps_up"]]
    if kept:
        best = max(kept, key=lambda r: r["rate_per_s"])
        print(f"highest sustained: {best['rate_per_s']:.0f} decisions/s, p99 {best['p99_ms']:.0f} ms "
              f"= {60 * best['rate_per_s']:.0f} greenhouses at one message a minute (load average "
              f"{os.getloadavg()[0]:.1f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

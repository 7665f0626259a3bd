"""The greenhouse page's history request, timed over HTTP on SQLite and PostgreSQL.

A week of one-minute decisions for a 6-zone greenhouse (10,080 rows) is stored as the service
stores them (full telemetry, estimate, member actions and explanation documents), interleaved
with a second greenhouse's week so the rows of one are not contiguous on disk. The page's two
requests (24 h at 288 points, 7 days at 336 points, ending now) are then timed through the app,
bearer token and serialisation included, once the trend cells have taken in the stored weeks. Used by
``bench/dashboard.py``.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

ZONES = 6
DAYS = 7
PASSWORD = "bench dashboard password"
PG_URLS = ("postgresql+psycopg://postgres@127.0.0.1:5432/test",
           "postgresql+psycopg://root@127.0.0.1:5432/test")


def decision_rows(gh: str, start: datetime, minutes: int, seed: int) -> list[dict[str, Any]]:
    """``minutes`` decision rows shaped as ``ControlDecision.record()`` makes them."""
    rng = np.random.default_rng(seed)
    theta = 0.2 + 0.05 * rng.random((minutes, ZONES))
    rows = []
    for k in range(minutes):
        ts = start + timedelta(minutes=k)
        probes = (theta[k, :, None] + 0.01 * rng.standard_normal((ZONES, 3))).round(4).tolist()
        telemetry = {"ts": ts.isoformat(), "boot_id": "bench", "seq": k, "soil_vwc": probes,
                     "air_temp_c": 21.0 + float(rng.random()), "air_rh_pct": 60.0, "par_umol_m2_s": 300.0,
                     "co2_ppm": 420.0, "leaf_temp_c": 20.5, "flow_l_min": float(k % 60),
                     "pump_current_a": 1.2, "valve_open": [k % 2] * ZONES, "pump_pct": 40.0, "light_pct": 0.0,
                     "estop": False}
        estimate = {"theta": theta[k].tolist(), "std": [0.01] * ZONES, "probe_status": [["ok"] * 3] * ZONES,
                    "filled": [False] * ZONES}
        action = {"valves": [k % 2] * ZONES, "pump_pct": 40.0, "light_pct": 0.0}
        rows.append({"greenhouse_id": gh, "seq": k + 1, "ts": ts, "actor": "policy:bench", "mode": "auto",
                     "telemetry": telemetry, "estimate": estimate,
                     "member_actions": rng.random((5, ZONES + 2)).round(4).tolist(), "voted": action,
                     "clipped": action, "rules_fired": [], "confidence": 0.9,
                     "explanation": {"top": [{"feature": f"theta_{z}", "sentence": "soil moisture in zone "
                                              f"{z} is below its band", "share_pct": 30.0} for z in range(3)],
                                     "alarms": [], "low_confidence": False},
                     "cmd_id": str(uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | k)),
                     "ack_status": "applied"})
    return rows


@contextlib.contextmanager
def postgres_database() -> Iterator[str | None]:
    """A throw-away PostgreSQL database (None when no server answers)."""
    from sqlalchemy import create_engine, make_url, text

    for candidate in PG_URLS:
        admin = create_engine(candidate, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                name = f"bench_dash_{uuid.uuid4().hex[:10]}"
                conn.execute(text(f'CREATE DATABASE "{name}"'))
        except Exception:
            admin.dispose()
            continue
        try:
            yield make_url(candidate).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            admin.dispose()
        return
    yield None


def seed(url: str, end: datetime) -> None:
    """Schema, two greenhouses, a week of their minutes interleaved, one user."""
    from app.auth.users import create_user
    from app.cli import db as db_cli
    from app.core.db import make_engine, make_session_factory
    from app.models import Decision

    db_cli.upgrade(url)
    minutes = DAYS * 24 * 60
    start = end - timedelta(minutes=minutes)
    for gh in ("bench-a", "bench-b"):
        db_cli.add_greenhouse(url, gh, zones=ZONES, soil="loam")
    a, b = decision_rows("bench-a", start, minutes, 1), decision_rows("bench-b", start, minutes, 2)
    engine = make_engine(url)
    with make_session_factory(engine)() as s:
        interleaved = [row for pair in zip(a, b, strict=True) for row in pair]
        for i in range(0, len(interleaved), 2000):
            s.execute(Decision.__table__.insert(), interleaved[i:i + 2000])
        create_user(session=s, username="bench", password=PASSWORD, roles=["agronomist"])
        s.commit()
    engine.dispose()


def time_history(url: str, workdir: Path, repeats: int) -> dict[str, Any]:
    """p50/p99/max of the page's 24 h and 7 day history requests, in ms."""
    from fastapi.testclient import TestClient

    from app.core.config import Settings
    from app.main import create_app

    end = datetime.now(UTC).replace(second=0, microsecond=0)
    t0 = time.perf_counter()
    seed(url, end)
    seeded_s = time.perf_counter() - t0
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1", policy_dir=workdir / "no-policy",
                        environment="demo", secret_key="bench-dashboard-secret-" + "7" * 32)
    out: dict[str, Any] = {"seeded_s": seeded_s}
    with TestClient(create_app(settings, state_dir=workdir / f"state-{uuid.uuid4().hex[:6]}")) as client:
        r = client.post("/api/auth/login", json={"username": "bench", "password": PASSWORD})
        r.raise_for_status()
        headers = {"Authorization": f"Bearer {r.json()['access_token']}"}
        client.cookies.clear()
        t0 = time.perf_counter()
        while not client.app.state.dashboard.trends.catch_up():  # type: ignore[attr-defined]
            pass
        out["rolled_up_s"] = time.perf_counter() - t0  # both weeks, as a first start on an old database
        for label, hours, points in (("24h", 24, 288), ("7d", DAYS * 24, 336)):
            query = {"hours": hours, "points": points}  # as the page asks: up to now
            first = client.get("/api/greenhouses/bench-a/history", params=query, headers=headers)
            first.raise_for_status()
            samples = first.json()["samples"]
            times = []
            for _ in range(repeats):
                t = time.perf_counter()
                client.get("/api/greenhouses/bench-a/history", params=query,
                           headers=headers).raise_for_status()
                times.append((time.perf_counter() - t) * 1000.0)
            out[label] = {"p50_ms": float(np.percentile(times, 50)),
                          "p99_ms": float(np.percentile(times, 99)),
                          "max_ms": max(times), "samples": samples}
    return out


def latest_ts() -> Any:
    """SQL: the newest decision time of the benchmark's greenhouse."""
    from sqlalchemy import func, select

    from app.models import Decision

    return select(func.max(Decision.ts)).where(Decision.greenhouse_id == "bench-a")

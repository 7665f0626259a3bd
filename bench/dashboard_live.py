"""Open dashboards against the control loop: the loop's latency with and without 50 live streams.

The service runs as deployed: ``create_app`` served by uvicorn, so the runtime, its control loop
and the server-sent event streams share one event loop. The edge boxes are the load generator of
``bench/control_loop.py`` (a process of its own); the dashboards are 50 streaming HTTP clients in
another process, most on a greenhouse page (``/api/stream?gh=``), some on the overview. Phases
alternate without and with the dashboards on the same service, so the two are measured side by
side under the same load of the machine. Used by ``bench/dashboard.py``.
"""

from __future__ import annotations

import http.client
import multiprocessing as mp
import socket
import statistics
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import control_loop as cl
import numpy as np

OVERVIEW_EVERY = 10
"""One dashboard in ten shows the overview, the others a greenhouse page."""


def watch(port: int, token: str, targets: list[str | None], stop: Any, conn: Any) -> None:
    """Child process: one thread per open dashboard, each reading its event stream until told to stop."""
    counts = [0] * len(targets)
    connected = threading.Barrier(len(targets) + 1)

    def one(i: int, gh: str | None) -> None:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        c.request("GET", "/api/stream" + (f"?gh={gh}" if gh else ""),
                  headers={"Authorization": f"Bearer {token}"})
        r = c.getresponse()
        connected.wait()
        while not stop.is_set():
            line = r.readline()
            if not line:
                break
            if line.startswith(b"event: "):
                counts[i] += 1
        c.close()

    threads = [threading.Thread(target=one, args=(i, gh), daemon=True) for i, gh in enumerate(targets)]
    for t in threads:
        t.start()
    connected.wait()
    conn.send("connected")
    stop.wait()
    for t in threads:
        t.join(10)
    conn.send(counts)


def add_phase_arguments(parser: Any, *, rounds: int, rounds_help: str) -> None:
    """The load and phase options every side-by-side benchmark of the control loop takes."""
    parser.add_argument("--greenhouses", type=int, default=50, help="greenhouses the control loop runs")
    parser.add_argument("--seconds", type=float, default=10.0, help="per phase")
    parser.add_argument("--rounds", type=int, default=rounds, help=rounds_help)
    parser.add_argument("--mqtt-url", default="mqtt://127.0.0.1:1883")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Service:
    """The app with its runtime on uvicorn in a thread of this process, on a fresh SQLite database."""

    def __init__(self, workdir: Path, n: int, mqtt_url: str, **settings: Any) -> None:
        import uvicorn

        from app.auth.users import create_user
        from app.cli import db as db_cli
        from app.core.config import Settings
        from app.core.db import make_engine, make_session_factory
        from app.main import create_app

        url = f"sqlite:///{workdir / 'live.sqlite3'}"
        db_cli.upgrade(url)
        self.prefix = "d" + uuid.uuid4().hex[:6]
        self.greenhouses = [f"{self.prefix}-{i:04d}" for i in range(n)]
        cl._register(url, self.greenhouses)
        engine = make_engine(url)
        with make_session_factory(engine)() as s:
            create_user(session=s, username="bench", password="bench live password", roles=["operator"])
        engine.dispose()
        settings = Settings(database_url=url, mqtt_url=mqtt_url, policy_dir=cl.SHIPPED, max_age_s=3600.0,
                            environment="demo", secret_key="bench-live-secret-" + "3" * 32, **settings)
        self.app = create_app(settings, state_dir=workdir / "state")
        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(self.app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, name="uvicorn", daemon=True)

    def __enter__(self) -> Service:
        self.thread.start()
        deadline = time.monotonic() + 180
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.1)
        assert self.server.started, "the service did not start"
        runtime = self.app.state.runtime
        assert runtime.bridge is not None and runtime.bridge.wait_ready(30), \
            "service did not connect to the broker"
        writer = getattr(runtime, "writer", None)
        if hasattr(writer, "wait_ready"):
            assert writer.wait_ready(120), "writer process did not start"
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(120)

    def loop_cpu_s(self) -> float:
        """CPU seconds the service's event loop thread has used (control loop, streams, HTTP): unlike
        latency, barely moved by other work on a busy host."""
        import asyncio

        async def probe() -> float:
            return time.thread_time()

        loop = self.app.state.runtime._loop
        return float(asyncio.run_coroutine_threadsafe(probe(), loop).result(30))

    def token(self) -> str:
        import json

        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        c.request("POST", "/api/auth/login",
                  body=json.dumps({"username": "bench", "password": "bench live password"}),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        assert r.status == 200, r.read()
        return str(json.loads(r.read())["access_token"])


def phase(service: Service, dashboards: int, seconds: float, mqtt_url: str, seed: int,
          tag: str) -> dict[str, Any]:
    """One run of the load generator, with ``dashboards`` streams open throughout (0: none)."""
    ctx = mp.get_context("spawn")
    watcher = None
    if dashboards:
        targets = [None if i % OVERVIEW_EVERY == 0 else service.greenhouses[i % len(service.greenhouses)]
                   for i in range(dashboards)]
        stop = ctx.Event()
        mine, theirs = ctx.Pipe()
        watcher = ctx.Process(target=watch, args=(service.port, service.token(), targets, stop, theirs),
                              daemon=True)
        watcher.start()
        assert mine.poll(120) and mine.recv() == "connected", "the dashboards did not connect"
    cfg = {"n": len(service.greenhouses), "mode": "uniform", "seconds": seconds,
           "greenhouses": service.greenhouses, "prefix": f"{service.prefix}{tag}", "seed": seed,
           "mqtt_url": mqtt_url, "grace_s": 5.0}
    parent, child = ctx.Pipe()
    gen = ctx.Process(target=cl.generate, args=(cfg, child), daemon=True)
    gen.start()
    assert parent.poll(120) and parent.recv() == "ready", "load generator did not start"
    cpu0, wall0 = service.loop_cpu_s(), time.perf_counter()
    parent.send(time.time() + 0.5)
    assert parent.poll(seconds + 120), "load generator did not finish"
    result = parent.recv()
    loop_cpu_ms_per_s = (service.loop_cpu_s() - cpu0) / (time.perf_counter() - wall0) * 1000.0
    gen.join(10)
    events: list[int] = []
    if watcher is not None:
        stop.set()
        assert mine.poll(60), "the dashboards did not report"
        events = mine.recv()
        watcher.join(10)
    lat = np.array(result["latencies"]) * 1000.0
    return {"dashboards": dashboards, "answered": int(len(lat)), "messages": result["messages"],
            "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
            "events_min": min(events) if events else None, "events_total": sum(events),
            "loop_cpu_ms_per_s": loop_cpu_ms_per_s, "latencies_ms": lat.tolist()}


def pooled_p99_ratio(without: list[np.ndarray], with_: list[np.ndarray], seed: int,
                     resamples: int = 2000) -> tuple[float, float, float]:
    """p99 with / p99 without over every decision of every round, and its 95 % interval from a
    bootstrap over rounds (each round's two phases resampled together, since they ran back to back).

    One phase's p99 rests on its few slowest decisions, so per-phase p99s swing with whatever else
    the machine does in those seconds; pooling the rounds puts hundreds of decisions behind each tail.
    """
    ratio = float(np.percentile(np.concatenate(with_), 99) / np.percentile(np.concatenate(without), 99))
    gen = np.random.default_rng(seed)
    k = len(without)
    draws = []
    for _ in range(resamples):
        pick = gen.integers(0, k, k)
        draws.append(np.percentile(np.concatenate([with_[i] for i in pick]), 99)
                     / np.percentile(np.concatenate([without[i] for i in pick]), 99))
    lo, hi = np.percentile(draws, [2.5, 97.5])
    return ratio, float(lo), float(hi)


def side_by_side(workdir: Path, *, greenhouses: int, dashboards: int, seconds: float, rounds: int,
                 mqtt_url: str, seed: int) -> dict[str, Any]:
    """Alternating phases without and with the dashboards: the p99 ratio of the per-phase medians, and
    of the pooled decisions with its bootstrap interval (:func:`pooled_p99_ratio`)."""
    runs: list[dict[str, Any]] = []
    with Service(workdir, greenhouses, mqtt_url) as service:
        for k in range(rounds):
            for d in (0, dashboards):
                r = phase(service, d, seconds, mqtt_url, seed + k, f"r{k}d{d}")
                runs.append(r)
                print(f"    round {k + 1}, {d:>3} dashboards: p50 {r['p50_ms']:6.1f} ms  "
                      f"p99 {r['p99_ms']:6.1f} ms"
                      f"  loop CPU {r['loop_cpu_ms_per_s']:5.0f} ms/s"
                      f"  answered {r['answered']}/{r['messages']}"
                      + ("" if not d else f"  events per dashboard >= {r['events_min']}"), flush=True)
    without = [r["p99_ms"] for r in runs if r["dashboards"] == 0]
    with_ = [r["p99_ms"] for r in runs if r["dashboards"]]
    base, live = statistics.median(without), statistics.median(with_)
    pairs = [b / a for a, b in zip(without, with_, strict=True)]  # each round's phases ran back to back
    pooled, lo, hi = pooled_p99_ratio([np.array(r.pop("latencies_ms")) for r in runs if r["dashboards"] == 0],
                                      [np.array(r.pop("latencies_ms")) for r in runs if r["dashboards"]],
                                      seed)
    return {"runs": runs, "p99_without_ms": base, "p99_with_ms": live, "ratio": live / base,
            "pooled_ratio": pooled, "pooled_ratio_ci": [lo, hi],
            "p99_without_range_ms": [min(without), max(without)],
            "p99_with_range_ms": [min(with_), max(with_)],
            "round_ratios": pairs, "round_ratio_median": statistics.median(pairs),
            "loop_cpu_without_ms_per_s": statistics.median(r["loop_cpu_ms_per_s"] for r in runs
                                                           if not r["dashboards"]),
            "loop_cpu_with_ms_per_s": statistics.median(r["loop_cpu_ms_per_s"] for r in runs
                                                        if r["dashboards"])}

"""Control-loop latency against a real MQTT broker: telemetry in -> command out, decisions persisted.

N greenhouses each publish one telemetry message per second (built from batched twin readings)
for D seconds; a second client receives the commands. Reports p50 / p99 latency, the achieved
rate and whether a backlog grew, then the same for a baseline: one greenhouse alone (no load).

    python bench/control_loop.py [--greenhouses 200] [--seconds 20] [--mqtt-url mqtt://127.0.0.1:1883]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import threading
import time
import uuid
from collections import defaultdict, deque
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import paho.mqtt.client as mqtt

from app import db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.mqtt.bridge import parse_mqtt_url
from app.mqtt.topics import Telemetry, encode, telemetry_topic
from app.runtime import Runtime
from twin import GreenhouseTwin


def _telemetry_batch(twin: GreenhouseTwin, info: dict | None, k: int, boot: str, t0: datetime) -> list[Telemetry]:
    b = twin.num_instances
    if info is None:
        soil = np.repeat(twin.state.theta[:, :, None], 2, axis=2)
        r = None
    else:
        r = info["readings"]
        soil = r["soil_vwc"]
    out = []
    for i in range(b):
        def num(key: str, default: float, i: int = i) -> float | None:
            if r is None:
                return default
            v = float(r[key][i])
            return None if np.isnan(v) else v
        out.append(Telemetry(
            ts=t0 + timedelta(seconds=k), boot_id=boot, seq=k,
            soil_vwc=[[None if np.isnan(v) else float(v) for v in zone] for zone in soil[i]],
            air_temp_c=num("air_temp_c", 20.0), air_rh_pct=num("air_rh_pct", 70.0),
            par_umol_m2_s=num("par_umol_m2_s", 0.0), co2_ppm=num("co2_ppm", 420.0),
            leaf_temp_c=num("leaf_temp_c", 20.0), flow_l_min=0.0 if r is None else float(r["flow_l_min"][i]),
            pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0, light_pct=0.0, estop=False))
    return out


def run(n: int, seconds: float, mqtt_url: str, workdir: Path) -> dict[str, float]:
    url = f"sqlite:///{workdir / f'bench-{n}.sqlite3'}"
    db_cli.upgrade(url)
    prefix = "b" + uuid.uuid4().hex[:6]
    ghs = [f"{prefix}-{i:03d}" for i in range(n)]
    for gh in ghs:
        db_cli.add_greenhouse(url, gh, zones=6)
    settings = Settings(database_url=url, mqtt_url=mqtt_url, policy_dir=workdir / "none", max_age_s=3600.0)
    sessions = make_session_factory(make_engine(url))
    runtime = Runtime(settings, sessions, state_dir=workdir / f"state-{n}")

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    asyncio.run_coroutine_threadsafe(runtime.start(), loop).result(30)
    assert runtime.bridge is not None and runtime.bridge.wait_ready(15)

    sent: dict[str, deque[float]] = defaultdict(deque)
    latencies: list[float] = []
    lock = threading.Lock()
    target = parse_mqtt_url(mqtt_url)
    sub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{prefix}-sub")

    def on_command(_c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        now = time.perf_counter()
        gh = msg.topic.split("/")[1]
        with lock:
            if sent[gh]:
                latencies.append(now - sent[gh].popleft())

    sub.on_message = on_command
    sub.connect(target.host, target.port)
    sub.subscribe("greentwin/+/command", qos=1)
    sub.loop_start()
    pub = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{prefix}-pub")
    pub.connect(target.host, target.port)
    pub.loop_start()
    time.sleep(1.0)

    twin = GreenhouseTwin(n, seed=0, dt_s=60.0)
    twin.reset()
    t0 = datetime.now(UTC)
    info = None
    start = time.perf_counter()
    k = 0
    backlog = []
    while time.perf_counter() - start < seconds:
        tick = time.perf_counter()
        batch = _telemetry_batch(twin, info, k, prefix, t0)
        for gh, tel in zip(ghs, batch, strict=True):
            with lock:
                sent[gh].append(time.perf_counter())
            pub.publish(telemetry_topic(gh), encode(tel), qos=1)
        _, _, _, _, info = twin.step(np.zeros((n, 8), np.float32))
        k += 1
        with lock:
            backlog.append(sum(len(q) for q in sent.values()))
        time.sleep(max(0.0, 1.0 - (time.perf_counter() - tick)))
    time.sleep(2.0)
    elapsed = time.perf_counter() - start
    sub.loop_stop()
    pub.loop_stop()
    asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    lat = np.array(latencies) * 1000.0
    half = len(backlog) // 2
    return {"greenhouses": n, "messages": n * k, "commands": len(lat), "rate_per_s": len(lat) / elapsed,
            "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
            "backlog_first_half": float(np.mean(backlog[:half])) if half else 0.0,
            "backlog_second_half": float(np.mean(backlog[half:])) if half else 0.0,
            "unanswered": int(sum(len(q) for q in sent.values()))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenhouses", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--mqtt-url", default="mqtt://127.0.0.1:1883")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        baseline = run(1, min(args.seconds, 10.0), args.mqtt_url, Path(tmp))
        loaded = run(args.greenhouses, args.seconds, args.mqtt_url, Path(tmp))
    for name, res in (("baseline (1 greenhouse)", baseline), (f"{args.greenhouses} greenhouses", loaded)):
        print(f"{name:>24}: {res['commands']:>6} commands, {res['rate_per_s']:8.1f}/s, "
              f"p50 {res['p50_ms']:7.1f} ms, p99 {res['p99_ms']:7.1f} ms, backlog {res['backlog_first_half']:.0f}"
              f" -> {res['backlog_second_half']:.0f}, unanswered {res['unanswered']}")
    print(f"p50 ratio loaded/baseline: {loaded['p50_ms'] / baseline['p50_ms']:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"baseline": baseline, "loaded": loaded}, indent=2))


if __name__ == "__main__":
    main()

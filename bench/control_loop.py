"""Control-loop latency against a real MQTT broker: telemetry in -> command out, decisions persisted.

The service (``app.runtime.Runtime`` with the shipped ensemble, the audit trail and an SQLite
database) runs in this process; the edge boxes are one load-generator process, so its work does
not compete for the service's interpreter. The generator steps a batched twin with the commands
it received (closed loop), sends each greenhouse's telemetry once per second, acknowledges every
command and times telemetry-out -> command-in per message. Two send patterns:

* ``uniform``: greenhouse i sends at offset i/N within each second (real boxes are not in step);
* ``burst``: every greenhouse at the top of each second (the worst case).

Each run reports p50/p99 latency, the achieved command rate, the backlogs (telemetry in flight,
waiting in the service, decisions not yet stored; first half -> second half of the run), whether
every decision reached the database, and how long storing took. A ramp raises the number of
greenhouses (= messages per second) until a backlog grows, and reports the highest rate within
the latency targets (p50 <= 20 ms, p99 <= 50 ms) and the highest rate kept up with at all. The
1-greenhouse run is the in-run baseline the others' ratios refer to.

    python bench/control_loop.py                       # 1, 50, 200 uniform and burst, ramp 200..800
    python bench/control_loop.py --greenhouses 1,200 --mode uniform --ramp none --seconds 10
    python bench/control_loop.py --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

P99_TARGET_MS = 50.0
P50_TARGET_MS = 20.0
SHIPPED = Path(__file__).resolve().parents[1] / "policy" / "shipped"


# ---- the edge boxes (child process) ----------------------------------------------------------------


def _clip(v: float, lo: float, hi: float) -> float | None:
    return None if not np.isfinite(v) else float(min(max(v, lo), hi))


def _telemetry(r: dict[str, np.ndarray], i: int, seq: int, boot: str, action: np.ndarray, zones: int
               ) -> tuple[bytes, str]:
    """One contract payload (and its ts) from the twin's readings and the last applied command."""
    soil = np.clip(np.asarray(r["soil_vwc"][i], dtype=np.float64), 0.0, 1.0)
    ts = datetime.now(UTC).isoformat()
    payload = {
        "ts": ts, "boot_id": boot, "seq": seq,
        "soil_vwc": [[None if np.isnan(v) else float(v) for v in row] for row in soil.tolist()],
        "air_temp_c": _clip(float(r["air_temp_c"][i]), -40.0, 70.0),
        "air_rh_pct": _clip(float(r["air_rh_pct"][i]), 0.0, 100.0),
        "par_umol_m2_s": _clip(float(r["par_umol_m2_s"][i]), 0.0, 3000.0),
        "co2_ppm": _clip(float(r["co2_ppm"][i]), 0.0, 10000.0),
        "leaf_temp_c": _clip(float(r["leaf_temp_c"][i]), -40.0, 70.0),
        "flow_l_min": _clip(float(r["flow_l_min"][i]), 0.0, 1000.0) or 0.0,
        "pump_current_a": _clip(float(r["pump_current_frac"][i]) * 4.0, 0.0, 100.0) or 0.0,
        "valve_open": [int(v >= 0.5) for v in action[:zones]],
        "pump_pct": float(action[zones]), "light_pct": float(action[zones + 1]), "estop": False}
    return json.dumps(payload).encode(), ts


def _key(gh: str, ts: str) -> tuple[str, int]:
    return gh, round(datetime.fromisoformat(ts).timestamp() * 1e6)


def generate(cfg: dict[str, Any], conn: Any) -> None:
    """Child process: publish telemetry on schedule, ack commands, time the round trips."""
    import paho.mqtt.client as mqtt

    from twin import GreenhouseTwin
    from wire.connection import no_delay, parse_mqtt_url

    n, zones, ghs, mode = cfg["n"], 6, cfg["greenhouses"], cfg["mode"]
    index = {gh: i for i, gh in enumerate(ghs)}
    twin = GreenhouseTwin(n, seed=cfg["seed"], dt_s=60.0)
    twin.reset()
    actions = np.zeros((n, zones + 2), dtype=np.float32)
    lock = threading.Lock()
    sent: dict[tuple[str, int], float] = {}
    latencies: list[float] = []
    replies = {"commands": 0, "unmatched": 0}
    target = parse_mqtt_url(cfg["mqtt_url"])
    client = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=f"{cfg['prefix']}-edge")
    client.on_socket_open = no_delay  # as the service's clients: an edge box should not wait on Nagle either

    def on_command(c: mqtt.Client, _u: object, msg: mqtt.MQTTMessage) -> None:
        now = time.perf_counter()
        gh = msg.topic.split("/")[1]
        if gh not in index:
            return  # someone else's greenhouse on a shared broker
        cmd = json.loads(msg.payload)
        with lock:
            t = sent.pop(_key(gh, cmd["ts"]), None)
            replies["commands"] += 1
            if t is None:
                replies["unmatched"] += 1  # a watchdog, e-stop or re-sent command
            else:
                latencies.append(now - t)
            actions[index[gh]] = ([0.0] * (zones + 2) if cmd["mode"] == "estop"
                                  else [*cmd["valves"], cmd["pump_pct"], cmd["light_pct"]])
        ack = {"cmd_id": cmd["cmd_id"], "ts": datetime.now(UTC).isoformat(), "status": "applied"}
        c.publish(f"greentwin/{gh}/ack", json.dumps(ack).encode(), qos=1)

    client.on_message = on_command
    client.connect(target.host, target.port)
    client.subscribe("greentwin/+/command", qos=1)
    client.loop_start()
    time.sleep(0.5)
    conn.send("ready")
    start = conn.recv()  # wall-clock start time shared with the parent (perf_counter is per process)
    time.sleep(max(0.0, start - time.time()))
    t0 = time.perf_counter()
    offsets = [(i / n if mode == "uniform" else 0.0) for i in range(n)]
    samples: list[tuple[float, int]] = []
    readings: dict[str, np.ndarray] = {}
    for k in range(int(cfg["seconds"])):
        with lock:
            applied = actions.copy()
        _, _, _, _, info = twin.step(applied)
        readings = {key: np.asarray(v) for key, v in info["readings"].items()}
        for i, gh in enumerate(ghs):
            due = t0 + k + offsets[i]
            delay = due - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            payload, ts = _telemetry(readings, i, k, cfg["prefix"], applied[i], zones)
            with lock:
                sent[_key(gh, ts)] = time.perf_counter()
            client.publish(f"greentwin/{gh}/telemetry", payload, qos=1)
            if i % max(1, n // 4) == 0:
                with lock:
                    samples.append((time.perf_counter() - t0, len(sent)))
    sending_s = time.perf_counter() - t0
    deadline = time.perf_counter() + cfg["grace_s"]
    while time.perf_counter() < deadline:
        with lock:
            if not sent:
                break
        time.sleep(0.05)
    client.loop_stop()
    client.disconnect()
    with lock:
        conn.send({"latencies": latencies, "samples": samples, "sending_s": sending_s,
                   "messages": n * int(cfg["seconds"]), "unanswered": len(sent), **replies})


# ---- the service (this process) ----------------------------------------------------------------------


def _register(url: str, ghs: list[str]) -> None:
    """Greenhouses as ``greentwin greenhouse add`` registers them, in one transaction."""
    from app.core.db import make_engine, make_session_factory
    from app.models import Greenhouse, Zone
    from app.services.greenhouses import DEFAULT_DAILY_WATER_CAP_L, SOIL_DEFAULTS
    from twin.config import DEFAULT_ZONES

    d = SOIL_DEFAULTS["loam"]
    engine = make_engine(url)
    with make_session_factory(engine).begin() as s:
        for gh in ghs:
            row = Greenhouse(id=gh, name=gh, zones=DEFAULT_ZONES)
            row.zone_rows = [Zone(index=i, soil_type="loam", target_low_vwc=d.target_low_vwc,
                                  target_high_vwc=d.target_high_vwc, saturation_vwc=d.saturation_vwc,
                                  daily_water_cap_l=DEFAULT_DAILY_WATER_CAP_L) for i in range(DEFAULT_ZONES)]
            s.add(row)
    engine.dispose()


def _half_means(values: list[float]) -> tuple[float, float]:
    half = len(values) // 2
    if half == 0:
        return (values[0], values[0]) if values else (0.0, 0.0)
    return float(np.mean(values[:half])), float(np.mean(values[half:]))


def proc_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) a live process has used, from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid: int) -> float:
    """Resident memory of a live process in MB, from /proc (Linux)."""
    try:
        for row in Path(f"/proc/{pid}/status").read_text().splitlines():
            if row.startswith("VmRSS:"):
                return int(row.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def _cpu_s(exclude: set[int]) -> tuple[float, float]:
    """CPU seconds used so far by this process (the service's loop, bridge and API) and by its
    other children (the writer), not counting the load generator: what a replica pays."""
    children = sum(proc_cpu_s(p.pid) for p in mp.active_children()
                   if p.pid is not None and p.pid not in exclude)
    return time.process_time(), children


def run(n: int, mode: str, seconds: float, args: argparse.Namespace, workdir: Path,
        url: str | None = None) -> dict[str, Any]:
    """One scenario: a fresh database and service, ``n`` greenhouses for ``seconds``.

    ``url`` is an empty database to migrate and use (PostgreSQL); by default a new SQLite file.
    """
    from sqlalchemy import func, select

    from app.audit_sink import AuditSink
    from app.cli import db as db_cli
    from app.core.config import Settings
    from app.core.db import make_engine, make_session_factory
    from app.models import Decision
    from app.runtime import Runtime

    folder = workdir / f"{mode}-{n}-{uuid.uuid4().hex[:6]}"
    folder.mkdir()
    url = url or f"sqlite:///{folder / 'bench.sqlite3'}"
    db_cli.upgrade(url)
    prefix = "b" + uuid.uuid4().hex[:6]
    ghs = [f"{prefix}-{i:04d}" for i in range(n)]
    _register(url, ghs)
    policy = {"shipped": SHIPPED, "expert": folder / "no-policy"}.get(args.policy, Path(args.policy))
    settings = Settings(database_url=url, mqtt_url=args.mqtt_url, policy_dir=policy, max_age_s=3600.0)
    engine = make_engine(url)
    audit = None
    if not args.no_audit:
        from audit import Keyring, Signer
        from audit.store import AuditStore

        audit = AuditSink(AuditStore(engine, Keyring.generate(), Signer.generate()))
    runtime = Runtime(settings, make_session_factory(engine), state_dir=folder / "state", audit=audit)

    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="service-loop", daemon=True).start()
    asyncio.run_coroutine_threadsafe(runtime.start(), loop).result(120)
    assert runtime.bridge is not None and runtime.bridge.wait_ready(15), \
        "service did not connect to the broker"
    writer = getattr(runtime, "writer", None)
    if hasattr(writer, "wait_ready"):  # the writer process loads the ensemble; the journal would buffer
        assert writer.wait_ready(120), "writer process did not start"

    cfg = {"n": n, "mode": mode, "seconds": seconds, "greenhouses": ghs, "prefix": prefix, "seed": args.seed,
           "mqtt_url": args.mqtt_url, "grace_s": 5.0}
    parent, child = mp.get_context("spawn").Pipe()
    proc = mp.get_context("spawn").Process(target=generate, args=(cfg, child), daemon=True)
    proc.start()
    assert parent.poll(120) and parent.recv() == "ready", "load generator did not start"
    start = time.time() + 0.5
    parent.send(start)
    cpu0 = _cpu_s({proc.pid})
    service: list[tuple[float, int, int]] = []  # (t, waiting telemetry, records not yet stored)
    while not parent.poll(0.25):
        waiting = getattr(runtime, "waiting", 0)
        writer = getattr(runtime, "writer", None)
        service.append((time.time() - start, waiting, writer.backlog if writer is not None else 0))
    gen = parent.recv()
    cpu1, wall_s = _cpu_s({proc.pid}), time.time() - start
    rss_mb = sum(proc_rss_mb(p) for p in [os.getpid(), *(c.pid for c in mp.active_children())]
                 if p is not None and p != proc.pid)
    proc.join(10)
    decided = getattr(runtime, "decided", None)
    batches = getattr(runtime, "batches", None)
    lag = list(getattr(getattr(runtime, "writer", None), "lag_s", []))
    asyncio.run_coroutine_threadsafe(runtime.stop(), loop).result(300)
    loop.call_soon_threadsafe(loop.stop)
    with make_session_factory(engine)() as s:
        stored = int(s.scalar(select(func.count()).select_from(Decision)) or 0)
    engine.dispose()

    lat = np.array(gen["latencies"]) * 1000.0
    in_run = [b for t, b in gen["samples"] if t >= 1.0]  # the first second fills the pipeline
    srv = [(w, p) for t, w, p in service if 1.0 <= t <= seconds]
    return {
        "greenhouses": n, "mode": mode, "seconds": seconds, "messages": gen["messages"],
        "answered": int(len(lat)), "rate_per_s": len(lat) / gen["sending_s"] if gen["sending_s"] else 0.0,
        "p50_ms": float(np.percentile(lat, 50)) if len(lat) else float("nan"),
        "p99_ms": float(np.percentile(lat, 99)) if len(lat) else float("nan"),
        "max_ms": float(lat.max()) if len(lat) else float("nan"),
        "inflight_halves": _half_means([float(b) for b in in_run]),
        "service_waiting_halves": _half_means([float(w) for w, _ in srv]),
        "unstored_halves": _half_means([float(p) for _, p in srv]),
        "unanswered": gen["unanswered"], "unmatched_commands": gen["unmatched"],
        "stored": stored, "decided": decided,
        "mean_batch": (decided / batches) if decided and batches else None,
        "store_lag_p50_ms": float(np.percentile(lag, 50) * 1000) if lag else None,
        "store_lag_p99_ms": float(np.percentile(lag, 99) * 1000) if lag else None,
        "service_cpu_s": cpu1[0] - cpu0[0] + cpu1[1] - cpu0[1], "writer_cpu_s": cpu1[1] - cpu0[1],
        "wall_s": wall_s,
        "started_at": start, "service_rss_mb": rss_mb,
    }


def keeps_up(r: dict[str, Any]) -> bool:
    """Every message answered and no backlog growing: telemetry in flight, waiting in the service,
    or decisions not yet stored."""
    grow = max(3.0, 0.1 * r["greenhouses"])  # noise: burst samples land at varying points of the burst
    inflight = r["inflight_halves"][1] - r["inflight_halves"][0] <= grow
    waiting = r["service_waiting_halves"][1] - r["service_waiting_halves"][0] <= grow
    unstored = r["unstored_halves"][1] - r["unstored_halves"][0] <= max(grow, 0.5 * r["greenhouses"])
    return bool(r["unanswered"] == 0 and inflight and waiting and unstored)


def sustained(r: dict[str, Any]) -> bool:
    """Keeps up, with p50 and p99 within the targets."""
    return keeps_up(r) and r["p50_ms"] <= P50_TARGET_MS and r["p99_ms"] <= P99_TARGET_MS


def line(name: str, r: dict[str, Any], base: dict[str, Any] | None) -> str:
    ratio = "" if base is None else (f"  (x{r['p50_ms'] / base['p50_ms']:.1f} / "
                                     f"x{r['p99_ms'] / base['p99_ms']:.1f})")
    a, b = r["inflight_halves"]
    u1, u2 = r["unstored_halves"]
    lag = "" if r["store_lag_p99_ms"] is None else f", store lag p50/p99 {r['store_lag_p50_ms']:.0f}/" \
                                                    f"{r['store_lag_p99_ms']:.0f} ms"
    batch = "" if r["mean_batch"] is None else f", mean batch {r['mean_batch']:.1f}"
    return (f"{name:>22}: p50 {r['p50_ms']:6.1f} ms  p99 {r['p99_ms']:6.1f} ms{ratio}  "
            f"{r['rate_per_s']:6.1f} cmd/s"
            f"  in flight {a:.1f} -> {b:.1f}  unstored {u1:.0f} -> {u2:.0f}  unanswered {r['unanswered']}"
            f"  stored {r['stored']}/"
            f"{r['decided'] if r['decided'] is not None else r['answered']}{lag}{batch}"
            f"  {'on target' if sustained(r) else 'keeps up' if keeps_up(r) else 'FALLS BEHIND'}")


def spread(values: list[float]) -> str:
    return f"{min(values):.1f}" if len(values) == 1 else f"{min(values):.1f}-{max(values):.1f} " \
                                                          f"(median {statistics.median(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenhouses", default="1,50,200",
                        help="comma-separated counts (1 is the baseline)")
    parser.add_argument("--mode", choices=["uniform", "burst", "both"], default="both")
    parser.add_argument("--ramp", default="200,400,600,800",
                        help="uniform greenhouse counts tried in turn until one is not sustained; "
                             "'none' skips")
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per scenario (the machine is shared: ranges)")
    parser.add_argument("--policy", default="shipped", help="'shipped', 'expert' or an ensemble directory")
    parser.add_argument("--no-audit", action="store_true", help="run the service without its audit trail")
    parser.add_argument("--mqtt-url", default="mqtt://127.0.0.1:1883")
    parser.add_argument("--broker", choices=["given", "deployed"], default="given",
                        help="'given': the broker at --mqtt-url; "
                             "'deployed': a private Mosquitto started with "
                             "deploy/mosquitto.conf's network settings (TCP_NODELAY) on a free port")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        if args.broker == "deployed":
            args.mqtt_url = stack.enter_context(deployed_broker())
        measure(args)


@contextlib.contextmanager
def deployed_broker() -> Iterator[str]:
    """Mosquitto on a free loopback port with the deployed broker's ``set_tcp_nodelay``."""
    with private_broker() as (url, _pid):
        yield url


@contextlib.contextmanager
def private_broker() -> Iterator[tuple[str, int]]:
    """(URL, process id) of a Mosquitto of its own on a free loopback port, as deployed
    (``set_tcp_nodelay``); the pid lets a bench read the broker's own CPU time."""
    import shutil
    import socket
    import subprocess

    exe = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.TemporaryDirectory() as tmp:
        conf = Path(tmp) / "mosquitto.conf"
        conf.write_text(f"listener {port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n",
                        encoding="utf-8")
        proc = subprocess.Popen([exe, "-c", str(conf)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline:
                with socket.socket() as probe:
                    if probe.connect_ex(("127.0.0.1", port)) == 0:
                        break
                time.sleep(0.05)
            else:
                raise RuntimeError("the private mosquitto did not start")
            yield f"mqtt://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(10)


def measure(args: argparse.Namespace) -> None:
    counts = [int(c) for c in args.greenhouses.split(",") if c]
    modes = ["uniform", "burst"] if args.mode == "both" else [args.mode]
    results: dict[str, list[dict[str, Any]]] = {}
    print(f"broker {args.mqtt_url} ({args.broker}), policy {args.policy}, "
          f"audit {'off' if args.no_audit else 'on'}, "
          f"{args.seconds:g} s per run, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(args.repeat):
            base = None
            for n in counts:
                for mode in (["uniform"] if n == 1 else modes):
                    r = run(n, mode, args.seconds, args, Path(tmp))
                    results.setdefault(f"{mode}-{n}", []).append(r)
                    if n == 1:
                        base = r
                    print(line(f"{n} gh {mode} #{rep + 1}", r, None if n == 1 else base), flush=True)
            if args.ramp != "none":
                on_target = kept_up = 0
                for n in (int(c) for c in args.ramp.split(",")):
                    done = results.get(f"uniform-{n}", [])
                    if len(done) > rep:  # measured above in this repeat
                        r = done[rep]
                    else:
                        r = run(n, "uniform", args.seconds, args, Path(tmp))
                        results.setdefault(f"uniform-{n}", []).append(r)
                        print(line(f"{n} gh uniform #{rep + 1}", r, base), flush=True)
                    if not keeps_up(r):
                        break
                    kept_up = n
                    if sustained(r):
                        on_target = n
                results.setdefault("highest", []).append({"on_target": on_target, "keeps_up": kept_up})
                print(f"highest rate #{rep + 1}: {on_target} msgs/s within p50 <= {P50_TARGET_MS:g} / p99 <= "
                      f"{P99_TARGET_MS:g} ms; {kept_up} msgs/s without any backlog growing", flush=True)
    print("\nsummary (ranges over repeats)")
    for name, rs in results.items():
        if name == "highest":
            print(f"{'highest on target':>22}: {spread([float(r['on_target']) for r in rs])} msgs/s")
            print(f"{'highest keeping up':>22}: {spread([float(r['keeps_up']) for r in rs])} msgs/s")
            continue
        print(f"{name:>22}: p50 {spread([r['p50_ms'] for r in rs])} ms, "
              f"p99 {spread([r['p99_ms'] for r in rs])} ms, "
              f"{spread([r['rate_per_s'] for r in rs])} cmd/s, "
              f"on target {sum(sustained(r) for r in rs)}/{len(rs)}, "
              f"keeps up {sum(keeps_up(r) for r in rs)}/{len(rs)}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

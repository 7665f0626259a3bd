"""Dashboard speed, in one run: the greenhouse page's history, and open dashboards against the control loop.

1. History (``dashboard_history``): a week of one-minute decisions, 6 zones, on SQLite and on
   PostgreSQL (when one answers on 127.0.0.1:5432); the page's 24 h and 7 day requests timed over
   HTTP, target p99 < 100 ms; beside them the same week averaged from the decisions themselves
   (the way without trend cells), and the ratio.
2. Live (``dashboard_live``): the control loop's telemetry -> command latency with no dashboard
   and with 50 open dashboards on live updates, phases alternating on one service; target: p99
   with them within 10 % of p99 without, judged on the p99 of every decision of every round (a
   bootstrap over rounds gives its interval). Each round's pair runs back to back; the report also
   gives the per-phase medians over rounds, their spread, each round's ratio, and the CPU time of the
   service's event loop per second (the streams' cost itself, which a busy host hardly moves).

    python bench/dashboard.py                      # both parts
    python bench/dashboard.py --part live --seconds 10 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard_history as dh  # noqa: E402
import dashboard_live as dl  # noqa: E402

HISTORY_P99_MS = 100.0
LIVE_RATIO = 1.10


def raw_week_ms(url: str, repeats: int) -> float:
    """Median time to average the week from the decisions themselves (no trend cells), in ms."""
    from app.api import history as hist
    from app.api import trend_rollup as roll
    from app.core.db import make_engine, make_session_factory

    engine = make_engine(url)
    with make_session_factory(engine)() as s:
        end = roll.cell_start(roll.cell_index(roll.utc(s.scalar(dh.latest_ts()))) + 1)
        times = []
        for _ in range(repeats):
            t = time.perf_counter()
            hist.history(s, "bench-a", dh.ZONES, [(0.2, 0.3)] * dh.ZONES, end - timedelta(days=dh.DAYS), end,
                         336)
            times.append((time.perf_counter() - t) * 1000.0)
    engine.dispose()
    return sorted(times)[len(times) // 2]


def history_part(workdir: Path, repeats: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with dh.postgres_database() as pg:
        for name, url in (("sqlite", f"sqlite:///{workdir / 'history.sqlite3'}"), ("postgresql", pg)):
            if url is None:
                print(f"  {name}: no server, skipped", flush=True)
                continue
            r = dh.time_history(url, workdir, repeats)
            r["raw_7d_p50_ms"] = raw_week_ms(url, 5)
            out[name] = r
            print(f"  {name}: seeded in {r['seeded_s']:.0f} s, rolled up in {r['rolled_up_s']:.1f} s",
                  flush=True)
            for view in ("24h", "7d"):
                v = r[view]
                verdict = "on target" if v["p99_ms"] < HISTORY_P99_MS else "OVER TARGET"
                print(f"    {view:>3}: p50 {v['p50_ms']:6.1f} ms  p99 {v['p99_ms']:6.1f} ms  "
                      f"max {v['max_ms']:6.1f} ms"
                      f"  ({v['samples']} decisions; "
                      f"p99 / target {v['p99_ms'] / HISTORY_P99_MS:.2f})  {verdict}",
                      flush=True)
            print(f"     7d from the decisions themselves: p50 {r['raw_7d_p50_ms']:.0f} ms"
                  f"  (x{r['raw_7d_p50_ms'] / r['7d']['p50_ms']:.1f} the trend cells' p50)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["history", "live", "both"], default="both")
    parser.add_argument("--repeats", type=int, default=50, help="timed requests per history view")
    parser.add_argument("--dashboards", type=int, default=50)
    dl.add_phase_arguments(parser, rounds=2, rounds_help="pairs of live phases (without, with)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        if args.part in ("history", "both"):
            print("history of a greenhouse page (7 days x 1 min x 6 zones):", flush=True)
            results["history"] = history_part(Path(tmp), args.repeats)
        if args.part in ("live", "both"):
            print(f"control loop with {args.greenhouses} greenhouses, "
                  f"without and with {args.dashboards} open "
                  "dashboards:", flush=True)
            folder = Path(tmp) / "live"
            folder.mkdir()
            live = dl.side_by_side(folder, greenhouses=args.greenhouses, dashboards=args.dashboards,
                                   seconds=args.seconds, rounds=args.rounds, mqtt_url=args.mqtt_url,
                                   seed=args.seed)
            results["live"] = live
            verdict = "on target" if live["pooled_ratio"] <= LIVE_RATIO else "OVER TARGET"
            lo_a, hi_a = live["p99_without_range_ms"]
            lo_b, hi_b = live["p99_with_range_ms"]
            print(f"  p99 median without {live['p99_without_ms']:.1f} ms ({lo_a:.1f}-{hi_a:.1f}), with "
                  f"{live['p99_with_ms']:.1f} ms ({lo_b:.1f}-{hi_b:.1f}): ratio {live['ratio']:.2f}",
                  flush=True)
            lo, hi = live["pooled_ratio_ci"]
            print(f"  p99 of every decision, with / without: {live['pooled_ratio']:.2f} "
                  f"(95 % CI {lo:.2f} .. {hi:.2f},"
                  f" bootstrap over rounds; target <= {LIVE_RATIO:.2f})  {verdict}", flush=True)
            print(f"  per round (with / without, back to back): "
                  f"{', '.join(f'{r:.2f}' for r in live['round_ratios'])}"
                  f"; median {live['round_ratio_median']:.2f}", flush=True)
            print(f"  event loop CPU: {live['loop_cpu_without_ms_per_s']:.0f} ms/s without, "
                  f"{live['loop_cpu_with_ms_per_s']:.0f} ms/s with the dashboards (medians)", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, default=str))


if __name__ == "__main__":
    main()

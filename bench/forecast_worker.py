"""The forecast worker against the control loop: the loop's p99 with the worker idle and with it busy.

One service (``create_app`` on uvicorn, the shipped ensemble, as ``bench/dashboard.py``'s live part
runs it) decides for N greenhouses fed by ``bench/control_loop.py``'s load generator. Phases alternate
on the same service: the forecast worker paused, then computing forecasts back to back (its interval
is 0.5 s here, where a site runs it every few minutes: the worst case, the worker process always
busy). Target: p99 with the worker within 10 % of p99 without, judged on the p99 of every decision of
every round, with a bootstrap interval over rounds.

    python bench/forecast_worker.py                      # 50 greenhouses, 3 rounds of 10 s phases
    python bench/forecast_worker.py --greenhouses 20 --seconds 8 --rounds 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard_live as dl  # noqa: E402
import numpy as np  # noqa: E402

RATIO = 1.10


def _phase(service: dl.Service, busy: bool, args: argparse.Namespace, k: int) -> dict[str, Any]:
    worker = service.app.state.forecast
    worker.paused = not busy
    if busy:  # the worker is running when the phase starts, not on its way back from a sleep
        start = worker.computed
        deadline = time.monotonic() + 120
        while worker.computed == start and time.monotonic() < deadline:
            time.sleep(0.1)
    else:
        time.sleep(3.0)  # a forecast under way finishes before the idle phase counts
    before = worker.computed
    r = dl.phase(service, 0, args.seconds, args.mqtt_url, args.seed + k, f"r{k}{'f' if busy else 'i'}")
    r["forecasts"] = worker.computed - before
    r["worker"] = "busy" if busy else "paused"
    return r


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    dl.add_phase_arguments(parser, rounds=3, rounds_help="pairs of phases (worker paused, worker busy)")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp, dl.Service(Path(tmp), args.greenhouses, args.mqtt_url,
                                                          forecast_every_s=0.5) as service:
        for k in range(args.rounds):
            for busy in (False, True):
                r = _phase(service, busy, args, k)
                runs.append(r)
                print(f"  round {k + 1}, worker {r['worker']:>6}: p50 {r['p50_ms']:6.1f} ms  "
                      f"p99 {r['p99_ms']:6.1f} ms"
                      f"  loop CPU {r['loop_cpu_ms_per_s']:5.0f} ms/s  "
                      f"answered {r['answered']}/{r['messages']}"
                      f"  forecasts {r['forecasts']}", flush=True)
        service.app.state.forecast.paused = True
        last = next(iter(service.app.state.forecast.latest.values()), None)
    without = [np.array(r.pop("latencies_ms")) for r in runs if r["worker"] == "paused"]
    with_ = [np.array(r.pop("latencies_ms")) for r in runs if r["worker"] == "busy"]
    pooled, lo, hi = dl.pooled_p99_ratio(without, with_, args.seed)
    p99_without = float(np.percentile(np.concatenate(without), 99))
    p99_with = float(np.percentile(np.concatenate(with_), 99))
    rounds = [b["p99_ms"] / a["p99_ms"] for a, b in zip(runs[::2], runs[1::2], strict=True)]
    verdict = "on target" if pooled <= RATIO else "OVER TARGET"
    print(f"  p99 of every decision: without the worker {p99_without:.1f} ms, with it {p99_with:.1f} ms",
          flush=True)
    print(f"  ratio {pooled:.2f} (95 % CI {lo:.2f} .. {hi:.2f}, bootstrap over rounds; "
          f"target <= {RATIO:.2f})  {verdict}",
          flush=True)
    print(f"  per round: {', '.join(f'{r:.2f}' for r in rounds)}; median {statistics.median(rounds):.2f}; "
          f"one forecast (its variants x 144 steps) took {last.compute_s if last else float('nan'):.2f} s "
          f"in the worker "
          f"process; load average now {os.getloadavg()[0]:.1f}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"runs": runs, "p99_without_ms": p99_without,
                                               "p99_with_ms": p99_with, "pooled_ratio": pooled,
                                               "pooled_ratio_ci": [lo, hi],
                                               "round_ratios": rounds}, indent=2, default=str))


if __name__ == "__main__":
    main()

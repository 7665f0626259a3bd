"""Where a decision's CPU goes inside the control core: the stages' shares, for the batched loop's plan.

N greenhouses with the shipped ensemble decide in batches of N (as the intake forms them when all are
due) on synthetic telemetry, with no MQTT, journal or database around them; the run is profiled and
each stage's share of the time printed, then the functions that cost most. It measures the core only:
the service around it (bridge, intake, dispatch, journal, publish, the writer) is
``bench/control_capacity.py``'s.

    python bench/decision_core_profile.py                  # 50 greenhouses, 20 batches
    python bench/decision_core_profile.py --greenhouses 200 --batches 10 --top 30
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from control import DecisionBatch, GreenhouseController, ZoneSetup, load_proposer  # noqa: E402
from safety import SafetyLimits  # noqa: E402
from wire.topics import Telemetry  # noqa: E402

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
STAGES = {"begin": "begin", "estimate": "estimate", "observe": "observe", "propose": "propose",
          "choose, clip, record": "finish"}
"""Stage -> the :class:`control.DecisionBatch` method that runs it (in ``control/batch.py``)."""


def _telemetry(rng: np.random.Generator, k: int) -> Telemetry:
    return Telemetry(ts=T0 + timedelta(seconds=60 * k), boot_id="b1", seq=k + 1,
                     soil_vwc=[[float(0.24 + 0.01 * rng.standard_normal()) for _ in range(2)]
                               for _ in range(6)],
                     air_temp_c=22.0, air_rh_pct=70.0, par_umol_m2_s=300.0, co2_ppm=450.0, leaf_temp_c=21.0,
                     flow_l_min=0.0, pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0, light_pct=0.0,
                     estop=False)


def _stage_times(stats: pstats.Stats) -> dict[str, float]:
    """Cumulative seconds per stage, matched by the batch method's file and function name."""
    out: dict[str, float] = {}
    for (file, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        for stage, method in STAGES.items():
            if file.endswith("control/batch.py") and func == method:
                out[stage] = out.get(stage, 0.0) + ct
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--greenhouses", type=int, default=50)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--top", type=int, default=20, help="functions listed by their own time")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.greenhouses
    proposer = load_proposer(ROOT / "policy" / "shipped", 6)
    zones = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]
    ctls = [GreenhouseController(f"gh{i}", zones, proposer, SafetyLimits.default(), step_s=60.0)
            for i in range(n)]
    rng = np.random.default_rng(0)
    batches = [[_telemetry(rng, k) for _ in range(n)] for k in range(args.batches + 2)]
    for k in range(2):  # the first decisions build the estimators' and crop twins' state
        DecisionBatch([c.pending(t) for c, t in zip(ctls, batches[k], strict=True)]).run()
    profile = cProfile.Profile()
    cpu = time.process_time()
    profile.enable()
    for k in range(2, args.batches + 2):
        DecisionBatch([c.pending(t) for c, t in zip(ctls, batches[k], strict=True)]).run()
    profile.disable()
    cpu = time.process_time() - cpu
    decisions = n * args.batches
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}, torch threads 1; {n} greenhouses x "
          f"{args.batches} batches: {cpu / decisions * 1000:.2f} ms CPU per decision under the profiler")
    stats = pstats.Stats(profile)
    stages = _stage_times(stats)
    total = sum(stages.values())
    for stage in STAGES:
        seconds = stages.get(stage, 0.0)
        print(f"  {stage:<22} {seconds / decisions * 1000:6.3f} ms  {100 * seconds / total:5.1f} %")
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()

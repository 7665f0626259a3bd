"""Decisions for the same telemetry, before and after a change to the control path: a recorded replay.

A seeded session of several greenhouses runs through the control core alone (``control``: no MQTT, no
database), in micro-batches as the service's intake forms them, closed loop with a small plant that
answers each command (valves open what they were told, except one stuck valve; moisture rises with
water and falls with the day's demand; the lamps run as commanded). The session walks the paths a
refactor can break: the shipped ensemble and its vote, the expert fallback, the safety clipper's caps
and dwell limits, an e-stop pressed on the panel and one from an operator, its reset to manual and the
return to auto, a band and a lamp budget changed between decisions, a probe that reads nothing for a
while, a gap in telemetry, a site outlook with prices and a greenhouse without one.

Every decision's record (what the writer stores and seals: telemetry, estimate, members, vote, clip,
rules, command) is hashed in canonical JSON, and so is every mode event. ``--save FILE`` records the
hashes, ``--check FILE`` compares and names the first decision that differs (with the fields that
differ when ``--records`` kept the records of the recording). Bit-exact, so recordings compare only on
the same machine, library versions and torch thread count (one thread, as here).

    python bench/decision_replay.py --save bench/reference/decision_replay.json
    python bench/decision_replay.py --check bench/reference/decision_replay.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from control import DecisionBatch, GreenhouseController, ZoneSetup, load_proposer  # noqa: E402
from control.outlook import Outlook  # noqa: E402
from control.setup import GreenhouseSetup, SetupChange  # noqa: E402
from safety import SafetyLimits  # noqa: E402
from wire.topics import Telemetry  # noqa: E402

T0 = datetime(2026, 6, 1, 4, 0, tzinfo=UTC)
STEP_S = 60.0
SOILS = ("loam", "sand", "clay", "loam")


@dataclass(frozen=True)
class Script:
    """What happens when: step -> greenhouse index -> the event."""

    greenhouses: int = 4
    steps: int = 360
    stuck_valve: tuple[int, int] = (2, 1)
    """(greenhouse, zone) whose valve stays closed whatever it is told: the failure latch's path."""
    dead_probe: tuple[int, int, range] = (3, 4, range(100, 160))
    """(greenhouse, zone, steps) where both probes of a zone read nothing."""
    silent_co2: tuple[int, range] = (1, range(300, 310))
    """(greenhouse, steps) whose CO2 sensor sends nothing: the held reading's path."""
    gap: tuple[int, range] = (0, range(200, 215))
    """(greenhouse, steps) with no telemetry at all."""
    panel_estop: tuple[int, int] = (1, 40)
    operator_estop: tuple[int, int] = (2, 250)
    reset_after: int = 20
    auto_after: int = 30
    band_change: tuple[int, int] = (0, 120)
    lamp_budget: tuple[int, int] = (3, 180)
    initial_vwc: float = 0.22
    """The driest zone's moisture at the start (the others up to 3 points wetter)."""
    water_cap_l: float = 60.0
    """Zone 1's daily water cap; each later zone's is 20 L more (small caps make the clipper work early)."""


def _ids(gh: int) -> Callable[[], uuid.UUID]:
    n = 0

    def make() -> uuid.UUID:
        nonlocal n
        n += 1
        return uuid.UUID(int=(gh + 1) * 10**9 + n)

    return make


def _zones(i: int, cap_l: float) -> list[ZoneSetup]:
    return [ZoneSetup(SOILS[(i + z) % len(SOILS)], 0.20 + 0.005 * (z % 3), 0.27 + 0.005 * (z % 2), 0.45,
                      cap_l + 20.0 * z, name=f"Z{z + 1}") for z in range(6)]


def _outlook(k: int) -> Outlook:
    """A site outlook issued each hour: a warm day, a price curve with an evening peak."""
    hour = T0 + timedelta(hours=k // 60)
    h = np.arange(48)
    solar = np.maximum(0.0, 700.0 * np.sin((h + hour.hour - 6) / 24.0 * 2 * np.pi))
    price = 60.0 + 40.0 * np.cos((np.arange(24) + hour.hour - 19) / 24.0 * 2 * np.pi)
    return Outlook(hour, 18.0 + 6.0 * np.sin((h[:24] + hour.hour - 9) / 24.0 * 2 * np.pi), solar[1:],
                   price, np.ones(24), weather_source="script", weather_age_s=60.0, price_source="script",
                   price_age_s=60.0)


class Plant:
    """A small closed-loop plant per greenhouse: enough to answer commands, not a twin."""

    def __init__(self, greenhouses: int, script: Script) -> None:
        rng = np.random.default_rng(20261207)
        self.script = script
        self.theta = script.initial_vwc + 0.03 * rng.random((greenhouses, 6))
        self.noise = np.random.default_rng(7)
        self.valves = np.zeros((greenhouses, 6))
        self.pump = np.zeros(greenhouses)
        self.light = np.zeros(greenhouses)
        self.cmd_seq: list[int | None] = [None] * greenhouses

    def apply(self, gh: int, command: Any) -> None:
        valves = np.asarray(command.valves, dtype=np.float64)
        g, z = self.script.stuck_valve
        if gh == g:
            valves[z] = 0.0
        self.valves[gh], self.pump[gh] = valves, float(command.pump_pct)
        self.light[gh] = float(command.light_pct) if command.light_pct is not None else self.light[gh]
        self.cmd_seq[gh] = int(command.seq)

    def telemetry(self, gh: int, k: int, ts: datetime) -> Telemetry:
        hour = (ts.hour + ts.minute / 60.0) % 24
        sun = max(0.0, np.sin((hour - 6) / 24 * 2 * np.pi))
        flow = float(self.valves[gh].sum() * self.pump[gh] / 100.0 * 4.0)
        self.theta[gh] += self.valves[gh] * self.pump[gh] / 100.0 * 0.002 - 0.0001 - 0.0003 * sun
        self.theta[gh] = np.clip(self.theta[gh], 0.08, 0.45)
        probes = self.theta[gh][:, None] + 0.004 * self.noise.standard_normal((6, 2))
        soil: list[list[float | None]] = [[round(float(v), 5) for v in zone] for zone in probes]
        g, z, dead = self.script.dead_probe
        if gh == g and k in dead:
            soil[z] = [None, None]
        g, silent = self.script.silent_co2
        co2 = None if gh == g and k in silent else 430.0
        return Telemetry(ts=ts, boot_id=f"box{gh}", seq=k + 1, soil_vwc=soil,
                         air_temp_c=round(19 + 8 * sun, 3), air_rh_pct=round(75 - 20 * sun, 3),
                         par_umol_m2_s=round(900 * sun + 3 * self.light[gh], 3),
                         co2_ppm=co2, leaf_temp_c=round(18.5 + 8 * sun, 3), flow_l_min=round(flow, 4),
                         pump_current_a=round(self.pump[gh] / 100.0 * 3.0, 4),
                         valve_open=[int(v >= 0.5) for v in self.valves[gh]], pump_pct=self.pump[gh],
                         light_pct=self.light[gh], estop=False, cmd_seq=self.cmd_seq[gh])


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    if isinstance(value, np.ndarray):
        return _canonical(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if hasattr(value, "model_dump"):
        return _canonical(value.model_dump(mode="json"))
    return value


def _hash(record: Any) -> str:
    text = json.dumps(_canonical(record), sort_keys=True, separators=(",", ":"), allow_nan=True)
    return hashlib.sha256(text.encode()).hexdigest()


def _operator_events(ctls: list[GreenhouseController], script: Script, k: int, ts: datetime) -> Iterator[Any]:
    """The operators' actions due at step ``k``, as the service's API would make them between batches."""
    for gh, at in (script.panel_estop, script.operator_estop):
        if (gh, at) == script.operator_estop and k == at:
            yield ctls[gh].estop("operator:olga", "smell of burning at the pump", ts)
        if k == at + script.reset_after:
            yield ctls[gh].reset_estop("operator:olga", "inspected, all clear", ts)
        if k == at + script.auto_after:
            yield ctls[gh].set_mode("auto", "operator:olga", "back to the policy", ts)
    gh, at = script.band_change
    if k == at:
        ctl = ctls[gh]
        zones = tuple(replace(z, target_low=z.target_low + 0.01) if i == 1 else z
                      for i, z in enumerate(ctl.zones))
        setup = replace(ctl.setup, zones=zones, version=ctl.setup.version + 1)
        ctl.stage_setup(setup, SafetyLimits.default(),
                        SetupChange(setup.version, "agronomist:anna", "wetter zone 2",
                                    {"zones.1.target_low": [0.205, 0.215]}))
    gh, at = script.lamp_budget
    if k == at:
        ctl = ctls[gh]
        setup = GreenhouseSetup(ctl.setup.name, ctl.setup.zones, lamps_ours=True, lamp_hours_per_day=4.0,
                                version=ctl.setup.version + 1)
        ctl.stage_setup(setup, SafetyLimits.default(),
                        SetupChange(setup.version, "agronomist:anna", "cheaper lamps",
                                    {"lamp_hours_per_day": [None, 4.0]}))


def replay(script: Script = Script(), policy_dir: Path = ROOT / "policy" / "shipped",
           keep_records: bool = False) -> dict[str, Any]:
    """Run the scripted session; every decision's and mode event's hash, in order."""
    torch.set_num_threads(1)
    proposer = load_proposer(policy_dir, 6)
    ctls = [GreenhouseController(f"gh{i + 1}", _zones(i, script.water_cap_l), proposer,
                                 SafetyLimits.default(), step_s=STEP_S, cmd_id_factory=_ids(i),
                                 site_timezone="Europe/Amsterdam")
            for i in range(script.greenhouses)]
    plant = Plant(script.greenhouses, script)
    hashes: list[str] = []
    records: list[Any] = []

    def keep(kind: str, record: Any) -> None:
        hashes.append(_hash(record))
        if keep_records:
            records.append({"kind": kind, **_canonical(record)})

    for k in range(script.steps):
        ts = T0 + timedelta(seconds=STEP_S * k)
        for event in _operator_events(ctls, script, k, ts):
            keep("mode", event.row())
        items = []
        outlook = _outlook(k)  # one site outlook for every greenhouse, as the service's feed shares it
        for gh, ctl in enumerate(ctls):
            if gh == script.gap[0] and k in script.gap[1]:
                continue
            tel = plant.telemetry(gh, k, ts)
            if gh == script.panel_estop[0] and k == script.panel_estop[1]:
                tel = tel.model_copy(update={"estop": True})
            items.append(ctl.pending(tel, None if gh == script.greenhouses - 1 else outlook))
        # The intake's micro-batches: greenhouses in two batches, as two arrival windows would form them.
        for batch in (items[: len(items) // 2], items[len(items) // 2:]):
            for decision in DecisionBatch(batch).run():
                for event in decision.events:
                    keep("mode", event.row())
                keep("decision", {**decision.record(), "command": decision.command, "alarms": decision.alarms,
                                  "observation": decision.observation})
                plant.apply(int(decision.greenhouse_id.removeprefix("gh")) - 1, decision.command)
    digest = hashlib.sha256("".join(hashes).encode()).hexdigest()
    out: dict[str, Any] = {"digest": digest, "count": len(hashes), "hashes": hashes}
    if keep_records:
        out["records"] = records
    return out


def first_difference(recorded: dict[str, Any], now: dict[str, Any]) -> str | None:
    """Where two replays part: None when identical, else the first record that differs, in words."""
    if recorded["digest"] == now["digest"]:
        return None
    for i, (a, b) in enumerate(zip(recorded["hashes"], now["hashes"], strict=False)):
        if a != b:
            where = f"record {i} of {len(now['hashes'])}"
            if "records" in recorded and "records" in now:
                old, new = recorded["records"][i], now["records"][i]
                fields = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
                return (f"{where} ({new.get('kind')} of {new.get('greenhouse_id')} at {new.get('ts')}): "
                        f"{fields}")
            return where
    return f"the replays differ in length: {recorded['count']} records recorded, {now['count']} now"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="record this replay's hashes here")
    parser.add_argument("--check", type=Path, help="compare with a recording; exit 1 where it differs")
    parser.add_argument("--records", action="store_true",
                        help="keep whole records too (names differing fields)")
    parser.add_argument("--policy", type=Path, default=ROOT / "policy" / "shipped")
    args = parser.parse_args()
    now = replay(policy_dir=args.policy, keep_records=args.records)
    print(f"{now['count']} records (decisions and mode events), digest {now['digest']}")
    if args.save:
        args.save.write_text(json.dumps(now, separators=(",", ":")) + "\n")
        print(f"saved to {args.save}")
    if args.check:
        recorded = json.loads(args.check.read_text())
        diff = first_difference(recorded, now)
        if diff is None:
            print("identical to the recording")
        else:
            print(f"DIFFERS from the recording: {diff}")
            sys.exit(1)


if __name__ == "__main__":
    main()

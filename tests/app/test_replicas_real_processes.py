"""Two service replicas as real processes on one PostgreSQL and one Mosquitto: each greenhouse is
commanded by exactly one of them, and a SIGKILLed replica's greenhouses are taken over in time.

The plant simulator runs in the test's process and notes every command it judges, with its
fencing token and when: that record, not the services' own word, shows that no greenhouse was
ever commanded by two replicas in the same period. Leases are short here (4 s, renewed every
second: take-over within 5 s) so the test stays well under a minute.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.cli import db as db_cli
from app.core.db import make_engine
from app.models import Decision, GreenhouseLease
from app.services.greenhouses import add_greenhouse
from plantsim.sim import PlantSim
from tests.app.procs import AuditKeys, Mosquitto, Service, running, service_env, wait_until
from wire.topics import Command

pytestmark = [pytest.mark.mqtt, pytest.mark.slow, pytest.mark.postgres]

GHS = ["gh1", "gh2", "gh3", "gh4"]
TTL_S, RENEW_S = 4.0, 1.0
BOUND_S = TTL_S + RENEW_S
SLACK_S = 3.0
"""One plant step, one poll and a loaded two-core machine on top of the bound."""


class JudgingPlantSim(PlantSim):
    """The plant simulator, noting every command it judges: (monotonic time, greenhouse, command, status)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.judged: list[tuple[float, str, Command, str]] = []
        self.refused: list[tuple[str, str | None]] = []

    def _decide(self, st: Any, cmd: Command) -> tuple[Any, str | None]:
        status, reason = super()._decide(st, cmd)
        self.judged.append((time.monotonic(), st.gh, cmd, status))  # under the simulator's lock
        if status == "rejected":
            self.refused.append((st.gh, reason))
        return status, reason

    def applied(self) -> list[tuple[float, str, int]]:
        return [(t, gh, cmd.fencing_token or 0) for t, gh, cmd, status in list(self.judged)
                if status == "applied"]


@pytest.fixture
def keys(tmp_path: Path) -> AuditKeys:
    return AuditKeys.generate(tmp_path / "audit-keys")


def _held(service: Service) -> dict[str, int]:
    """Greenhouses this replica says it holds, with their tokens (one /metrics read)."""
    out: dict[str, int] = {}
    for (name, labels), value in service.metrics().items():
        gh = dict(labels).get("greenhouse")
        if name == "greentwin_lease_token" and gh is not None and value > 0:
            out[gh] = int(value)
    return out


def test_two_replicas_command_each_greenhouse_once_and_take_over_a_killed_ones_within_the_bound(
        tmp_path: Path, keys: AuditKeys, make_pg_database: Any) -> None:
    with make_pg_database("gt_replicas") as url, running(Mosquitto(tmp_path / "broker")) as broker:
        db_cli.upgrade(url)
        for gh in GHS:
            add_greenhouse(url, gh, zones=6, soil="loam")
        replicas = {}
        for rid in ("r1", "r2"):
            (tmp_path / rid).mkdir()
            env = service_env(database_url=url, mqtt_url=broker.url, keys=keys,
                              policy_dir=tmp_path / "no-policy",
                              extra={"GREENTWIN_LEASE_TTL_S": str(TTL_S),
                                     "GREENTWIN_LEASE_RENEW_S": str(RENEW_S), "GREENTWIN_REPLICA_ID": rid})
            replicas[rid] = Service(tmp_path / rid, env, name=rid)
        sim = JudgingPlantSim(broker.url, GHS, speed=300.0, dt_s=60.0, seed=2)  # one step every 200 ms
        stop = threading.Event()
        stepping = threading.Thread(target=sim.run, args=(stop,), name="plant-sim", daemon=True)
        owners: dict[tuple[str, int], set[str]] = defaultdict(set)
        both_held: list[str] = []

        def sample(alive: list[str]) -> dict[str, dict[str, int]]:
            held = {rid: _held(replicas[rid]) for rid in alive}
            for rid, leases in held.items():
                for gh, token in leases.items():
                    owners[(gh, token)].add(rid)
            seen = [gh for gh in GHS if sum(gh in leases for leases in held.values()) > 1]
            both_held.extend(seen)
            return held

        try:
            for r in replicas.values():
                r.launch()
            assert sim.start(), "plant simulator connected"
            stepping.start()
            for r in replicas.values():
                r.wait_started()

            def split() -> dict[str, dict[str, int]] | None:
                held = sample(["r1", "r2"])
                fair = (all(len(held[rid]) == 2 for rid in held)
                        and set(held["r1"]) | set(held["r2"]) == set(GHS))
                return held if fair else None

            held = wait_until(split, 30, "the greenhouses split two and two",
                              context=lambda: replicas["r1"].tail() + "\n" + replicas["r2"].tail())
            settled = time.monotonic()
            wait_until(lambda: {gh for t, gh, _ in sim.applied() if t > settled} == set(GHS), 10,
                       "every greenhouse commanded after the split")
            for _ in range(10):
                sample(["r1", "r2"])
                time.sleep(0.1)
            assert replicas["r2"].metric("greentwin_telemetry_total", outcome="ignored",
                                         reason="not_mine") > 0, \
                "telemetry reaches every replica; each decides only its own greenhouses"

            victim, survivor = replicas["r1"], replicas["r2"]
            orphans = dict(held["r1"])
            killed_at = time.monotonic()
            victim.kill()
            wait_until(lambda: len(sample(["r2"])["r2"]) == len(GHS), BOUND_S + SLACK_S,
                       "the survivor holding all", context=survivor.tail)

            def taken_over() -> dict[str, float] | None:
                firsts: dict[str, float] = {}
                for t, gh, token in sim.applied():
                    if gh in orphans and token > orphans[gh] and t > killed_at:
                        firsts.setdefault(gh, t)
                return firsts if set(firsts) == set(orphans) else None

            firsts = wait_until(taken_over, BOUND_S + SLACK_S, "commands from the new holder")
            takeover_s = max(firsts.values()) - killed_at
            print(f"\ntake-over after SIGKILL: {takeover_s:.2f} s (bound {BOUND_S:g} s)")
            time.sleep(1.0)
            stop.set()
            stepping.join(timeout=10)
            survivor.stop()
            survivor_log = survivor.output()
        finally:
            stop.set()
            sim.close()
            for r in replicas.values():
                r.stop()

        assert takeover_s <= BOUND_S + SLACK_S
        assert sim.refused == [], \
            "no replica ever commanded outside its lease: the edge's fence never had to act"
        assert both_held == [], "no moment at which two replicas both held a greenhouse"
        assert all(len(rids) == 1 for rids in owners.values()), f"one replica per token: {dict(owners)}"
        applied = sim.applied()
        for gh in GHS:
            mine = [(t, token) for t, g, token in applied if g == gh]
            tokens = [token for _, token in mine]
            assert tokens == sorted(tokens), f"{gh}: tokens only grow at the plant"
            spans = {tok: (min(t for t, k in mine if k == tok), max(t for t, k in mine if k == tok))
                     for tok in set(tokens)}
            ordered = sorted(spans.values())
            assert all(a[1] < b[0] for a, b in zip(ordered, ordered[1:], strict=False)), \
                f"{gh}: the periods of two holders never overlap: {spans}"
            after = [t for t, token in mine if t > killed_at]
            gaps = [b - a for a, b in zip(after, after[1:], strict=False)]
            assert after and max(gaps, default=0.0) <= BOUND_S + SLACK_S, f"{gh}: kept being commanded"
        for gh, token in orphans.items():
            assert max(tok for _, g, tok in applied if g == gh) > token, f"{gh}: a new tenure took over"
        assert "Traceback" not in survivor_log and "IntegrityError" not in survivor_log
        engine = make_engine(url)
        try:
            with Session(engine) as s:
                rows = {r.greenhouse_id: r.holder for r in s.scalars(select(GreenhouseLease))}
                top = {gh: s.scalar(select(Decision.seq).where(Decision.greenhouse_id == gh)
                                    .order_by(Decision.seq.desc()).limit(1)) for gh in orphans}
        finally:
            engine.dispose()
        assert rows == dict.fromkeys(GHS), "a clean stop hands every lease back"
        assert all(seq is not None and seq >= 2**32 for seq in top.values()), \
            f"decisions of a new tenure are stored in its own seq range: {top}"

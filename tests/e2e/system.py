"""The whole system for the end-to-end suite, started the way a site runs it.

* PostgreSQL: a database of its own, migrated by an owner role; the service connects as a
  restricted role (``greentwin db grant``) through a :class:`CuttableProxy`, so the database can
  vanish and come back.
* Mosquitto: the shipped config (``deploy/mosquitto.conf`` + ACL, password file), on free ports.
* ``greentwin serve`` as a child process (the threshold expert decides: no policy directory).
* One edge box per greenhouse (the plant simulator, in this process so every command it really
  applies is on its own log), each with its own broker account as the ACL requires.
* ``gh-x`` is registered but has no plant: it is the hostile edge box.

:meth:`System.check` holds the invariants every scenario ends with.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from sqlalchemy import func, make_url, select, text
from sqlalchemy.orm import Session

from app.access_seal import AccessSealer
from app.audit_coverage import check_coverage
from app.cli import db as db_cli
from app.cli.db_grant import grant
from app.core.db import make_engine
from app.deadletter import count_lines
from app.models import AlarmGroup, Decision, ModeChange
from app.services.greenhouses import add_greenhouse
from audit import open_record
from audit.store import AuditStore
from plantsim.sim import PlantSim
from tests.app.mqtt.broker_pki import TestCA
from tests.app.mqtt.test_broker_acl import deployed_config
from tests.app.pg_roles import RoleDatabase, owner_and_app_roles
from tests.app.procs import AuditKeys, CuttableProxy, Mosquitto, Service, free_port, service_env, wait_until
from tests.e2e.plant_log import PlantStep, violations
from wire.topics import Command

PLANTS = ("gh-a", "gh-b", "gh-c")
HOSTILE = "gh-x"
SERVICE_USER = "greentwin-service"
SPEED = 600.0  # one 60 s step every 100 ms per greenhouse
SKEW_S = 7 * 86400  # the simulators run ahead of the clock (SPEED x); a far-future stamp is years ahead
COMMAND_TTL_S = 10.0
"""The service's command TTL here (30 s in production): outages and restarts longer than it take
seconds, not half a minute."""
OPERATOR, ADMIN, VIEWER = "olga", "adam", "vera"
CRASH_MARKS = ("Traceback", "Exception in callback", "unexpected error", "handler failed",
               "housekeeping round failed")


class RecordingPlantSim(PlantSim):
    """The edge box, noting every command it really applies (after its own cmd_id de-duplication)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.applied: list[Command] = []
        self.received: Counter[str] = Counter()
        """Command messages handled per cmd_id, replays included."""
        self.decided_on: dict[str, set[datetime]] = {gh: set() for gh in self.greenhouses}
        """Telemetry times the service decided on (a command carries its telemetry's time)."""
        self.steps: dict[str, list[PlantStep]] = {gh: [] for gh in self.greenhouses}
        """What each plant really ran, step by step (checked against the safety limits)."""
        self._in_force: dict[str, tuple[Command, float]] = {}

    def _handle_command(self, st: Any, raw: bytes) -> tuple[Any, str | None, Any]:
        status, reason, cmd_id = super()._handle_command(st, raw)
        self.received[str(cmd_id)] += 1
        return status, reason, cmd_id

    def _decide(self, st: Any, cmd: Command) -> tuple[Any, str | None]:
        status, reason = super()._decide(st, cmd)
        self.decided_on[st.gh].add(cmd.ts)
        if status == "applied":
            self.applied.append(cmd)
            self._in_force[st.gh] = (cmd, time.time())
        return status, reason

    def _on_step(self, start: datetime, actions: np.ndarray, info: dict[str, Any]) -> None:
        wall = time.time()
        for i, gh in enumerate(self.greenhouses):
            cmd, at = self._in_force.get(gh, (None, None))
            self.steps[gh].append(PlantStep(
                start=start, wall=wall, commanded=self.state[gh].action.copy(), ran=np.array(actions[i]),
                water_l=np.array(info["water_l"][i], dtype=np.float64),
                dead_heading=bool(info["warnings"]["dead_heading"][i]),
                termination=int(info["termination_reason"][i]), in_force=cmd, applied_at=at))

    def longest_dead_head_s(self) -> float:
        """The longest run of plant steps any pump of this box dead-headed [plant seconds]."""
        longest = 0.0
        for gh in self.greenhouses:
            run = 0.0
            for s in list(self.steps[gh]):
                run = run + self.dt_s if s.dead_heading else 0.0
                longest = max(longest, run)
        return longest

    def safety_violations(self) -> list[str]:
        dt = timedelta(seconds=self.dt_s)
        return [v for gh in self.greenhouses for v in violations(
            gh, [dataclasses.replace(s, seen=s.start + dt in self.decided_on[gh])
                 for s in list(self.steps[gh])],
            self.dt_s)]


@dataclass
class Edge:
    """One running edge box and the thread that paces it."""

    sim: RecordingPlantSim
    stop: threading.Event
    thread: threading.Thread


@dataclass
class System:
    folder: Path
    roles: RoleDatabase
    keys: AuditKeys
    broker: Mosquitto
    passwords: dict[str, str]
    proxy: CuttableProxy
    env: dict[str, str]
    service: Service
    edges: dict[str, Edge] = field(default_factory=dict)
    user_passwords: dict[str, str] = field(default_factory=dict)
    restarts: int = 0
    retired: list[tuple[str, RecordingPlantSim]] = field(default_factory=list)
    """Edge boxes replaced during the run (closed): what they applied is still checked."""

    # --- parts -------------------------------------------------------------------------------

    def mqtt_url(self, user: str) -> str:
        return f"mqtt://{user}:{self.passwords[user]}@127.0.0.1:{self.broker.port}"

    def start_edge(self, gh: str, seed: int, *, speed: float = SPEED, dt_s: float = 60.0,
                   clock_offset_s: float = 0.0, start_time: datetime | None = None) -> None:
        sim = RecordingPlantSim(self.mqtt_url(gh), [gh], speed=speed, dt_s=dt_s, seed=seed,
                                clock_offset_s=clock_offset_s, start_time=start_time)
        stop = threading.Event()
        thread = threading.Thread(target=sim.run, args=(stop,), name=f"edge-{gh}", daemon=True)
        assert sim.start(), f"edge box {gh} connected"
        thread.start()
        self.edges[gh] = Edge(sim, stop, thread)

    def retire_edge(self, gh: str) -> RecordingPlantSim:
        """Stop and close ``gh``'s edge box (another takes its place); its log stays checked."""
        edge = self.edges.pop(gh)
        edge.stop.set()
        edge.thread.join(timeout=10)
        edge.sim.close()
        self.retired.append((gh, edge.sim))
        return edge.sim

    def sims(self) -> list[tuple[str, RecordingPlantSim]]:
        """Every edge box of the run, running or retired."""
        return [(gh, e.sim) for gh, e in self.edges.items()] + self.retired

    def stop_edges(self) -> None:
        for edge in self.edges.values():
            edge.stop.set()
        for edge in self.edges.values():
            edge.thread.join(timeout=10)

    def resume_edges(self) -> None:
        """Step the edge boxes again after :meth:`stop_edges` (their MQTT clients stayed connected)."""
        for gh, edge in self.edges.items():
            if not edge.thread.is_alive():
                stop = threading.Event()
                thread = threading.Thread(target=edge.sim.run, args=(stop,), name=f"edge-{gh}", daemon=True)
                thread.start()
                self.edges[gh] = Edge(edge.sim, stop, thread)

    @contextmanager
    def quiet(self) -> Iterator[None]:
        """The edge boxes hold still (no telemetry, so no new decisions) while the invariants are read:
        under load the trail is always a round or two behind the tables, by design."""
        was_running = any(e.thread.is_alive() for e in self.edges.values())
        self.stop_edges()
        previous: tuple[float, int] | None = None

        def settled() -> bool:  # the last telemetry's decision made and its command applied
            nonlocal previous
            now = (self.service.metric("greentwin_decisions_total"), self.applied())
            done, previous = now == previous, now
            return done

        wait_until(settled, 20, "the service to settle", interval=0.5)
        try:
            yield
        finally:
            if was_running:
                self.resume_edges()

    def close_edges(self) -> None:
        self.stop_edges()
        for edge in self.edges.values():
            edge.sim.close()

    def new_service(self, env: dict[str, str] | None = None) -> Service:
        """A fresh ``greentwin serve`` on the same state directory and database (a restart), with
        ``env`` in place of the system's when given."""
        self.restarts += 1
        self.service = Service(self.folder, env or self.env, name=f"serve-{self.restarts}")
        return self.service

    def token(self, user: str) -> str:
        r = self.service.http.post("/api/auth/login",
                                   json={"username": user, "password": self.user_passwords[user]})
        r.raise_for_status()
        return str(r.json()["access_token"])

    def api(self, method: str, path: str, user: str | None = None, **kwargs: Any) -> httpx.Response:
        headers = dict(kwargs.pop("headers", {}))
        if user is not None:
            headers["Authorization"] = f"Bearer {self.token(user)}"
        return self.service.http.request(method, path, headers=headers, **kwargs)

    @contextmanager
    def owner_session(self) -> Iterator[Session]:
        engine = make_engine(self.roles.owner_url)
        try:
            with Session(engine) as session:
                yield session
        finally:
            engine.dispose()

    # --- counts ------------------------------------------------------------------------------

    def decisions(self) -> dict[str, int]:
        """Decisions stored per greenhouse (the database, read directly as the owner)."""
        with self.owner_session() as s:
            rows = s.execute(select(Decision.greenhouse_id, func.count()).group_by(Decision.greenhouse_id))
            return {gh: int(n) for gh, n in rows}

    def service_decisions(self, gh: str) -> int:
        return self.service.decisions(gh)

    def applied(self) -> int:
        return sum(len(sim.applied) for _, sim in self.sims())

    def audit_records(self) -> int:
        with self.owner_session() as s:
            return int(s.scalar(text("SELECT count(*) FROM audit_record")) or 0)

    def dead_letters(self) -> int:
        return count_lines(self.service.state_dir / "dead-letter.jsonl")

    def rejected(self) -> dict[str, float]:
        return {dict(labels)["reason"]: v for (name, labels), v in self.service.metrics().items()
                if name == "greentwin_telemetry_total" and dict(labels).get("outcome") == "rejected"}

    # --- invariants --------------------------------------------------------------------------

    def audit_complete(self) -> list[str]:
        """Problems with the trail: a chain that fails, a stored record without its sealed one, a
        record sealed twice, or a command an edge box applied that is not stored and sealed."""
        keyring, signer = self.keys.open()
        engine = make_engine(self.roles.owner_url)
        try:
            store = AuditStore(engine, keyring, signer)
            bad = [f"{r.greenhouse_id}: {r.reason}" for r in store.verify() if not r.ok]
            bad += [c.describe() for c in check_coverage(engine, store) if not c.ok]
            with Session(engine) as s:
                seq_of = {(gh, str(c)): seq for gh, c, seq in s.execute(
                    select(Decision.greenhouse_id, Decision.cmd_id, Decision.seq)
                    .where(Decision.cmd_id.is_not(None)))}
            sealed_of: dict[str, Counter[str]] = {}
            for gh, sim in self.sims():
                if gh not in sealed_of:
                    sealed_of[gh] = Counter(str(open_record(keyring, r).payload.get("seq"))
                                            for r in store.iter_records(gh) if r.kind == "decision")
                sealed = sealed_of[gh]
                twice = [seq for seq, n in sealed.items() if n > 1]
                if twice:
                    bad.append(f"{gh}: decisions sealed more than once: {twice[:10]}")
                # An e-stop's immediate all-off command goes out before any decision row exists.
                unrecorded = [c for c in list(sim.applied) if (gh, str(c.cmd_id)) not in seq_of
                              and c.mode != "estop"]
                unsealed = [c for c in list(sim.applied) if (gh, str(c.cmd_id)) in seq_of
                            and str(seq_of[gh, str(c.cmd_id)]) not in sealed]
                if unrecorded or unsealed:
                    bad.append(f"{gh}: applied commands not stored ({len(unrecorded)}) "
                               f"or not sealed ({len(unsealed)})")
            return bad
        finally:
            engine.dispose()

    def estop_windows(self) -> dict[str, list[tuple[int, int | None]]]:
        """Per greenhouse, (seq latched, seq released or None) of every e-stop, from the mode-change table."""
        with self.owner_session() as s:
            changes = list(s.scalars(select(ModeChange).order_by(ModeChange.greenhouse_id, ModeChange.seq)))
        out: dict[str, list[tuple[int, int | None]]] = {}
        for c in changes:
            windows = out.setdefault(c.greenhouse_id, [])
            if c.to_mode == "estop":
                windows.append((c.seq, None))
            elif c.from_mode == "estop" and windows and windows[-1][1] is None:
                windows[-1] = (windows[-1][0], c.seq)
        return out

    def check(self, *, expect_pid: int | None = None, timeout: float = 60.0) -> dict[str, Any]:
        """Every invariant, with the edge boxes held still until the writer caught up; returns the
        counts for the summary."""
        with self.quiet():
            return self._check(expect_pid, timeout)

    def _check(self, expect_pid: int | None, timeout: float) -> dict[str, Any]:
        svc = self.service
        assert svc.alive, f"the service exited\n{svc.tail()}"
        if expect_pid is not None:
            assert svc.pid == expect_pid, "the service was restarted by something other than the test"
        log = svc.output().splitlines()
        crash = [i for i, ln in enumerate(log) if any(m in ln for m in CRASH_MARKS)]
        assert crash == [], \
            "an exception escaped a handler:\n" + "\n".join(log[max(0, crash[0] - 3):crash[0] + 30])
        # The restricted role has every right the service uses: a refusal would be a lost write.
        denied = [ln for ln in log if "permission denied" in ln.lower()]
        assert denied == [], "the service's database role lacks a right it uses:\n" + "\n".join(denied[:5])

        # (1) Every stored decision, mode change and answered command has its sealed record; chains verify.
        wait_until(lambda: self.audit_complete() == [], timeout, "every stored record sealed and every chain "
                   "verifying", interval=1.0,
                   context=lambda: "\n".join(self.audit_complete()) + "\n" + svc.tail(15))
        # (2) No command applied twice, on any edge box; commands within the safety envelope.
        for gh, sim in self.sims():
            ids = [str(c.cmd_id) for c in sim.applied]
            assert len(ids) == len(set(ids)), f"{gh}: a command applied twice"
            for c in sim.applied:
                assert 0.0 <= c.pump_pct <= 100.0 and 0.0 <= c.light_pct <= 100.0 and set(c.valves) <= {0, 1}
        # (3) No actuator ran outside the safety limits at any moment, by the plant simulator's own log.
        unsafe = [v for _, sim in self.sims() for v in sim.safety_violations()]
        assert unsafe == [], f"{len(unsafe)} moments outside the safety limits:\n" + "\n".join(unsafe[:20])
        # (3b) Nothing applied while a greenhouse was in e-stop but the all-off command.
        windows = self.estop_windows()
        for gh, sim in self.sims():
            for start, end in windows.get(gh, []):
                inside = [c for c in sim.applied if c.seq > start and (end is None or c.seq < end)]
                assert all(c.mode == "estop" and c.pump_pct == 0.0 and not any(c.valves) for c in inside), \
                    f"{gh}: a command other than all-off applied during the e-stop {start}..{end}"
        with self.owner_session() as s:
            for gh, spans in windows.items():
                for start, end in spans:
                    q = select(Decision).where(Decision.greenhouse_id == gh, Decision.seq > start)
                    rows = s.scalars(q if end is None else q.where(Decision.seq < end))
                    assert all(d.mode == "estop" and d.clipped["pump_pct"] == 0.0
                               and not any(d.clipped["valves"]) for d in rows), \
                        f"{gh}: a decision other than all-off during the e-stop {start}..{end}"
        # (3c) No false latch: the plants report their valves as commanded (a stuck valve shows in the
        # flow only), so a valve latched failed is always a fault latched without evidence.
        latched = self.false_latches()
        assert latched == [], f"valves latched failed without evidence: {latched[:10]}"
        # (4) Nothing lost: every quarantined record is on file with its alarm.
        letters = self.dead_letters()
        with self.owner_session() as s:
            alarmed = int(s.scalar(select(func.coalesce(func.sum(AlarmGroup.count), 0))
                                   .where(AlarmGroup.kind.like("dead_letter:%"))) or 0)
        if letters:
            wait_until(lambda: self._dead_letter_alarms() >= letters, 20, "an alarm for every dead letter")
        stored = self.decisions()
        return {"decisions": sum(stored.values()), "applied": self.applied(),
                "audit_records": self.audit_records(),
                "plant steps checked": sum(len(st) for _, sim in self.sims() for st in sim.steps.values()),
                "safety violations": len(unsafe), "false latches": len(latched),
                "dead-headed plant steps": sum(st.dead_heading for _, sim in self.sims()
                                               for steps in sim.steps.values() for st in list(steps)),
                "longest dead-head s": max((sim.longest_dead_head_s() for _, sim in self.sims()),
                                           default=0.0),
                "dead_letters": letters, "dead_letter_alarms": max(alarmed, self._dead_letter_alarms()),
                "estops": sum(len(w) for w in windows.values())}

    def false_latches(self) -> list[str]:
        """``gh seq: alarm`` of every stored decision that carries a valve_failed alarm."""
        with self.owner_session() as s:
            rows = s.execute(select(Decision.greenhouse_id, Decision.seq, Decision.explanation)
                             .where(Decision.greenhouse_id.in_(PLANTS)))
            return [f"{gh} {seq}: {a}" for gh, seq, exp in rows
                    for a in ((exp or {}).get("alarms") or []) if str(a).startswith("valve_failed")]

    def _dead_letter_alarms(self) -> int:
        with self.owner_session() as s:
            return int(s.scalar(select(func.coalesce(func.sum(AlarmGroup.count), 0))
                                .where(AlarmGroup.kind.like("dead_letter:%"))) or 0)

    def audit_verify_cli(self) -> subprocess.CompletedProcess[str]:
        """``greentwin audit verify`` as an operator runs it (the owner's URL, the service's keys), against
        the chain heads the service exported."""
        env = dict(self.env, GREENTWIN_DATABASE_URL=self.roles.owner_url)
        anchors = self.service.state_dir / "audit-anchors.jsonl"
        return subprocess.run([sys.executable, "-m", "app.cli", "audit", "verify", "--anchors", str(anchors)],
                              env=env, capture_output=True, text=True, timeout=120)


def _passwd(folder: Path, passwords: dict[str, str]) -> None:
    path = folder / "passwd"
    for user, pw in passwords.items():
        subprocess.run(["mosquitto_passwd", "-b", *([] if path.exists() else ["-c"]), str(path), user, pw],
                       check=True, capture_output=True)


@contextmanager
def running_system(folder: Path, pg_url: str) -> Iterator[System]:
    """Bring everything up (see the module docstring) and take it all down afterwards."""
    from app.auth.passwords import generate_password
    from app.auth.users import create_user

    with ExitStack() as stack:
        roles = stack.enter_context(owner_and_app_roles(pg_url, "gt_e2e"))
        db_cli.upgrade(roles.owner_url)
        grant(roles.owner_url, roles.app)
        keys = AuditKeys.generate(folder / "keys")
        users = {OPERATOR: ["operator"], ADMIN: ["admin"], VIEWER: ["agronomist"]}
        user_passwords = {u: generate_password() for u in users}
        engine = make_engine(roles.owner_url)
        try:
            # As `greentwin greenhouse add` and `greentwin user add` make them: each sealed in the access
            # chain.
            sealer = AccessSealer(AuditStore(engine, *keys.open()), "cli:e2e-setup")
            for gh in (*PLANTS, HOSTILE):
                add_greenhouse(roles.owner_url, gh, zones=6, soil="loam",
                                      seal=sealer.sealing("greenhouse_register"))
            with Session(engine) as session:
                for u, r in users.items():
                    create_user(session=session, username=u, password=user_passwords[u], roles=r,
                                seal=sealer.sealing("user_added"))
        finally:
            engine.dispose()

        passwords = {SERVICE_USER: uuid.uuid4().hex, **{gh: uuid.uuid4().hex for gh in (*PLANTS, HOSTILE)}}
        broker_dir = folder / "broker"
        broker_dir.mkdir(parents=True)
        _passwd(broker_dir, passwords)
        port, tls_port = free_port(), free_port()
        broker = Mosquitto(broker_dir, port, config=deployed_config(broker_dir, port, tls_port,
                                                                     TestCA(broker_dir / "pki")))
        broker.start()
        stack.callback(broker.stop)

        target = make_url(roles.app_url)
        proxy = CuttableProxy((target.host or "127.0.0.1", target.port or 5432))
        stack.callback(proxy.close)
        service_url = target.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        env = service_env(database_url=service_url,
                          mqtt_url=f"mqtt://{SERVICE_USER}:{passwords[SERVICE_USER]}@127.0.0.1:{port}",
                          keys=keys, policy_dir=folder / "no-policy",
                          extra={"GREENTWIN_MAX_CLOCK_SKEW_S": str(SKEW_S),
                                 "GREENTWIN_COMMAND_TTL_S": str(COMMAND_TTL_S),
                                 "GREENTWIN_AUDIT_ANCHOR_EVERY_MIN": "0.05"})  # chain heads out every 3 s
        service = Service(folder, env, name="serve-0")
        system = System(folder, roles, keys, broker, passwords, proxy, env, service,
                        user_passwords=user_passwords)
        stack.callback(lambda: system.service.stop())
        stack.callback(system.close_edges)
        service.start()
        for i, gh in enumerate(PLANTS):
            system.start_edge(gh, seed=i)
        yield system


def payload(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()

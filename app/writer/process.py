"""The writer process: everything about a published decision that may wait.

It runs in a separate process that tails the journal (see :mod:`app.journal`), so the control
loop does not share its interpreter lock with this work (in one process, every lock hand-over
to a busy writer thread cost the loop milliseconds, many times per batch). Each round takes
whatever was journaled since the last one and stores it (:class:`app.writer.store.DecisionStore`);
the audit events are sealed every ``audit_flush_s``. Under load the rounds grow by themselves,
so the cost per decision falls as the rate rises. The process reports what it stored, so the
service can show it and an operator action can wait until its record is readable.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import multiprocessing as mp
import os
import pickle
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.audit_sink import AuditSink
from app.deadletter import OnDeadLetter
from app.journal import JournalReader
from app.proposers import ProposerCache
from app.recorder import DecisionRecorder
from app.writer.jobs import Job, Key
from app.writer.store import DecisionStore
from control.proposal import Proposer, load_proposer

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class WriterConfig:
    """What the writer process needs to rebuild the service's storage on its side (picklable)."""

    database_url: str
    spool_path: Path
    journal: Path
    policy_dir: Path
    proposer: bytes | None = None
    """A pickled proposer given to the service directly; otherwise loaded from ``policy_dir``."""
    audit_keys: tuple[str, bytes] | None = None
    """(keyring JSON, signing key PEM) when the service keeps an audit trail."""
    gather_s: float = 0.2
    """Pause between rounds: a round explains and commits for about the price of one record."""
    audit_flush_s: float = 2.0
    """Seal queued audit events this often while the writer has time to spare."""
    audit_flush_busy_s: float = 15.0
    """...and at least this often while records keep coming: sealing costs one transaction per
    greenhouse whatever the number of events, so under load it is done in larger, rarer rounds."""
    spool_flush_s: float = 2.0
    nice: int = 0
    """Scheduling priority relative to the control loop (positive: lower). A lower priority favours
    the loop's latency but, on a machine busy with other work, can starve the writer until its
    backlog grows; the default shares the CPU fairly."""
    resume: bool = False
    """A writer restarted mid-run: records of the journal's first round may already be stored."""
    zones: tuple[int, ...] = ()
    """Zone counts of the registered greenhouses: their proposers are loaded before the first round."""


def _load_one_thread(directory: Path, zones: int) -> Proposer:
    """:func:`control.load_proposer`, then torch on one thread: this process must not crowd the control
    loop."""
    proposer = load_proposer(directory, zones)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    return proposer


def _serve(cfg: WriterConfig, conn: Any) -> None:
    """The writer process: tail the journal, store each round, report, until told to stop."""
    # Ctrl-C reaches the whole process group: the service stops this process itself ("stop"), after
    # the loop has journaled its last batch, so the interrupt must not cut the writer short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if not logging.getLogger().handlers:  # a spawned process starts without the service's logging
        logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    with contextlib.suppress(OSError):
        os.nice(cfg.nice)
    from app.core.db import make_engine, make_session_factory

    engine = make_engine(cfg.database_url)
    recorder = DecisionRecorder(make_session_factory(engine), cfg.spool_path)
    recorder.dead_letters.on_add = lambda gh, kind, reason: conn.send(("dead_letter", gh, kind, reason))
    audit = None
    if cfg.audit_keys is not None:
        from audit import Keyring, Signer
        from audit.store import AuditStore

        audit = AuditSink(AuditStore(engine, Keyring.from_json(cfg.audit_keys[0]),
                                     Signer.from_pem(cfg.audit_keys[1])),
                          recorder.dead_letters)
    proposers = ProposerCache(cfg.policy_dir, loader=_load_one_thread,
                              fixed=pickle.loads(cfg.proposer) if cfg.proposer is not None else None)
    for zones in cfg.zones:
        proposers.get(zones)

    def proposer_for(zones: int | None) -> Proposer | None:
        return proposers.fixed if zones is None else proposers.get(zones)

    # Decisions journaled after a policy swap were taken by the new ensemble: explain them with it
    # (one that cannot be loaded here leaves the explanations to the old one; the rows are stored anyway).
    store = DecisionStore(recorder, proposer_for, audit=audit,
                          on_swap=lambda job: proposers.follow(Path(str(job.row["directory"]))))
    reader = JournalReader(cfg.journal)
    gc.collect()
    gc.freeze()  # what is loaded now stays: full collections need not walk it (see Runtime.start)
    conn.send(("ready",))
    resume, stopping = cfg.resume, False
    jobs: list[Job] = []  # read from the journal and not stored yet (kept across a failed round)
    read: list[Job] = []
    last_audit = last_spool = time.monotonic()
    while True:
        if conn.poll(cfg.gather_s):
            stopping = conn.recv() == "stop" or stopping
        try:
            read = [Job.from_entry(e) for e in reader.read()]
            jobs += read
            if jobs:
                done = store.store(jobs, skip_stored=resume)
                resume = False
                if audit is not None and any(j.kind == "mode_change" for j in done):
                    audit.flush()  # e-stops and operator actions are sealed before they are reported stored
                    last_audit = time.monotonic()
                now = time.time()
                # Only what this round stored: after a restart, the first round skips what the
                # previous process had stored (and reported) already.
                conn.send(("stored", len(done), [(j.key, j.summary() if j.kind == "decision" else None)
                                                  for j in done], [now - j.journaled_at for j in done]))
                jobs = []
            now_m = time.monotonic()
            if audit is not None and (now_m - last_audit >= cfg.audit_flush_busy_s or
                                      (not read and now_m - last_audit >= cfg.audit_flush_s) or stopping):
                audit.flush()
                last_audit = now_m
            if not jobs and (audit is None or audit.pending == 0):
                # A journal segment goes only once its audit events are sealed, not just its rows
                # stored: a writer killed in between replays it and seals what is missing.
                reader.delete_consumed()
            if now_m - last_spool >= cfg.spool_flush_s:
                if recorder.spooled:
                    recorder.flush_spool()
                conn.send(("spooled", recorder.spooled))
                if audit is not None:
                    conn.send(("audit", audit.pending, audit.waiting_since, audit.last_seal_at))
                last_spool = now_m
        except Exception:  # never die: what is not stored is retried next round (and stays journaled)
            log.exception("writer round failed; retrying")
            time.sleep(0.5)
            continue
        if stopping and not jobs:
            if audit is None or audit.pending == 0:
                reader.delete_consumed(including_current=True)  # the loop closed the journal before "stop"
            else:  # the next start replays the journal and seals what is missing
                log.error("%d audit events could not be sealed at shutdown; they stay journaled",
                          audit.pending)
            break
    if audit is not None:
        audit.close()
    conn.send(("bye",))


class WriterProcess:
    """The service's handle on the writer process: start, counts, waits, stop."""

    def __init__(self, on_stored: Callable[[list[tuple[str, dict[str, Any]]]], None] | None = None,
                 on_dead_letter: OnDeadLetter | None = None) -> None:
        self.cfg: WriterConfig | None = None
        self.on_stored = on_stored
        self.on_dead_letter = on_dead_letter
        self.stored = 0
        self.spooled = 0
        self.audit_pending = 0
        """Audit events queued in the writer and not sealed yet (as of its last report)."""
        self.audit_waiting_since: float | None = None
        self.audit_last_seal_at: float | None = None
        self.lag_s: deque[float] = deque(maxlen=20_000)
        """Journal-to-stored seconds of recent records (the benchmark reports them)."""
        self._appended = 0
        self._marks: deque[tuple[int, float]] = deque()
        """(records journaled in all, monotonic time) per append not yet known stored: the oldest says
        how long the writer has been behind."""
        self._proc: Any = None
        self._conn: Any = None
        self._reader: threading.Thread | None = None
        self._waiters: dict[Key, threading.Event] = {}
        self._lock = threading.Lock()
        self._bye = threading.Event()
        self._ready = threading.Event()

    def start(self, cfg: WriterConfig | None = None) -> None:
        self.cfg = cfg or self.cfg
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._bye.clear()
        self._ready.clear()
        self._proc = ctx.Process(target=_serve, args=(self.cfg, child), name="greentwin-writer", daemon=True)
        self._proc.start()
        child.close()
        self._reader = threading.Thread(target=self._read, name="writer-reports", daemon=True)
        self._reader.start()

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Block until the process has loaded what it needs (benchmarks; the journal buffers meanwhile)."""
        return self._ready.wait(timeout)

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def appended(self, count: int) -> None:
        """The loop journaled ``count`` more records."""
        with self._lock:
            self._appended += count
            self._drop_stored_marks()  # kept to what waits, whether or not anyone asks how long
            self._marks.append((self._appended, time.monotonic()))

    def behind_s(self, now: float | None = None) -> float:
        """Seconds the oldest journaled record not yet stored has waited (0 when none waits)."""
        t = time.monotonic() if now is None else now
        with self._lock:
            self._drop_stored_marks()
            return t - self._marks[0][1] if self._marks else 0.0

    def _drop_stored_marks(self) -> None:
        while self._marks and self._marks[0][0] <= self.stored:
            self._marks.popleft()

    @property
    def backlog(self) -> int:
        """Records journaled and not yet stored."""
        return self._appended - self.stored

    def sealing_stuck_s(self, limit_s: float, now: float | None = None) -> float | None:
        """Seconds audit events have been waiting when that exceeds ``limit_s``, else None."""
        since = self.audit_waiting_since
        if not self.audit_pending or since is None:
            return None
        waited = (time.time() if now is None else now) - since
        return waited if waited > limit_s else None

    def waiter(self, key: Key) -> threading.Event:
        """An event set once the record ``key`` is stored (register it before journaling the record)."""
        event = threading.Event()
        with self._lock:
            self._waiters[key] = event
        return event

    def _read(self) -> None:
        conn = self._conn
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if msg[0] == "stored":
                _, count, done, lags = msg
                self.stored += count
                self.lag_s.extend(lags)
                if self.on_stored is not None:
                    try:
                        self.on_stored([(k[1], s) for k, s in done if s is not None])
                    except Exception:
                        log.exception("on_stored hook failed")
                with self._lock:
                    events = [self._waiters.pop(k, None) for k, _ in done]
                for e in events:
                    if e is not None:
                        e.set()
            elif msg[0] == "dead_letter" and self.on_dead_letter is not None:
                try:
                    self.on_dead_letter(*msg[1:])
                except Exception:
                    log.exception("dead-letter hook failed")
            elif msg[0] == "spooled":
                self.spooled = msg[1]
            elif msg[0] == "audit":
                self.audit_pending, self.audit_waiting_since, self.audit_last_seal_at = msg[1:]
            elif msg[0] == "ready":
                self._ready.set()
            elif msg[0] == "bye":
                self._bye.set()
                return

    def follow_policy(self, directory: Path) -> None:
        """A promoted ensemble is in force: a restarted writer explains with it (the running one
        follows the journal's ``policy_swap`` records)."""
        if self.cfg is not None:
            self.cfg = dataclasses.replace(self.cfg, policy_dir=directory)

    def restart_if_dead(self) -> bool:
        """Start a new writer if the process died; it resumes from the journal. True if restarted."""
        if self._proc is None or self._proc.is_alive() or self._bye.is_set():
            return False
        log.error("writer process exited (code %s); starting a new one", self._proc.exitcode)
        self._conn.close()
        assert self.cfg is not None
        self.start(dataclasses.replace(self.cfg, resume=True))
        return True

    def stop(self, timeout: float = 60.0) -> None:
        """Store everything journaled (the journal must be closed first), seal the audit events, end."""
        if self._proc is None:
            return
        if self._proc.is_alive():
            with contextlib.suppress(OSError, BrokenPipeError):
                self._conn.send("stop")
            if not self._bye.wait(timeout):
                log.error("writer process did not finish within %.0f s; what it did not store stays in "
                          "the journal", timeout)
        self._proc.join(5.0)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5.0)
        self._conn.close()
        if self._reader is not None:
            self._reader.join(5.0)
        self._proc = None

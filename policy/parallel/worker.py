"""A worker process: steps one contiguous slice of a vector twin's instances and publishes the rows.

It imports numpy and the twin only (no torch). Workers come from a forkserver that preloads
this module, so a start or restart costs a fork and a twin build, not an interpreter start.
The twin is built with the slice's global instance ids, so every row replays, bit for bit,
the same row of one twin over the whole batch.

Requests (learner -> worker) and replies, one reply per request:

=====================  ==============================  ========================================
request                what the worker does            reply
=====================  ==============================  ========================================
("reset", k, seed)     ``twin.reset(seed)``            ("done", k, None)
("step", k)            step with the shared actions    ("done", k, error or None)
("rebuild", k)         publish the fresh episodes of   ("done", k, None)
                       a restart, flagged truncated
("get", "params")      copy params (or "state") out    ("arrays", {name: array})
("load", k, p, s)      overwrite params and state      ("done", k, None)
("fault", kind, n)     arm a test fault                ("ok",)
("close",)             exit                            none
any, when it fails     (nothing)                       ("failed", error)
=====================  ==============================  ========================================

``error`` is ``(fingerprint, summary, traceback)``; the traceback is sent only the first time a
fingerprint occurs in this process. On an error the worker rebuilds all its instances (fresh
episodes, flagged truncated) and carries on.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from policy.parallel.errors import describe
from policy.parallel.layout import Layout, SharedBuffers, publish_rows
from twin.config import TwinConfig
from twin.env import GreenhouseTwin
from twin.types import TwinParams, TwinState

FAULT_KINDS = ("raise", "hang", "exit")
"""Faults a test can arm in a worker: raise inside the next steps, stop heartbeats, exit abruptly."""
ErrorInfo = tuple[str, str, str]


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker process needs (picklable)."""

    index: int
    lo: int
    """First shared row of the slice."""
    hi: int
    """One past its last row."""
    segment: str
    layout: Layout
    seed: int
    config: TwinConfig
    heartbeat_s: float
    """Longest idle wait between heartbeats."""
    offset: int = 0
    """Global instance id of shared row 0 (a multi-rank run gives each rank its own ids)."""
    rebuild: bool = False
    """A restart: continue each instance at its next episode (read from the shared buffers)."""


class InjectedFault(RuntimeError):
    """Raised by an armed 'raise' fault (tests of the error path)."""


def _injected_failure(first_id: int) -> None:
    raise InjectedFault(f"injected failure on instances from {first_id}")


def worker_main(spec: WorkerSpec, conn: Connection) -> None:
    """Process entry point: attach, build the twin, serve requests until told to close or orphaned."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group; the learner decides
    buf = SharedBuffers.attach(spec.layout, spec.segment)
    try:
        try:
            worker = _Worker(spec, buf, conn)
        except Exception as exc:
            conn.send(("error", describe(exc)))
            return
        worker.serve()
    finally:
        buf.close()
        conn.close()


class _Worker:
    def __init__(self, spec: WorkerSpec, buf: SharedBuffers, conn: Connection) -> None:
        self.spec, self.buf, self.conn = spec, buf, conn
        self.n = spec.hi - spec.lo
        self.twin = GreenhouseTwin(num_instances=self.n, backend="numpy", seed=spec.seed, config=spec.config,
                                   instance_offset=spec.offset + spec.lo)
        self.started = False
        if spec.rebuild:
            self.twin.reset()
            self.twin.state.episode[...] = buf.episode[spec.lo:spec.hi]
            self.twin.reset_instances(np.arange(self.n))
            self._record_episodes()
            self.started = True
        self.fault: str | None = None
        self.fault_left = 0
        self.reported: set[str] = set()

    def serve(self) -> None:
        beat = self.buf.heartbeat
        self.conn.send(("ready", os.getpid()))
        while True:
            beat[self.spec.index] = time.monotonic()
            if not self.conn.poll(self.spec.heartbeat_s):
                continue
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return  # the learner is gone
            if msg[0] == "close":
                return
            try:
                reply = self.handle(msg)
            except Exception as exc:  # a request this worker cannot serve: the learner decides what to do
                reply = ("failed", describe(exc))
            self.conn.send(reply)

    def handle(self, msg: tuple[Any, ...]) -> tuple[Any, ...]:
        op = msg[0]
        if op == "step":
            return ("done", msg[1], self.step(msg[1]))
        if op == "reset":
            obs = self.twin.reset(msg[2])
            self.started = True
            self._publish(msg[1], obs, obs, np.zeros(self.n, np.float32), False, False, rebuilt=False)
            return ("done", msg[1], None)
        if op == "rebuild":
            self._publish_rebuild(msg[1], self._previous_obs(msg[1]))
            return ("done", msg[1], None)
        if op == "get":
            self._ensure_started()
            record = self.twin.params if msg[1] == "params" else self.twin.state
            return ("arrays", {k: np.array(v) for k, v in record.arrays().items()})
        if op == "load":
            self._ensure_started()
            everyone = np.arange(self.n)
            self.twin.params.scatter_(everyone, TwinParams(**msg[2]))
            self.twin.state.scatter_(everyone, TwinState(**msg[3]))
            obs = self.twin.state.last_obs
            self._publish(msg[1], obs, obs, np.zeros(self.n, np.float32), False, False, rebuilt=False)
            return ("done", msg[1], None)
        if op == "fault":
            if msg[1] not in FAULT_KINDS:
                raise ValueError(f"unknown fault {msg[1]!r}; known: {FAULT_KINDS}")
            self.fault, self.fault_left = msg[1], int(msg[2])
            return ("ok",)
        raise ValueError(f"unknown request {op!r}")

    def step(self, k: int) -> ErrorInfo | None:
        """One control step of the slice; an exception rebuilds the slice instead of killing the worker."""
        actions = np.array(self.buf.actions[self.spec.lo:self.spec.hi])
        fault = self._take_fault()
        if fault == "hang":
            while True:  # no heartbeat from here on: the learner must notice and kill this process
                time.sleep(3600)
        if fault == "exit":
            os._exit(3)
        try:
            if fault == "raise":
                _injected_failure(self.spec.offset + self.spec.lo)
            obs, reward, terminated, truncated, info = self.twin.step(actions)
        except Exception as exc:
            fp, summary, trace = describe(exc)
            error = (fp, summary, "" if fp in self.reported else trace)
            self.reported.add(fp)
            last_seen = np.array(self.twin.state.last_obs)
            self.twin.reset_instances(np.arange(self.n))
            self._publish_rebuild(k, last_seen)
            return error
        self._publish(k, obs, info.get("final_obs", obs), reward, terminated, truncated, rebuilt=False)
        return None

    # ---- helpers --------------------------------------------------------------------------
    def _take_fault(self) -> str | None:
        if self.fault is None:
            return None
        fault = self.fault
        self.fault_left -= 1
        if self.fault_left <= 0:
            self.fault = None
        return fault

    def _ensure_started(self) -> None:
        if not self.started:
            self.twin.reset()
            self.started = True

    def _previous_obs(self, k: int) -> np.ndarray:
        """What the learner last saw of this slice: step k - 1's rows if complete, else the fresh rows."""
        lo, hi = self.spec.lo, self.spec.hi
        prev = (k - 1) % 2
        if k > 0 and bool(np.all(self.buf.seq[prev, lo:hi] == 2 * k)):
            return np.array(self.buf.obs[prev, lo:hi])
        return np.array(self.twin.state.last_obs)

    def _publish_rebuild(self, k: int, final_obs: np.ndarray) -> None:
        obs = self.twin.state.last_obs
        self._publish(k, obs, final_obs, np.zeros(self.n, np.float32), False, True, rebuilt=True)

    def _publish(self, k: int, obs: np.ndarray, final_obs: np.ndarray, reward: np.ndarray, terminated: Any,
                 truncated: Any, rebuilt: bool) -> None:
        shape = (self.n,)
        publish_rows(self.buf, k, self.spec.lo, self.spec.hi, obs, final_obs, reward,
                     np.broadcast_to(np.asarray(terminated, np.bool_), shape),
                     np.broadcast_to(np.asarray(truncated, np.bool_), shape), rebuilt)
        self._record_episodes()

    def _record_episodes(self) -> None:
        self.buf.episode[self.spec.lo:self.spec.hi] = self.twin.state.episode


def with_seed(spec: WorkerSpec, seed: int, rebuild: bool) -> WorkerSpec:
    """The spec for a (re)start under the vector twin's current seed."""
    return dataclasses.replace(spec, seed=seed, rebuild=rebuild)

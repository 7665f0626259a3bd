"""ShmVectorTwin: one batch of B twin instances stepped by W worker processes.

Worker ``w`` owns the contiguous rows ``lo_w:hi_w`` and steps a numpy
:class:`~twin.env.GreenhouseTwin` built with their global instance ids (``instance_offset + row``),
so every row is bit-identical to the same row of one in-process numpy twin over all B instances. Actions and
results live in one shared segment (:mod:`policy.parallel.layout`); ``step`` returns torch views of it
(zero-copy on the CPU), valid until the second next ``step`` or ``reset``: clone what must live longer.

Supervision, on the learner's side of every request:

* a worker that exits (crash, SIGKILL) or sends no heartbeat for ``hang_timeout_s`` (killed
  then) is restarted; its instances continue at their next episode and the current step
  reports them with reward 0, ``truncated=True`` and ``info['rebuilt']``, ``final_obs`` being the
  last observation the learner saw, so PPO bootstraps them as time-limit cuts;
* an exception inside a worker's step rebuilds that worker's instances the same way without a
  restart, and is logged once per stack-trace fingerprint, later occurrences only counted;
* more than ``max_failures`` failures of one worker in a row raise :class:`WorkerError`.

The segment is unlinked on every exit path: ``close()``, leaving a ``with`` block through an
exception or KeyboardInterrupt, garbage collection or interpreter exit (a finaliser), and the
multiprocessing resource tracker if the learner process is killed outright.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import signal
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any, Literal, NamedTuple

import numpy as np
import torch

from policy.parallel.errors import ErrorLog, fingerprint
from policy.parallel.layout import Layout, RowCopy, SharedBuffers, read_newest, verify_rows
from policy.parallel.worker import FAULT_KINDS, WorkerSpec, with_seed, worker_main
from twin.config import TwinConfig
from twin.dynamics import TERMINATION_REASONS
from twin.spec import ActionSpec, ObservationSpec
from twin.types import TwinParams, TwinState

logger = logging.getLogger("policy.parallel")
StartMethod = Literal["forkserver", "spawn"]
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
_CLOSE_TIMEOUT_S = 5.0


class WorkerError(RuntimeError):
    """A worker failed more times in a row than tolerated, or could not serve a request."""


class TornReadError(RuntimeError):
    """A row passed the seqlock but not its checksum (never expected: it means a broken writer)."""


class Peek(NamedTuple):
    rows: RowCopy
    """Newest complete row per instance (copies)."""
    retries: int
    """Row reads repeated because a worker was writing that row at the time."""


@dataclass
class _Handle:
    """The learner's view of one worker."""

    spec: WorkerSpec
    proc: BaseProcess | None = None
    conn: Connection | None = None
    request: tuple[Any, ...] | None = None
    reply: tuple[Any, ...] | None = None
    fresh: bool = False
    """Restarted and not yet reported: its next step answers with the rebuilt instances."""
    failures: int = 0
    """Failures since its last clean step."""
    restarts: int = 0

    @property
    def name(self) -> str:
        return f"worker {self.spec.index} (instances {self.spec.lo}-{self.spec.hi - 1})"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.exitcode is None


def worker_bounds(num_instances: int, num_workers: int) -> list[tuple[int, int]]:
    """Contiguous, as-even-as-possible slices ``[lo, hi)`` of the global instance ids."""
    cuts = [round(i * num_instances / num_workers) for i in range(num_workers + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True))


@contextlib.contextmanager
def _one_blas_thread() -> Iterator[None]:
    """Workers inherit the environment at start: one BLAS/OpenMP thread each, unless set explicitly."""
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    for k in _THREAD_VARS:
        os.environ.setdefault(k, "1")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _context(method: StartMethod) -> BaseContext:
    if method not in ("forkserver", "spawn"):
        raise ValueError("start_method must be 'forkserver' or 'spawn' (fork is unsafe with torch), got "
                         f"{method!r}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        # The server imports the worker module (and the main script, which children would otherwise each
        # import again) once; every worker start after that is a fork of it.
        ctx.set_forkserver_preload(["__main__", "policy.parallel.worker"])  # type: ignore[attr-defined]
    return ctx


def _shutdown(handles: list[_Handle], buf: SharedBuffers, errors: ErrorLog, wait: bool = True) -> None:
    """Stop every worker (after its current request if ``wait``, else at once), then unlink the
    segment: the workers are gone by then, so none can map or re-register it afterwards."""
    try:
        for h in handles:
            if h.conn is not None and wait:
                with contextlib.suppress(OSError):
                    h.conn.send(("close",))
        deadline = time.monotonic() + (_CLOSE_TIMEOUT_S if wait else 0.0)
        for h in handles:
            if h.proc is not None:
                h.proc.join(max(0.0, deadline - time.monotonic()))
                if h.proc.exitcode is None:
                    h.proc.kill()
                    h.proc.join()
            if h.conn is not None:
                h.conn.close()
            h.proc, h.conn = None, None
    finally:
        buf.close()
        buf.unlink()
        errors.log_summary()


class ShmVectorTwin:
    """B twin instances over W worker processes, with the :class:`~twin.env.GreenhouseTwin` interface
    (both implement :class:`policy.rollout.VectorTwin`, what PPO trains on).

    >>> with ShmVectorTwin(64, 2, seed=0) as twin:  # doctest: +SKIP
    ...     obs = twin.reset()
    ...     obs, reward, terminated, truncated, info = twin.step(actions)
    """

    metadata = {"autoreset_mode": "same_step", "termination_reasons": TERMINATION_REASONS}

    def __init__(self, num_instances: int, num_workers: int, *, seed: int = 0, device: str = "cpu",
                 config: TwinConfig | None = None, hang_timeout_s: float = 60.0,
                 startup_timeout_s: float = 120.0,
                 heartbeat_s: float = 0.2, max_failures: int = 5, start_method: StartMethod = "forkserver",
                 instance_offset: int = 0, **overrides: Any) -> None:
        if num_workers < 1 or num_instances < num_workers:
            raise ValueError(f"need 1 <= num_workers <= num_instances, got {num_workers} workers "
                             f"for {num_instances} instances")
        bounds = worker_bounds(num_instances, num_workers)
        if num_instances > 1 and min(hi - lo for lo, hi in bounds) < 2:
            # numpy steps a one-row batch on another code path whose results differ in the last bit.
            raise ValueError(f"each worker needs at least 2 instances (one-row batches are not bit-identical "
                             f"to batched rows): use at most {num_instances // 2} workers for "
                             f"{num_instances}")
        if min(hang_timeout_s, startup_timeout_s, heartbeat_s) <= 0 or max_failures < 1:
            raise ValueError("timeouts and heartbeat_s must be > 0 and max_failures >= 1")
        if instance_offset < 0:
            raise ValueError(f"instance_offset must be >= 0, got {instance_offset}")
        if config is not None and overrides:
            raise TypeError("pass either config= or keyword overrides, not both")
        self.config = config if config is not None else TwinConfig.from_overrides(**overrides)
        self.num_instances, self.num_workers = int(num_instances), int(num_workers)
        self.seed, self.device = int(seed), torch.device(device)
        self.hang_timeout_s, self.startup_timeout_s, self.heartbeat_s = (hang_timeout_s, startup_timeout_s,
                                                                         heartbeat_s)
        self.max_failures = max_failures
        self.observation_spec = ObservationSpec(self.config.zones)
        self.action_spec = ActionSpec(self.config.zones)
        self._ctx = _context(start_method)
        self._errors = ErrorLog()
        self._step = -1
        self._inflight: int | None = None
        self._closed = False
        layout = Layout(self.num_instances, self.observation_spec.dim, self.action_spec.dim, self.num_workers)
        self._buf = SharedBuffers.create(layout)
        self.instance_offset = int(instance_offset)
        self._handles = [_Handle(WorkerSpec(i, lo, hi, self._buf.name, layout, self.seed, self.config,
                                            heartbeat_s, self.instance_offset))
                         for i, (lo, hi) in enumerate(bounds)]
        self._finalizer = weakref.finalize(self, _shutdown, self._handles, self._buf, self._errors)
        try:
            self._actions = torch.from_numpy(self._buf.actions)
            self._views = [self._slot_views(s) for s in (0, 1)]
            self._start(self._handles, rebuild=False)
        except BaseException:
            self.close()
            raise

    # ---- the GreenhouseTwin interface ---------------------------------------------------------
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Start new episodes everywhere (same rules as :meth:`GreenhouseTwin.reset`); returns obs [B, D]."""
        self._check_idle()
        if seed is not None:
            self.seed = int(seed)
        k = self._step + 1
        self._round(lambda h: ("reset", k, seed))
        self._finish(k)
        return self._result(k)[0]

    def step(self, actions: torch.Tensor | np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                                   torch.Tensor, dict[str, Any]]:
        """Apply actions [B, A] and advance one control step (same-step autoreset).

        ``info`` holds ``final_obs`` (the pre-reset observation; equal to obs where not done),
        ``final_info_mask`` (terminated or truncated) and ``rebuilt`` (instances rebuilt after a
        worker failure this step); the twin's other diagnostics stay in the workers.
        """
        self.step_async(actions)
        return self.step_wait()

    def step_async(self, actions: torch.Tensor | np.ndarray) -> None:
        """Hand the actions to the workers and return at once (``step_wait`` collects the result)."""
        self._check_idle()
        if self._step < 0:
            raise RuntimeError("call reset() before step()")
        a = torch.as_tensor(actions)
        expected = (self.num_instances, self.action_spec.dim)
        if tuple(a.shape) != expected:
            raise ValueError(f"actions must have shape {expected} (valves 0/1 per zone, pump %, lights %), "
                             f"got {tuple(a.shape)}")
        self._actions.copy_(a)
        k = self._inflight = self._step + 1
        for h in self._handles:
            self._send(h, ("rebuild", k) if h.fresh else ("step", k))

    def step_wait(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        """Wait for every worker's rows of the step in flight; returns views of them."""
        if self._inflight is None:
            raise RuntimeError("step_wait() without step_async()")
        k = self._inflight
        self._gather()
        self._inflight = None
        self._finish(k)
        return self._result(k)

    @property
    def params(self) -> TwinParams:
        """Copies of every instance's params, gathered from the workers (for snapshots)."""
        return TwinParams(**self._gather_arrays("params"))

    @property
    def state(self) -> TwinState:
        """Copies of every instance's state, gathered from the workers (for snapshots)."""
        return TwinState(**self._gather_arrays("state"))

    def episodes(self) -> tuple[TwinParams, TwinState]:
        """Copies of every instance's params and state, gathered from the workers."""
        return self.params, self.state

    def restore_episodes(self, params: TwinParams, state: TwinState, ids: torch.Tensor | None = None) -> None:
        """Overwrite the instances ``ids`` (all when None) with these rows of params and state
        (resuming a snapshot, restarting some episodes); the views of the last step now show
        ``state.last_obs``."""
        self._check_idle()
        if self._step < 0:
            self.reset()
        if ids is not None:  # the workers load whole slices: merge the rows into everyone's episodes
            rows = torch.as_tensor(ids).cpu()
            all_params, all_state = self.episodes()
            all_params.scatter_(rows, params)
            all_state.scatter_(rows, state)
            params, state = all_params, all_state
        k = self._step
        p = {n: np.asarray(torch.as_tensor(v).cpu()) for n, v in params.arrays().items()}
        s = {n: np.asarray(torch.as_tensor(v).cpu()) for n, v in state.arrays().items()}
        self._round(lambda h: ("load", k, {n: v[h.spec.lo:h.spec.hi] for n, v in p.items()},
                               {n: v[h.spec.lo:h.spec.hi] for n, v in s.items()}))
        self._finish(k)

    # ---- observation without stopping the workers ----------------------------------------
    def peek(self) -> Peek:
        """The newest complete row of every instance, read while workers may be writing.

        Lock-free: rows caught mid-write are read again; every accepted row's checksum is
        verified and a mismatch raises :class:`TornReadError`.
        """
        self._check_open()
        rows, retries = read_newest(self._buf)
        bad = np.flatnonzero(~verify_rows(rows))
        if bad.size:
            raise TornReadError(f"{bad.size} rows failed their checksum after a clean seqlock read, e.g. "
                                f"{bad[:5]}")
        return Peek(rows, retries)

    # ---- supervision and diagnostics -------------------------------------------------------
    @property
    def worker_pids(self) -> list[int | None]:
        return [h.proc.pid if h.proc is not None else None for h in self._handles]

    @property
    def restarts(self) -> list[int]:
        """Restarts per worker since construction."""
        return [h.restarts for h in self._handles]

    def error_counts(self) -> dict[str, int]:
        """Occurrences per failure fingerprint (worker exceptions, exits, hangs)."""
        return self._errors.counts()

    @property
    def segment_names(self) -> list[str]:
        """Shared-memory segments this twin created (gone once it is closed)."""
        return [self._buf.name]

    def inject_fault(self, worker: int, kind: str, count: int = 1) -> None:
        """Arm a fault in one worker for its next ``count`` steps: ``raise`` an exception inside the
        step, ``hang`` without heartbeats, or ``exit`` abruptly. For recovery tests and drills."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {FAULT_KINDS}")
        self._check_idle()
        h = self._handles[worker]
        self._send(h, ("fault", kind, count))
        self._gather()

    # ---- lifetime ------------------------------------------------------------------------------
    def close(self, wait: bool = True) -> None:
        """Stop the workers and unlink the segment (idempotent).

        With ``wait`` each worker finishes its current request first; without, all are killed at
        once (leaving a ``with`` block through an exception or Ctrl-C: workers hold nothing to save).
        """
        if self._closed:
            return
        self._closed = True
        self._views, self._actions = [], torch.empty(0)  # drop our views before unmapping
        if self._finalizer.detach() is not None:
            _shutdown(self._handles, self._buf, self._errors, wait)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> ShmVectorTwin:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        self.close(wait=exc_type is None)

    # ---- internals -------------------------------------------------------------------------------
    def _slot_views(self, slot: int) -> dict[str, torch.Tensor]:
        b = self._buf
        return {name: torch.from_numpy(getattr(b, name)[slot])
                for name in ("obs", "final_obs", "reward", "terminated", "truncated", "rebuilt")}

    def _result(self, k: int
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]:
        v = self._views[k % 2]
        if self.device.type != "cpu":
            v = {n: t.to(self.device) for n, t in v.items()}
        info = {"final_obs": v["final_obs"], "final_info_mask": v["terminated"] | v["truncated"],
                "rebuilt": v["rebuilt"]}
        return v["obs"], v["reward"], v["terminated"], v["truncated"], info

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this ShmVectorTwin is closed")

    def _check_idle(self) -> None:
        self._check_open()
        if self._inflight is not None:
            raise RuntimeError("a step is in flight: call step_wait() first")

    def _finish(self, k: int) -> None:
        """Every row of slot k % 2 must now hold step k, complete (the workers' seqlock says so)."""
        seq = self._buf.seq[k % 2]
        if not bool(np.all(seq == 2 * k + 2)):
            rows = np.flatnonzero(seq != 2 * k + 2)
            raise RuntimeError(f"step {k}: rows {rows[:5]} are not complete after every worker answered")
        self._step = k

    def _round(self, message: Callable[[_Handle], tuple[Any, ...]]) -> list[tuple[Any, ...]]:
        for h in self._handles:
            self._send(h, message(h))
        return self._gather()

    def _gather_arrays(self, which: str) -> dict[str, torch.Tensor]:
        self._check_idle()
        replies = self._round(lambda h: ("get", which))
        names = replies[0][1].keys()
        return {n: torch.from_numpy(np.concatenate([r[1][n] for r in replies])) for n in names}

    def _send(self, h: _Handle, msg: tuple[Any, ...]) -> None:
        if not h.alive():
            self._recover(h, self._exit_reason(h))
            msg = self._resend(msg)
        h.request, h.reply = msg, None
        try:
            assert h.conn is not None
            h.conn.send(msg)
        except OSError:
            self._recover(h, self._exit_reason(h))
            self._send(h, self._resend(msg))

    @staticmethod
    def _resend(msg: tuple[Any, ...]) -> tuple[Any, ...]:
        """What to ask a restarted worker instead of ``msg``: a step becomes a rebuild."""
        return ("rebuild", msg[1]) if msg[0] == "step" else msg

    def _gather(self) -> list[tuple[Any, ...]]:
        """Wait for a reply from every worker with a request out, restarting dead or silent ones."""
        beats = self._buf.heartbeat
        asked = [h for h in self._handles if h.request is not None]
        while True:
            waiting = [h for h in asked if h.request is not None]
            if not waiting:
                break
            objects: dict[Any, tuple[_Handle, Connection]] = {}
            for h in waiting:
                assert h.conn is not None and h.proc is not None
                objects[h.conn] = objects[h.proc.sentinel] = (h, h.conn)
            for obj in wait(list(objects), timeout=self.heartbeat_s):
                h, conn = objects[obj]
                if h.request is None or h.conn is not conn:  # answered, or restarted, earlier in this round
                    continue
                if obj is conn:
                    try:
                        reply = conn.recv()
                    except (EOFError, OSError):
                        self._recover_request(h, self._exit_reason(h))
                        continue
                    self._on_reply(h, reply)
                elif not conn.poll():  # the process ended without (another) reply
                    self._recover_request(h, self._exit_reason(h))
            now = time.monotonic()
            for h in waiting:
                silent = now - float(beats[h.spec.index])
                if h.request is not None and silent > self.hang_timeout_s:
                    self._recover_request(h, ("hang", f"no heartbeat for {silent:.1f} s (limit "
                                                      f"{self.hang_timeout_s:g} s); killed"))
        return [h.reply for h in asked if h.reply is not None]

    def _on_reply(self, h: _Handle, reply: tuple[Any, ...]) -> None:
        request = h.request
        assert request is not None
        if reply[0] == "failed":
            fp, summary, trace = reply[1]
            self._errors.record(fp, summary, trace, h.name)
            raise WorkerError(f"{h.name} could not serve {request[0]!r}: {summary}")
        if reply[0] == "done" and reply[2] is not None:
            fp, summary, trace = reply[2]
            self._errors.record(fp, summary, trace, h.name)
            self._count_failure(h, summary)
        elif request[0] == "step":  # only a clean step ends a run of failures (a restart alone does not)
            h.failures = 0
        if request[0] in ("rebuild", "reset", "load"):
            h.fresh = False
        h.request, h.reply = None, reply

    def _count_failure(self, h: _Handle, summary: str) -> None:
        h.failures += 1
        if h.failures > self.max_failures:
            raise WorkerError(f"{h.name} failed {h.failures} times in a row; last: {summary}")

    @staticmethod
    def _exit_reason(h: _Handle) -> tuple[str, str]:
        if h.proc is not None:
            h.proc.join(1.0)  # its pipe closed: the exit code follows within moments
        code = h.proc.exitcode if h.proc is not None else None
        if code is not None and code < 0:
            with contextlib.suppress(ValueError):
                return f"exit {code}", f"process killed by {signal.Signals(-code).name}"
        return f"exit {code}", f"process ended (exit code {code})"

    def _recover_request(self, h: _Handle, reason: tuple[str, str]) -> None:
        """Restart a worker that failed while a request was out, and ask the new one again."""
        request = h.request
        assert request is not None
        self._recover(h, reason)
        msg = self._resend(request)
        h.request, h.reply = msg, None
        assert h.conn is not None
        h.conn.send(msg)
        # The hang clock restarts with the new request: a slow start on a busy host is not a hang.
        self._buf.heartbeat[h.spec.index] = time.monotonic()

    def _recover(self, h: _Handle, reason: tuple[str, str]) -> None:
        key, summary = reason
        self._errors.record(fingerprint(key), summary, "", h.name)
        self._count_failure(h, summary)
        self._stop(h)
        h.restarts += 1
        logger.info("restarting %s after: %s", h.name, summary)
        self._start([h], rebuild=True)
        h.fresh = True

    @staticmethod
    def _stop(h: _Handle) -> None:
        if h.proc is not None:
            if h.proc.exitcode is None:
                h.proc.kill()
            h.proc.join()
        if h.conn is not None:
            h.conn.close()
        h.proc, h.conn = None, None

    def _start(self, handles: list[_Handle], rebuild: bool) -> None:
        """Start processes for ``handles`` and wait until each reports ready (a failed start is retried)."""
        todo = list(handles)
        while todo:
            for h in todo:
                parent, child = self._ctx.Pipe(duplex=True)
                proc = self._ctx.Process(target=worker_main,
                                         args=(with_seed(h.spec, self.seed, rebuild), child),
                                         name=f"greentwin-worker-{h.spec.index}", daemon=True)
                self._buf.heartbeat[h.spec.index] = time.monotonic()
                with _one_blas_thread():
                    proc.start()
                child.close()
                h.proc, h.conn, h.request, h.reply = proc, parent, None, None
            failed = self._await_ready(todo)
            for h, summary in failed:
                self._count_failure(h, summary)
                self._stop(h)
            todo = [h for h, _ in failed]

    def _await_ready(self, handles: list[_Handle]) -> list[tuple[_Handle, str]]:
        deadline = time.monotonic() + self.startup_timeout_s
        pending = {h.conn: h for h in handles if h.conn is not None}
        failed: list[tuple[_Handle, str]] = []
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                failed += [(h, f"not ready within {self.startup_timeout_s:g} s") for h in pending.values()]
                break
            for conn in wait(list(pending), timeout=left):
                assert isinstance(conn, Connection)
                h = pending.pop(conn)
                try:
                    msg = conn.recv()
                except (EOFError, OSError):
                    failed.append((h, self._exit_reason(h)[1]))
                    continue
                if msg[0] != "ready":
                    fp, summary, trace = msg[1]
                    self._errors.record(fp, summary, trace, f"{h.name} start")
                    failed.append((h, summary))
        return failed

"""The forecast worker: every few minutes each greenhouse's 24 hours ahead, computed in a process of its own.

Beside the control loop, never on it: a round takes each greenhouse's scene on the event loop (a copy
of a few numbers, between two decisions, as the housekeeping's snapshots are taken), then hands the
twin's run to a single worker process, so the decisions never share an interpreter, or its lock, with
the forecast. A round that fails, or a worker process that dies, is logged and the next round goes
on. A greenhouse the policy does not decide (manual mode, e-stop) gets no forecast: the policy's
plan would not be what happens. The ensemble crosses to the worker process once per version.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from typing import Any

from app.forecast.run import compute
from app.forecast.scene import Scene, Variant, scene_of
from app.forecast.summary import Forecast
from app.forecast.tracking import ForecastTracker
from app.loop_calls import call_on_loop
from app.outlook.feed import OutlookFeed
from control import GreenhouseController, Proposer
from safety import SafetyLimits

log = logging.getLogger(__name__)
WHAT_IF_TIMEOUT_S = 120.0
FIRST_ROUND_S = 30.0
"""The first round comes this long after the start at the latest (the greenhouses have telemetry by then)."""

_PROPOSERS: dict[str, Proposer] = {}
"""The worker process's ensembles, by the key the service sent them under."""
KEEP_PROPOSERS = 4


class _NotSent(LookupError):
    """The worker process does not hold that ensemble (any more): send it again."""


def _worker_init() -> None:
    """The worker process yields the cores to the control loop: lowest priority, one thread; and it
    ends with the service, however the service ends."""
    os.nice(19)
    _exit_with_parent()
    try:
        import torch

        torch.set_num_threads(1)
    except ImportError:  # the expert alone needs no torch
        pass


def _exit_with_parent() -> None:
    """A service killed outright (SIGKILL, OOM) closes no pool: the worker would wait on its task queue
    for ever, holding an ensemble's memory. A watcher thread ends it when the parent process is gone."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(0)

    threading.Thread(target=watch, name="forecast-parent-watch", daemon=True).start()


def _compute_in_worker(key: str, blob: bytes | None, scene: Scene) -> Forecast:
    """In the worker process: the forecast of ``scene`` under the proposer sent as ``key``."""
    if blob is not None:
        while len(_PROPOSERS) >= KEEP_PROPOSERS:  # swapped-out ensembles leave; the service resends on a miss
            _PROPOSERS.pop(next(iter(_PROPOSERS)))
        _PROPOSERS[key] = pickle.loads(blob)  # noqa: S301 - the service's own ensemble, from its own process
    if key not in _PROPOSERS:
        raise _NotSent(key)
    t0 = time.perf_counter()
    forecast = compute(scene, _PROPOSERS[key])
    return replace(forecast, compute_s=round(time.perf_counter() - t0, 3), pid=os.getpid())


@dataclass(frozen=True)
class Status:
    """Why a greenhouse has the forecast it has (or none)."""

    state: str
    """``ok``, ``waiting`` (no telemetry or no round yet) or ``off``."""
    why: str = ""


class ForecastWorker:
    """Rounds of forecasts for the greenhouses this replica decides, and what-ifs on request."""

    def __init__(self, controllers: dict[str, GreenhouseController], outlook: OutlookFeed,
                 limits: SafetyLimits, *, every_s: float, water_price_eur_m3: float, busy: Any = frozenset,
                 mine: Any = lambda gh: True) -> None:
        self.controllers = controllers
        self.outlook = outlook
        self.limits = limits
        self.every_s = float(every_s)
        self.water_price = float(water_price_eur_m3)
        self._busy = busy
        """Greenhouses in the middle of a decision (their state is not taken then)."""
        self._mine = mine
        """Whether this replica decides a greenhouse (another replica forecasts it)."""
        self.paused = False
        """A benchmark's switch: no forecast starts while set."""
        self.tracker = ForecastTracker()
        self.latest: dict[str, Forecast] = {}
        self.status: dict[str, Status] = {}
        self.rounds = 0
        self.computed = 0
        """Forecasts computed so far (what-ifs aside)."""
        self._pool: ProcessPoolExecutor | None = None
        self._sent: set[str] = set()
        self._lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None

    @property
    def enabled(self) -> bool:
        return self.every_s > 0

    # ---- the worker process -----------------------------------------------------------------
    def _submit(self, scene: Scene, proposer: Proposer, resend: bool = False) -> Future[Forecast]:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_worker_init)
                self._sent = set()
            key = f"{proposer.policy_version}:{id(proposer)}"
            blob = None if key in self._sent and not resend else pickle.dumps(proposer)
            self._sent.add(key)
            return self._pool.submit(_compute_in_worker, key, blob, scene)

    def forecast(self, scene: Scene, proposer: Proposer, timeout_s: float = WHAT_IF_TIMEOUT_S) -> Forecast:
        """The scene's forecast from the worker process (blocking: call it off the event loop). A dead
        worker process is replaced and asked once more."""
        for attempt in (1, 2):
            try:
                return self._submit(scene, proposer, resend=attempt == 2).result(timeout_s)
            except _NotSent:
                if attempt == 2:
                    raise
            except BrokenProcessPool:
                log.warning("forecast worker process died; starting another")
                self.close()
                if attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    # ---- rounds -----------------------------------------------------------------------------
    def scene(self, gh: str) -> tuple[Scene, Proposer] | None:
        """On the event loop: the greenhouse's scene if a forecast is due for it, its error tracking
        brought up to date either way (a few copies: one greenhouse at a time, between decisions)."""
        ctl = self.controllers.get(gh)
        if ctl is None or gh in self._busy() or not self._mine(gh):
            return None
        if ctl.last_ts is None:
            self.status[gh] = Status("waiting", "no telemetry yet")
            return None
        self.tracker.meter(gh, float(ctl.water_today_l.sum()))
        self.tracker.observe(gh, ctl.last_ts, ctl.estimator.state["theta"].copy())
        if not ctl.wants_policy:
            self.status[gh] = Status("off", "e-stop latched" if ctl.estop_latched else "manual mode: the "
                                     "policy does not decide")
            return None
        scene = scene_of(ctl, self.outlook.current, self.limits, water_price_eur_m3=self.water_price)
        return None if scene is None else (scene, ctl.proposer)

    async def round(self) -> None:
        """One forecast per decided greenhouse, one after another; one that fails is logged and the others
        go on."""
        for gh in list(self.controllers):
            if self.paused:
                break
            taken = self.scene(gh)
            if taken is None:
                continue
            try:
                forecast = await asyncio.to_thread(self.forecast, *taken)
            except Exception:  # noqa: BLE001 - a forecast is advice: the next round tries again
                log.exception("forecast of %s failed", gh)
                self.status[gh] = Status("waiting", "the last forecast failed; the next round retries")
                continue
            self.latest[gh] = forecast
            self.computed += 1
            self.tracker.add(forecast)
            self.status[gh] = Status("ok")
        self.rounds += 1

    async def run(self) -> None:
        """Rounds every ``every_s`` (the first within :data:`FIRST_ROUND_S`) until cancelled; never raises."""
        self.loop = asyncio.get_running_loop()
        try:
            # Not at once: a service that starts and stops again (tests, a failed start) spawns no worker.
            await asyncio.sleep(min(self.every_s, FIRST_ROUND_S))
            while True:
                if not self.paused:
                    try:
                        await self.round()
                    except Exception:  # noqa: BLE001 - the worker must outlive any one round
                        log.exception("forecast round failed")
                await asyncio.sleep(self.every_s)
        finally:
            self.close()

    # ---- what-ifs ---------------------------------------------------------------------------
    def what_if(self, gh: str, variant: Variant) -> Forecast:
        """The greenhouse's forecast beside ``variant`` (blocking, from an API thread): KeyError for an
        unknown greenhouse, LookupError without telemetry, ValueError while the policy does not decide."""
        if gh not in self.controllers:
            raise KeyError(gh)

        def take() -> tuple[Scene | None, Proposer, bool]:
            ctl = self.controllers[gh]
            scene = scene_of(ctl, self.outlook.current, self.limits, water_price_eur_m3=self.water_price)
            return scene, ctl.proposer, ctl.wants_policy

        scene, proposer, deciding = call_on_loop(self.loop, take) if self.loop is not None else take()
        if scene is None:
            raise LookupError(f"{gh} has sent no telemetry yet")
        if not deciding:
            raise ValueError(f"the policy does not decide {gh} now (manual mode or e-stop)")
        return self.forecast(scene.with_variants(scene.variants[0], variant), proposer)

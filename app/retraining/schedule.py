"""The demo's retraining schedule: ``greentwin retrain`` as a child process, now and then.

Production schedules the same command with a systemd timer or a compose service; the demo runs
it itself (first shortly after start, with a tiny budget, so the whole path from the decision
log to a hot-swapped ensemble can be watched), each run's JSON lines going to the demo's log.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

log = logging.getLogger(__name__)

DEMO_BUDGET: tuple[str, ...] = ("--days", "14", "--iterations", "1", "--envs", "16", "--steps", "32",
                                "--scenarios", "2", "--eval-days", "1", "--replay-days", "1", "--instances",
                                "2")
"""A run of a minute or two on a laptop: enough to go through every stage, not to learn much."""


class RetrainSchedule:
    """Runs ``greentwin retrain`` after ``first_s``, then every ``every_s``; one run at a time."""

    def __init__(self, root: Path, first_s: float, every_s: float, budget: Sequence[str] = DEMO_BUDGET,
                 env: dict[str, str] | None = None) -> None:
        self.root = root
        self.first_s = first_s
        self.every_s = every_s
        self.budget = tuple(budget)
        self.env = env
        self.codes: list[int] = []
        self._proc: asyncio.subprocess.Process | None = None

    async def run(self) -> None:
        await asyncio.sleep(self.first_s)
        while True:
            try:
                await self.once()
            except Exception:  # noqa: BLE001 - a failed run is logged; the next one is scheduled anyway
                log.exception("scheduled retraining could not run")
            await asyncio.sleep(self.every_s)

    async def once(self) -> int:
        """One run to its end; its exit code (0 promoted, 1 error, 3 refused, 4 locked)."""
        cmd = [sys.executable, "-m", "app.cli", "retrain", "--dir", str(self.root), *self.budget]
        log.info("scheduled retraining: %s", " ".join(cmd[2:]))
        self._proc = await asyncio.create_subprocess_exec(
            *cmd, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            env={**os.environ, **(self.env or {})})
        assert self._proc.stdout is not None
        async for raw in self._proc.stdout:
            line = raw.decode(errors="replace").strip()
            with contextlib.suppress(ValueError):
                event = json.loads(line)
                if event.get("event") in ("stage", "end", "abandoned"):
                    # what happened first (event, stage, state), then its details
                    keys = [k for k in ("event", "run", "stage", "state") if k in event]
                    keys += sorted(k for k in event if k not in keys and k != "ts")
                    log.info("retrain %s", " ".join(f"{k}={event[k]}" for k in keys))
                    continue
            if line:
                log.debug("retrain: %s", line)
        code = await self._proc.wait()
        self._proc = None
        self.codes.append(code)
        log.warning("scheduled retraining finished: exit %d (%s)", code,
                    {0: "promoted", 1: "error", 3: "refused by the gate",
                     4: "another run holds the lock"}.get(code, "?"))
        return code

    def stop(self) -> None:
        """Stop a run in progress (it resumes at its unfinished stage next time)."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()

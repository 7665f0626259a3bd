"""Hot-swap: the service follows the policy registry's promoted version without a restart.

Every ``GREENTWIN_POLICY_POLL_S`` the watcher reads the promoted version; when it changed, it
loads that ensemble for every zone count the service controls (off the event loop), then, on the
loop between two batches, the fleet gives every controller the new proposer and journals a
``policy_swap`` record per greenhouse it holds (:mod:`app.policy_swap`), and the proposers in force
(:mod:`app.proposers`) and the writer's configuration follow. A version that cannot be loaded leaves
every greenhouse on the ensemble it has and raises an alarm per greenhouse, once per version; the
service never stops over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from app import registry
from app.policy_swap import PolicySwap
from app.proposers import ProposerCache

log = logging.getLogger(__name__)


class Fleet(Protocol):
    """The greenhouses a swap concerns (:class:`app.policy_swap.FleetSwap` in the service)."""

    def zone_counts(self) -> Iterable[int]:
        """The zone counts a new ensemble must be loaded for."""
        ...

    def alarm_all(self, kind: str) -> None:
        """One alarm per greenhouse."""
        ...

    async def apply(self, swap: PolicySwap) -> int:
        """Hand every controller its new proposer between two batches and journal the switch;
        returns how many greenhouses journaled one."""
        ...


class PolicyWatcher:
    """Polls the registry and swaps the ensembles in force."""

    def __init__(self, sessions: sessionmaker[Session], configured: Path, proposers: ProposerCache,
                 fleet: Fleet, *, poll_s: float, on_swapped: Callable[[Path], None] | None = None) -> None:
        self.sessions = sessions
        self.configured = Path(configured)
        """The ensemble the settings name: the registry adopts it when empty, and it serves when
        the promoted one cannot be loaded at start."""
        self.proposers = proposers
        self.fleet = fleet
        self.poll_s = poll_s
        self.on_swapped = on_swapped
        """Told the new directory after each swap (the writer's configuration: a restarted writer
        explains with the ensemble in force)."""
        self.version: str | None = None
        """The registry version the service runs (None before the first successful read)."""
        self.failed: set[str] = set()
        """Versions that could not be loaded: alarmed once, not retried every poll."""
        self.swaps = 0

    def adopt(self) -> registry.VersionInfo | None:
        """At start: the promoted version (the registry adopts the configured ensemble when empty);
        None when the registry cannot be read, and the configured ensemble serves meanwhile."""
        try:
            info = registry.ensure_seeded(self.sessions, self.configured)
        except Exception as exc:  # noqa: BLE001 - an old schema or a database hiccup must not stop the start
            log.warning("policy registry unreadable at start (%s): serving %s", exc.__class__.__name__,
                        self.configured)
            return None
        if info is None:
            return None
        self.version = info.version
        if (Path(info.directory) / "ensemble.json").exists():
            self.proposers.point_at(Path(info.directory))
        else:
            log.error("promoted policy %s has no ensemble at %s: serving %s until the next promotion",
                      info.version, info.directory, self.proposers.directory)
        return info

    def fell_back(self, directory: Path, exc: Exception) -> None:
        """The promoted ensemble at ``directory`` failed to load at start and the configured one
        serves: that version is not retried until another is promoted."""
        log.error("promoted policy %s at %s not loadable (%s: %s): serving %s", self.version, directory,
                  exc.__class__.__name__, exc, self.configured)
        if self.version is not None:
            self.failed.add(self.version)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            with contextlib.suppress(Exception):
                await self.check()

    async def check(self) -> bool:
        """One poll: True when the service swapped to a newly promoted version."""
        try:
            info = await asyncio.to_thread(registry.promoted, self.sessions)
        except Exception as exc:  # noqa: BLE001 - the next poll tries again
            log.warning("policy registry unreadable (%s); keeping %s", exc.__class__.__name__, self.version)
            return False
        if info is None or info.version == self.version or info.version in self.failed:
            return False
        directory = Path(info.directory)
        zones = sorted(self.fleet.zone_counts())
        try:
            fresh = await asyncio.to_thread(self.proposers.load, directory, zones)
            wrong = [p.policy_version for p in fresh.values() if p.policy_version != info.version]
            if wrong:
                raise ValueError(f"{directory} holds {wrong[0]}, the registry says {info.version}")
        except Exception as exc:  # noqa: BLE001 - the old ensemble keeps deciding
            self.failed.add(info.version)
            log.error("policy %s promoted but not loadable (%s: %s): keeping %s", info.version,
                      exc.__class__.__name__, exc, self.version)
            self.fleet.alarm_all(f"policy_load_failed:{info.version}")
            return False
        before = self.version
        journaled = await self.fleet.apply(PolicySwap(info, directory, fresh, before))
        # No await from here on: the controllers, the proposers in force and the writer switch together.
        self.proposers.swap(directory, fresh)
        if self.on_swapped is not None:
            self.on_swapped(directory)
        self.version = info.version
        self.swaps += 1
        log.warning("policy swapped %s -> %s on %d greenhouses (promoted by %s)", before, info.version,
                    journaled, info.promoted_by)
        return True

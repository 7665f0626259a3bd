"""Hot-swap: the service follows the policy registry's promoted version without a restart.

Every ``GREENTWIN_POLICY_POLL_S`` the watcher reads the promoted version; when it changed, it
loads that ensemble for every zone count the service controls (off the event loop), then, on the
loop between two batches, gives every controller the new proposer and journals a ``policy_swap``
record per greenhouse it holds (from and to version, who promoted it), sealed in that greenhouse's
chain by the writer, which explains later decisions with the new ensemble. A version that cannot be
loaded leaves every greenhouse on the ensemble it has and raises an alarm per greenhouse, once
per version; the service never stops over it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from app import registry
from app.writer import Job
from control import Proposer, load_proposer

if TYPE_CHECKING:
    from app.runtime import Runtime

log = logging.getLogger(__name__)


class PolicyWatcher:
    """Polls the registry for one runtime and swaps its ensembles."""

    def __init__(self, runtime: Runtime, poll_s: float,
                 loader: Callable[[Path, int], Proposer] = load_proposer) -> None:
        self.runtime = runtime
        self.poll_s = poll_s
        self.loader = loader
        self.version: str | None = None
        """The registry version the service runs (None before the first successful read)."""
        self.failed: set[str] = set()
        """Versions that could not be loaded: alarmed once, not retried every poll."""
        self.swaps = 0

    def adopt(self) -> registry.VersionInfo | None:
        """At start: the promoted version (the registry adopts the configured ensemble when empty);
        None when the registry cannot be read, and the configured ensemble serves meanwhile."""
        rt = self.runtime
        try:
            info = registry.ensure_seeded(rt.sessions, Path(rt.settings.policy_dir))
        except Exception as exc:  # noqa: BLE001 - an old schema or a database hiccup must not stop the start
            log.warning("policy registry unreadable at start (%s): serving %s", exc.__class__.__name__,
                        rt.settings.policy_dir)
            return None
        if info is None:
            return None
        self.version = info.version
        if (Path(info.directory) / "ensemble.json").exists():
            rt.policy_dir = Path(info.directory)
        else:
            log.error("promoted policy %s has no ensemble at %s: serving %s until the next promotion",
                      info.version, info.directory, rt.policy_dir)
        return info

    def load_at_start(self, zones: int) -> Proposer:
        """The ensemble in force for ``zones``; a promoted one that cannot be loaded gives way to the
        configured one (and is not retried until another version is promoted)."""
        rt = self.runtime
        try:
            return self.loader(rt.policy_dir, zones)
        except Exception as exc:
            configured = Path(rt.settings.policy_dir)
            if rt.policy_dir == configured:
                raise
            log.error("promoted policy %s at %s not loadable (%s: %s): serving %s", self.version, rt.policy_dir,
                      exc.__class__.__name__, exc, configured)
            if self.version is not None:
                self.failed.add(self.version)
            rt.policy_dir = configured
            return self.loader(configured, zones)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.poll_s)
            with contextlib.suppress(Exception):
                await self.check()

    async def check(self) -> bool:
        """One poll: True when the service swapped to a newly promoted version."""
        rt = self.runtime
        try:
            info = await asyncio.to_thread(registry.promoted, rt.sessions)
        except Exception as exc:  # noqa: BLE001 - the next poll tries again
            log.warning("policy registry unreadable (%s); keeping %s", exc.__class__.__name__, self.version)
            return False
        if info is None or info.version == self.version or info.version in self.failed:
            return False
        directory = Path(info.directory)
        zones = sorted({ctl.z for ctl in rt.controllers.values()})
        try:
            fresh = await asyncio.to_thread(lambda: {z: self.loader(directory, z) for z in zones})
            wrong = [p.policy_version for p in fresh.values() if p.policy_version != info.version]
            if wrong:
                raise ValueError(f"{directory} holds {wrong[0]}, the registry says {info.version}")
        except Exception as exc:  # noqa: BLE001 - the old ensemble keeps deciding
            self.failed.add(info.version)
            log.error("policy %s promoted but not loadable (%s: %s): keeping %s", info.version,
                      exc.__class__.__name__, exc, self.version)
            for gh in sorted(rt.controllers):
                rt.dispatch.alarm(gh, f"policy_load_failed:{info.version}")
            return False
        while rt.intake.in_flight:  # a batch proposes with one ensemble and finishes with the same
            await asyncio.sleep(0.005)
        self._swap(info, directory, fresh)
        return True

    def _swap(self, info: registry.VersionInfo, directory: Path, fresh: dict[int, Proposer]) -> None:
        """On the event loop, between batches: every controller at once, each switch journaled."""
        rt = self.runtime
        before = self.version
        now = datetime.now(UTC)
        entries = []
        for gh, ctl in sorted(rt.controllers.items()):
            old = ctl.proposer.policy_version
            ctl.proposer = fresh[ctl.z]
            if not rt.dispatch.may_command(gh):  # its lease holder seals the switch in its chain
                continue
            payload = {"from_version": old, "to_version": info.version, "registry_from": before,
                       "directory": str(directory), "promoted_by": info.promoted_by, "note": info.note}
            entries.append(Job.policy_swap(gh, now, payload, f"registry:{info.promoted_by or 'unknown'}").entry())
        rt.replace_proposers(directory, fresh)
        if entries:
            rt.writer.appended(rt.journal.append(entries))
        if rt.writer.cfg is not None:  # a restarted writer explains with the ensemble in force
            rt.writer.cfg = dataclasses.replace(rt.writer.cfg, policy_dir=directory)
        self.version = info.version
        self.swaps += 1
        log.warning("policy swapped %s -> %s on %d greenhouses (promoted by %s)", before, info.version,
                    len(entries), info.promoted_by)

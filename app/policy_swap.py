"""A promoted ensemble handed to every greenhouse between two batches, each switch journaled.

The policy watcher (:mod:`app.policy_watch`) decides when to swap and loads the new ensemble; this
is the fleet's side of it: which zone counts to load, whom to alarm when loading fails, and the
swap itself, on the event loop while no batch is in flight (a batch proposes with one ensemble and
finishes with the same). Each greenhouse this replica commands journals a ``policy_swap`` record,
sealed in its chain by the writer, which explains the decisions after it with the new ensemble.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from app import registry
from app.dispatch import Dispatcher
from app.intake import Intake
from app.journal import DecisionJournal
from app.writer import Job, WriterProcess
from control import GreenhouseController, Proposer


@dataclass(frozen=True)
class PolicySwap:
    """A promoted version, loaded for every zone count the service controls."""

    info: registry.VersionInfo
    directory: Path
    proposers: dict[int, Proposer]
    registry_from: str | None
    """The registry version the service ran until now (None when it never read one)."""


class FleetSwap:
    """The greenhouses of one service as the policy watcher sees them."""

    def __init__(self, controllers: dict[str, GreenhouseController], intake: Intake, dispatch: Dispatcher,
                 journal: DecisionJournal, writer: WriterProcess) -> None:
        self.controllers = controllers
        self.intake = intake
        self.dispatch = dispatch
        self.journal = journal
        self.writer = writer

    def zone_counts(self) -> list[int]:
        """The zone counts a new ensemble must be loaded for."""
        return sorted({ctl.z for ctl in self.controllers.values()})

    def alarm_all(self, kind: str) -> None:
        """One alarm per greenhouse (a policy that cannot be loaded concerns every one of them)."""
        for gh in sorted(self.controllers):
            self.dispatch.alarm(gh, kind)

    async def apply(self, swap: PolicySwap) -> int:
        """Between two batches: every controller at once, each switch journaled; returns how many
        greenhouses journaled one (another replica's lease holder seals the others')."""
        while self.intake.in_flight:
            await asyncio.sleep(0.005)
        info, now = swap.info, datetime.now(UTC)
        entries = []
        for gh, ctl in sorted(self.controllers.items()):
            old = ctl.proposer.policy_version
            ctl.proposer = swap.proposers[ctl.z]
            if not self.dispatch.may_command(gh):
                continue
            payload = {"from_version": old, "to_version": info.version, "registry_from": swap.registry_from,
                       "directory": str(swap.directory), "promoted_by": info.promoted_by, "note": info.note}
            entries.append(Job.policy_swap(gh, now, payload,
                                           f"registry:{info.promoted_by or 'unknown'}").entry())
        if entries:
            self.writer.appended(self.journal.append(entries))
        return len(entries)

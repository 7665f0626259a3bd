"""A running service follows the greenhouse table: new registrations and settings changes, no restart.

Every ``GREENTWIN_SETTINGS_POLL_S`` the watcher reads each greenhouse's settings version. A greenhouse
it has no controller for is built off the event loop (settings, proposer, snapshot) and added on the
loop; the next lease round (:mod:`app.leases`) takes its lease, and from then on it decides, on
whichever replica the leases give it to. A newer settings version is read and staged on the
greenhouse's controller, which takes it before its next decision begins, never in the middle of one
(:meth:`control.GreenhouseController.stage_setup`). The replica that serves a change or a
registration does both at once (:meth:`SettingsWatch.adopt` and :meth:`SettingsWatch.install`); the
others within one poll.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from app.fleet import build_controller, continue_after_records
from app.greenhouse_settings import read_setups, settings_versions
from app.loop_calls import call_on_loop
from control.setup import GreenhouseSetup, SetupChange

if TYPE_CHECKING:
    from app.runtime import Runtime
    from control import GreenhouseController

log = logging.getLogger(__name__)


class SettingsWatch:
    """Keeps one runtime's controllers on the registered greenhouses and their settings."""

    def __init__(self, runtime: Runtime, poll_s: float) -> None:
        self.runtime = runtime
        self.poll_s = poll_s

    async def run(self) -> None:
        """Polls until cancelled; a failed poll (database away) is tried again at the next."""
        while True:
            await asyncio.sleep(self.poll_s)
            try:
                await asyncio.to_thread(self.check)
            except Exception as exc:  # noqa: BLE001 - the service goes on with the settings it has
                log.warning("greenhouse settings poll failed (%s: %s)", exc.__class__.__name__, exc)

    def check(self) -> list[str]:
        """One poll (off the loop): adopt new greenhouses, stage newer settings; the greenhouses touched."""
        rt = self.runtime
        versions = settings_versions(rt.sessions)
        known = dict(rt.controllers)
        new = sorted(gh for gh in versions if gh not in known)
        stale = sorted(gh for gh, v in versions.items() if gh in known and v > _version(known[gh]))
        if new:
            self.adopt(new)
        if stale:
            with rt.sessions() as s:
                setups = {gh: setup for gh, setup in read_setups(s).items() if gh in stale}
            for gh, setup in setups.items():
                self.install(gh, setup)
        return new + stale

    def adopt(self, ghs: list[str]) -> list[str]:
        """Controllers for newly registered ``ghs``, built here (off the loop: an ensemble may load) and
        added on the loop; returns those added. Their leases come with the keeper's next round."""
        rt = self.runtime
        with rt.sessions() as s:
            setups = {gh: setup for gh, setup in read_setups(s).items()
                      if gh in ghs and gh not in rt.controllers}
        built = {gh: self._build(gh, setup) for gh, setup in setups.items()}
        continue_after_records(built, rt.recorder.last_seq)

        def add() -> list[str]:
            added = [gh for gh in sorted(built) if gh not in rt.controllers]
            for gh in added:
                rt.controllers[gh] = built[gh]
            return added

        added = call_on_loop(rt.loop, add)
        if added:
            log.warning("greenhouses registered while running, now controlled here once leased: %s",
                        ", ".join(added))
        return added

    def install(self, gh: str, setup: GreenhouseSetup, change: SetupChange | None = None) -> bool:
        """Stage ``setup`` on ``gh``'s controller (on the loop); in force at once when no decision of ``gh``
        is under way, else before its next one. False when this replica has no controller for ``gh``."""
        rt = self.runtime

        def stage() -> bool:
            ctl = rt.controllers.get(gh)
            if ctl is None:
                return False
            ctl.stage_setup(setup, rt.limits, change)
            if gh not in rt.intake.in_flight:
                ctl.take_staged_setup()
            return True

        return call_on_loop(rt.loop, stage)

    def _build(self, gh: str, setup: GreenhouseSetup) -> GreenhouseController:
        rt = self.runtime
        ctl = build_controller(gh, setup, rt.settings, rt.limits, rt.proposers.get(len(setup.zones)),
                               rt.snapshots)
        ctl.obs_builder.tariff = rt.outlook.tariff
        return ctl


def _version(ctl: GreenhouseController) -> int:
    staged = ctl.staged_setup
    return max(ctl.setup.version, staged[0].version if staged is not None else 0)

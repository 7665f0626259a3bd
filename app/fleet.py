"""The registered greenhouses as controllers: built from the database, restored from their snapshots.

A controller restored from a snapshot older than the greenhouse's records continues after them, so a
crash between two snapshots never reuses a decision's sequence number.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from app.core.config import Settings
from app.greenhouse_settings import read_setups
from app.snapshots import SnapshotStore
from control import GreenhouseController, Proposer
from control.setup import GreenhouseSetup
from safety.limits import SafetyLimits

log = logging.getLogger(__name__)


def build_controller(gh: str, setup: GreenhouseSetup, settings: Settings, limits: SafetyLimits,
                     proposer: Proposer, snapshots: SnapshotStore) -> GreenhouseController:
    """One greenhouse's controller under its settings, restored from its last snapshot."""
    ctl = GreenhouseController(gh, list(setup.zones), proposer, limits,
                               command_ttl_s=settings.command_ttl_s, max_age_s=settings.max_age_s,
                               max_future_s=settings.max_clock_skew_s, site_timezone=settings.site_timezone,
                               disagreement_threshold=1.0 - settings.low_confidence_threshold)
    ctl.apply_setup(setup, limits)
    ctl.obs_builder.fruit_price_eur_kg = settings.fruit_price_eur_kg  # as the report prices it
    snap = snapshots.load(gh)
    if snap is not None:
        ctl.restore(snap)
        log.info("restored controller %s at seq %d (mode %s)", gh, ctl.seq, ctl.mode)
    return ctl


def build_controllers(sessions: sessionmaker[Session], settings: Settings, limits: SafetyLimits,
                      proposer_for: Callable[[int], Proposer], snapshots: SnapshotStore
                      ) -> dict[str, GreenhouseController]:
    """One controller per registered greenhouse, with its settings and its last snapshot."""
    with sessions() as s:
        setups = read_setups(s)
    return {gh: build_controller(gh, setup, settings, limits, proposer_for(len(setup.zones)), snapshots)
            for gh, setup in setups.items()}


def continue_after_records(controllers: dict[str, GreenhouseController],
                           last_seq: Callable[[str], int]) -> None:
    """A crash between two snapshots: continue after the records, never reuse a seq. Each record after
    the last snapshot is a decision, which also used one command seq."""
    for gh, ctl in controllers.items():
        recorded = last_seq(gh)
        if recorded > ctl.seq:
            log.warning("controller %s: snapshot at seq %d, records up to %d: continuing after them",
                        gh, ctl.seq, recorded)
            ctl.continue_after(recorded)

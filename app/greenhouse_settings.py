"""Greenhouse and zone settings in the database: read as values, changed together with their sealed record.

A change (:func:`change_settings`) is checked against the safety limits (:mod:`app.settings_check`),
written, given the next ``settings_version`` and sealed as ``greenhouse_settings`` in the ``_access``
chain (who, why, what changed and the settings as they now stand) in one transaction, or not at all,
as account changes and registrations are (:mod:`app.access_seal`). Runtimes find the new version
(:mod:`app.settings_watch`) and swap it in between two decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, select, update
from sqlalchemy.orm import Session, sessionmaker

from app.access_seal import SealChange, commit_sealed
from app.models import Greenhouse, Zone
from app.settings_check import check_setup, edited
from control.records import ZoneSetup
from control.setup import GreenhouseSetup, SetupChange, setup_record
from safety import SafetyLimits

SETTINGS_KIND = "greenhouse_settings"
"""The access chain's record of a settings change."""


@dataclass(frozen=True)
class SettingsEdit:
    """What a request asks to change: greenhouse fields and, per zone index, zone fields (only those
    given)."""

    reason: str
    greenhouse: dict[str, Any] = field(default_factory=dict)
    zones: dict[int, dict[str, Any]] = field(default_factory=dict)


class UnknownGreenhouse(LookupError):
    """No greenhouse of that id is registered."""


def read_setups(conn: Connection | Session, gh: str | None = None) -> dict[str, GreenhouseSetup]:
    """Every registered greenhouse's settings (or only ``gh``'s), read on the caller's connection."""
    ghq = select(Greenhouse.id, Greenhouse.name, Greenhouse.lamps_ours, Greenhouse.lamp_hours_per_day,
                 Greenhouse.settings_version)
    zq = select(Zone.greenhouse_id, Zone.soil_type, Zone.target_low_vwc, Zone.target_high_vwc,
                Zone.saturation_vwc, Zone.daily_water_cap_l,
                Zone.name).order_by(Zone.greenhouse_id, Zone.index)
    if gh is not None:
        ghq, zq = ghq.where(Greenhouse.id == gh), zq.where(Zone.greenhouse_id == gh)
    zones: dict[str, list[ZoneSetup]] = {}
    for gid, soil, low, high, sat, cap, name in conn.execute(zq):
        zones.setdefault(gid, []).append(ZoneSetup(soil, float(low), float(high), float(sat), float(cap),
                                                   name=name))
    return {gid: GreenhouseSetup(name=name, zones=tuple(zones.get(gid, [])), lamps_ours=bool(ours),
                                 lamp_hours_per_day=None if hours is None else float(hours),
                                 version=int(version))
            for gid, name, ours, hours, version in conn.execute(ghq)}


def settings_versions(sessions: sessionmaker[Session]) -> dict[str, int]:
    """Each registered greenhouse's settings version: what a runtime polls (one small read)."""
    with sessions() as s:
        return {gh: int(v) for gh, v in s.execute(select(Greenhouse.id, Greenhouse.settings_version))}


def change_settings(sessions: sessionmaker[Session], gh: str, edit: SettingsEdit, site: SafetyLimits,
                    actor: str, seal: SealChange | None) -> tuple[GreenhouseSetup, SetupChange | None]:
    """Apply ``edit`` to ``gh``'s settings; the new settings and the change (None: nothing differed, so
    nothing was written or sealed). Raises :class:`UnknownGreenhouse`,
    :class:`app.settings_check.SettingsRefused` (nothing changed) and :class:`app.access_seal.ChangeNotSealed`
    (rolled back)."""
    with sessions() as s:
        # Locks the greenhouse's row (PostgreSQL) so two edits cannot both build on the same version.
        if s.scalar(select(Greenhouse.id).where(Greenhouse.id == gh).with_for_update()) is None:
            raise UnknownGreenhouse(gh)
        before = read_setups(s, gh)[gh]
        after, changed = edited(before, edit.greenhouse, edit.zones)
        check_setup(after, site, before)
        if not changed:
            return before, None
        after = GreenhouseSetup(after.name, after.zones, after.lamps_ours, after.lamp_hours_per_day,
                                before.version + 1)
        _write(s, gh, before, after)
        change = SetupChange(after.version, actor, edit.reason, changed)
        commit_sealed(s, seal, {"greenhouse_id": gh, "reason": edit.reason, "changed": changed,
                                "settings": setup_record(after)})
        return after, change


def _write(s: Session, gh: str, before: GreenhouseSetup, after: GreenhouseSetup) -> None:
    """The rows of ``after``; the version guard makes a lost race an error, never a silent overwrite."""
    done = s.execute(update(Greenhouse)
                     .where(Greenhouse.id == gh, Greenhouse.settings_version == before.version)
                     .values(name=after.name, lamps_ours=after.lamps_ours,
                             lamp_hours_per_day=after.lamp_hours_per_day, settings_version=after.version))
    if done.rowcount != 1:  # type: ignore[attr-defined]
        raise RuntimeError(f"settings of {gh} changed meanwhile; retry")
    for i, (old, new) in enumerate(zip(before.zones, after.zones, strict=True)):
        if old != new:
            s.execute(update(Zone).where(Zone.greenhouse_id == gh, Zone.index == i).values(
                soil_type=new.soil_type, target_low_vwc=new.target_low, target_high_vwc=new.target_high,
                saturation_vwc=new.saturation, daily_water_cap_l=new.daily_water_cap_l, name=new.name))

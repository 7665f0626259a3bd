"""Does the ``_access`` chain account for who may do what? The tables' other witness, for ``audit verify``.

A role change committed without its record verifies as "nothing wrong": the chain is genuine, only
silent. So the chain's account and registration records are replayed (``user_add``/``user_added``
with roles, ``user_roles`` to roles, ``user_disable``/``user_disabled``, ``greenhouse_register``,
``greenhouse_settings``, and an ``access_baseline``, which states every account and greenhouse as they
stood) and the result compared with the rows: every account and greenhouse must have been sealed into
being, each account's roles and disabled state must be what its last sealed record left, each
greenhouse's settings (names, bands, caps, soils, lamps, version) what its last sealed registration or
settings change left, and no sealed account may be gone from the table. Every such change commits in one
transaction with its record (:mod:`app.access_seal`), so tables and chain read as of one moment agree exactly
in a healthy trail: there is no sealing lag to wait out.

Not checked: the settings of a greenhouse whose registration was sealed before registrations carried
its settings and that was never edited since (its settings version is still 1; a higher one must have
been sealed), password resets (the row keeps nothing a record could be compared with; ``token_epoch``
moves at every logout too) and logins. After a purge, rows older than the oldest remaining record are
not asked for a creation record, and an account whose records were purged is compared only in what the
remaining ones say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, select

from app.audit_rows import as_datetime, aware
from app.audit_sink import ACCESS_CHAIN
from app.greenhouse_settings import SETTINGS_KIND, read_setups
from app.models import Greenhouse, User, UserRole
from audit import AuditEntry, SealedRecord
from audit.store import AuditStore, GreenhouseVerifyResult
from control.setup import setup_record

ADD_KINDS = frozenset({"user_add", "user_added"})
"""An account made (the API's kind, the command line's and the demo's)."""
ROLE_KINDS = frozenset({"user_roles"})
DISABLE_KINDS = frozenset({"user_disable", "user_disabled"})
REGISTER_KINDS = frozenset({"greenhouse_register"})
SETTINGS_KINDS = frozenset({SETTINGS_KIND})
BASELINE_KIND = "access_baseline"
"""Every account and greenhouse as they stood (``greentwin audit baseline-access``): the state from then
on."""
CHANGE_KINDS = ADD_KINDS | ROLE_KINDS | DISABLE_KINDS | REGISTER_KINDS | SETTINGS_KINDS | {BASELINE_KIND}
BASELINE_HINT = ("made before accounts were sealed? `greentwin audit baseline-access` seals every account "
                 "and greenhouse as they stand, once")
SHOWN = 10
"""Names listed per finding; the counts say how many in all."""


@dataclass
class SealedAccount:
    """An account as the chain's records leave it (None: no remaining record says)."""

    created: bool = False
    roles: list[str] | None = None
    disabled: bool | None = None


@dataclass
class SealedAccess:
    """The access chain replayed, record by record (feed it each verified entry in seq order)."""

    anchor_ts: str | None = None
    """When the chain's oldest records were purged behind an anchor (None: never)."""
    accounts: dict[str, SealedAccount] = field(default_factory=dict)
    greenhouses: set[str] = field(default_factory=set)
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each greenhouse's settings as its last record that stated them left them."""
    first_ts: str | None = None
    sealing_since: str | None = None
    """When the first remaining record of an account or registration was sealed."""
    baselined: bool = False
    """An ``access_baseline`` is among the records: what was made before sealing is accounted for."""

    def add(self, entry: AuditEntry) -> None:
        self.first_ts = self.first_ts or entry.ts
        if entry.kind in CHANGE_KINDS:
            self.sealing_since = self.sealing_since or entry.ts
        payload = entry.payload
        if entry.kind == BASELINE_KIND:
            self._baseline(payload)
            return
        if entry.kind in REGISTER_KINDS | SETTINGS_KINDS:
            gh = str(payload.get("greenhouse_id"))
            if entry.kind in REGISTER_KINDS:
                self.greenhouses.add(gh)
                self.settings.pop(gh, None)  # an id registered again starts afresh
            if isinstance(payload.get("settings"), dict):
                self.settings[gh] = payload["settings"]
            return
        name = payload.get("username")
        if not isinstance(name, str):
            return
        if entry.kind in ADD_KINDS:
            self.accounts[name] = SealedAccount(True, sorted(payload.get("roles") or []), False)
        elif entry.kind in ROLE_KINDS:
            self.accounts.setdefault(name, SealedAccount()).roles = sorted(payload.get("to_roles") or [])
        elif entry.kind in DISABLE_KINDS:
            self.accounts.setdefault(name, SealedAccount()).disabled = True

    def on_entry(self, _record: SealedRecord, entry: AuditEntry) -> None:
        """:meth:`add`, as the ``on_entry`` of :meth:`AuditStore.verify_in` (each record that passed)."""
        self.add(entry)

    def _baseline(self, payload: dict[str, object]) -> None:
        """The state the baseline states replaces what the records before it left (a sealed account it
        does not list was gone when it was sealed, and is not asked for again)."""
        accounts = payload.get("accounts")
        greenhouses = payload.get("greenhouses")
        self.accounts = {a["username"]: SealedAccount(True, sorted(a.get("roles") or []),
                                                      bool(a.get("disabled")))
                         for a in (accounts if isinstance(accounts, list) else [])
                         if isinstance(a, dict) and isinstance(a.get("username"), str)}
        self.greenhouses = {str(gh) for gh in (greenhouses if isinstance(greenhouses, list) else [])}
        settings = payload.get("settings")
        self.settings = {str(gh): s for gh, s in settings.items() if isinstance(s, dict)} \
            if isinstance(settings, dict) else {}
        self.baselined = True

    @property
    def since(self) -> datetime | None:
        """Rows older than this are not asked for a creation record (their records were purged)."""
        if self.anchor_ts is None:
            return None
        return as_datetime(self.first_ts or self.anchor_ts)

    def made_before_sealing(self, created: datetime | None) -> bool:
        """Whether a row never sealed may be older than sealing itself (the baseline's case), rather than
        made behind the trail's back on a site that seals: no baseline yet, and no account or registration
        record older than the row."""
        if self.baselined:
            return False
        return self.sealing_since is None or created is None or \
            created < as_datetime(self.sealing_since)


@dataclass(frozen=True)
class StoredAccount:
    username: str
    roles: list[str]
    disabled: bool
    created_at: datetime | None


@dataclass(frozen=True)
class AccessRows:
    """What the tables say about who may do what."""

    accounts: list[StoredAccount]
    greenhouses: dict[str, datetime | None]
    settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each greenhouse's settings as :func:`control.setup.setup_record` states them."""


def read_access_rows(conn: Connection) -> AccessRows:
    """Accounts with their roles and registered greenhouses, read on ``conn`` (a caller's snapshot)."""
    roles: dict[int, list[str]] = {}
    for user_id, role in conn.execute(select(UserRole.user_id, UserRole.role).order_by(UserRole.role)):
        roles.setdefault(user_id, []).append(role)
    accounts = [StoredAccount(name, roles.get(uid, []), disabled_at is not None, aware(created))
                for uid, name, disabled_at, created in conn.execute(
                    select(User.id, User.username, User.disabled_at, User.created_at)
                    .order_by(User.username))]
    greenhouses = {gh: aware(created)
                   for gh, created in conn.execute(select(Greenhouse.id, Greenhouse.created_at))}
    settings = {gh: setup_record(setup) for gh, setup in read_setups(conn).items()}
    return AccessRows(accounts, greenhouses, settings)


@dataclass
class AccessCoverage:
    """What the tables hold about access that the chain does not account for."""

    accounts: int = 0
    greenhouses: int = 0
    unsealed_accounts: list[str] = field(default_factory=list)
    """Accounts no remaining record made."""
    roles_differ: list[str] = field(default_factory=list)
    """``name: sealed [..], stored [..]``."""
    disabled_differ: list[str] = field(default_factory=list)
    vanished_accounts: list[str] = field(default_factory=list)
    """Made by a sealed record, gone from the table (no command deletes an account)."""
    unsealed_greenhouses: list[str] = field(default_factory=list)
    settings_differ: list[str] = field(default_factory=list)
    """``gh: the first field other than sealed`` (or a version no record sealed)."""
    before_sealing: bool = False
    """Something never sealed may have been made before sealing was (``audit baseline-access`` is the
    answer)."""
    broken_after: int | None = None
    """The chain fails after this seq: the tables were not compared with it."""

    @property
    def ok(self) -> bool:
        return self.broken_after is None and not (
            self.unsealed_accounts or self.roles_differ or self.disabled_differ or self.vanished_accounts
            or self.unsealed_greenhouses or self.settings_differ)

    @property
    def empty(self) -> bool:
        """Nothing to say: no accounts, no greenhouses, and nothing sealed about any."""
        return self.ok and not (self.accounts or self.greenhouses)

    def describe(self) -> str:
        """A line per finding (``MISSING``: never sealed, ``DIFFERS``: other than sealed), or the ``ok``
        line."""
        if self.broken_after is not None:
            return (f"FAIL {ACCESS_CHAIN}: accounts and registrations not compared with the trail past seq "
                    f"{self.broken_after}, where its chain fails")
        if self.ok:
            return (f"ok   {ACCESS_CHAIN}: every account and registration is sealed as it stands "
                    f"({self.accounts} accounts, {self.greenhouses} greenhouses)")
        lines = []
        if missing := self.missing():
            hint = f" ({BASELINE_HINT})" if self.before_sealing else ""
            lines.append(f"MISSING {ACCESS_CHAIN}: " + "; ".join(missing) + hint)
        if differs := self.differs():
            lines.append(f"DIFFERS {ACCESS_CHAIN}: " + "; ".join(differs))
        return "\n".join(lines)

    def missing(self) -> list[str]:
        """What exists in the tables without ever having been sealed, one phrase per kind."""
        return [f"{len(names)} of {total} {what} never sealed: {listed(names)}" for what, total, names in (
            ("accounts", self.accounts, self.unsealed_accounts),
            ("greenhouses", self.greenhouses, self.unsealed_greenhouses)) if names]

    def differs(self) -> list[str]:
        """What the tables hold other than the last sealed records left, one phrase per kind."""
        return [f"{what}: {listed(names)}" for what, names in (
            ("roles other than sealed", self.roles_differ),
            ("disabled state other than sealed", self.disabled_differ),
            ("greenhouse settings other than sealed", self.settings_differ),
            ("sealed accounts gone from the table", self.vanished_accounts)) if names]


def compare_access(rows: AccessRows, sealed: SealedAccess) -> AccessCoverage:
    """The findings of comparing the tables with the replayed chain (both as of one moment)."""
    since = sealed.since
    out = AccessCoverage(accounts=len(rows.accounts), greenhouses=len(rows.greenhouses))
    unsealed_made: list[datetime | None] = []
    for acct in rows.accounts:
        record = sealed.accounts.get(acct.username)
        if (record is None or not record.created) and _asked(acct.created_at, since):
            out.unsealed_accounts.append(acct.username)
            unsealed_made.append(acct.created_at)
        if record is None:
            continue
        if record.roles is not None and record.roles != sorted(acct.roles):
            out.roles_differ.append(f"{acct.username}: sealed {record.roles}, stored {sorted(acct.roles)}")
        if record.disabled is not None and record.disabled != acct.disabled:
            out.disabled_differ.append(
                f"{acct.username}: sealed {'disabled' if record.disabled else 'active'}, "
                f"stored {'disabled' if acct.disabled else 'active'}")
    stored = {a.username for a in rows.accounts}
    out.vanished_accounts = sorted(n for n, r in sealed.accounts.items() if r.created and n not in stored)
    out.unsealed_greenhouses = sorted(gh for gh, created in rows.greenhouses.items()
                                      if gh not in sealed.greenhouses and _asked(created, since))
    unsealed_made += [rows.greenhouses[gh] for gh in out.unsealed_greenhouses]
    out.settings_differ = [f"{gh}: {why}" for gh, stored in sorted(rows.settings.items())
                           if (why := settings_difference(stored, sealed.settings.get(gh))) is not None]
    out.before_sealing = any(sealed.made_before_sealing(created) for created in unsealed_made)
    return out


@dataclass(frozen=True)
class AccessCheck:
    """The access chain verified, and the tables compared with what its records say, as of one moment."""

    chain: GreenhouseVerifyResult
    rows: AccessRows
    coverage: AccessCoverage


def check_access(conn: Connection, store: AuditStore) -> AccessCheck:
    """Verify the access chain and compare the tables with it, all read on ``conn`` (the caller's snapshot:
    an access change commits with its record, so one moment's chain and tables agree exactly). Each record
    is decrypted once, as it is verified; past a bad record nothing is compared."""
    anchor = store.latest_anchor(ACCESS_CHAIN, conn)
    sealed = SealedAccess(anchor_ts=None if anchor is None else anchor.ts)
    chain = store.verify_in(conn, ACCESS_CHAIN, on_entry=sealed.on_entry)
    rows = read_access_rows(conn)
    if not chain.ok:
        return AccessCheck(chain, rows, AccessCoverage(len(rows.accounts), len(rows.greenhouses),
                                                       broken_after=chain.head_seq))
    return AccessCheck(chain, rows, compare_access(rows, sealed))


def settings_difference(stored: dict[str, Any], sealed: dict[str, Any] | None) -> str | None:
    """How a greenhouse's stored settings differ from the last sealed ones (None: they agree, or nothing
    sealed ever stated them and the version is still the first)."""
    if sealed is None:
        version = stored.get("version", 1)
        return None if version == 1 else f"settings version {version} never sealed"
    for key in sorted(set(stored) | set(sealed)):
        if key == "zones" and isinstance(sealed.get(key), list) \
                and len(sealed[key]) == len(stored.get(key, [])):
            for i, (a, b) in enumerate(zip(stored[key], sealed[key], strict=True)):
                if a != b:
                    field_ = next(k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k))
                    return f"zones[{i}].{field_} sealed {b.get(field_)!r}, stored {a.get(field_)!r}"
        elif stored.get(key) != sealed.get(key):
            return f"{key} sealed {sealed.get(key)!r}, stored {stored.get(key)!r}"
    return None


def _asked(created: datetime | None, since: datetime | None) -> bool:
    return since is None or created is None or created >= since


def listed(names: list[str]) -> str:
    """The first :data:`SHOWN` names, and how many more there are."""
    more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more

"""Does the ``_access`` chain account for who may do what? The tables' other witness, for ``audit verify``.

A role change committed without its record verifies as "nothing wrong": the chain is genuine, only
silent. So the chain's account and registration records are replayed (``user_add``/``user_added``
with roles, ``user_roles`` to roles, ``user_disable``/``user_disabled``, ``greenhouse_register``) and
the result compared with the rows: every account and greenhouse must have been sealed into being, each
account's roles and disabled state must be what its last sealed record left, and no sealed account may
be gone from the table. Every such change commits in one transaction with its record
(:mod:`app.access_seal`), so tables and chain read as of one moment agree exactly in a healthy trail:
there is no sealing lag to wait out.

Not checked: password resets (the row keeps nothing a record could be compared with; ``token_epoch``
moves at every logout too) and logins. After a purge, rows older than the oldest remaining record are
not asked for a creation record, and an account whose records were purged is compared only in what the
remaining ones say.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Connection, Engine, select

from app.audit_sink import ACCESS_CHAIN
from app.models import Greenhouse, User, UserRole
from audit import AuditEntry, open_record
from audit.store import AuditStore

ADD_KINDS = frozenset({"user_add", "user_added"})
"""An account made (the API's kind, the command line's and the demo's)."""
ROLE_KINDS = frozenset({"user_roles"})
DISABLE_KINDS = frozenset({"user_disable", "user_disabled"})
REGISTER_KINDS = frozenset({"greenhouse_register"})
SHOWN = 10
"""Names listed per finding; the counts say how many in all."""
SNAPSHOT_TRIES = 5
"""Reads of chain and tables before giving up on one undisturbed by a new access record."""


@dataclass
class SealedAccount:
    """An account as the chain's records leave it (None: no remaining record says)."""

    created: bool = False
    roles: list[str] | None = None
    disabled: bool | None = None


@dataclass
class SealedAccess:
    """The access chain replayed, record by record (feed it each verified entry in seq order)."""

    purged: bool = False
    """The chain's oldest records were purged behind an anchor."""
    accounts: dict[str, SealedAccount] = field(default_factory=dict)
    greenhouses: set[str] = field(default_factory=set)
    first_ts: str | None = None

    def add(self, entry: AuditEntry) -> None:
        self.first_ts = self.first_ts or entry.ts
        payload = entry.payload
        if entry.kind in REGISTER_KINDS:
            self.greenhouses.add(str(payload.get("greenhouse_id")))
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

    @property
    def since(self) -> datetime | None:
        """Rows older than this are not asked for a creation record (their records were purged)."""
        if not self.purged:
            return None
        return None if self.first_ts is None else datetime.fromisoformat(self.first_ts)


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


def read_access_rows(conn: Connection) -> AccessRows:
    """Accounts with their roles and registered greenhouses, read on ``conn`` (a caller's snapshot)."""
    roles: dict[int, list[str]] = {}
    for user_id, role in conn.execute(select(UserRole.user_id, UserRole.role).order_by(UserRole.role)):
        roles.setdefault(user_id, []).append(role)
    accounts = [StoredAccount(name, roles.get(uid, []), disabled_at is not None, _aware(created))
                for uid, name, disabled_at, created in conn.execute(
                    select(User.id, User.username, User.disabled_at, User.created_at).order_by(User.username))]
    greenhouses = {gh: _aware(created) for gh, created in conn.execute(select(Greenhouse.id, Greenhouse.created_at))}
    return AccessRows(accounts, greenhouses)


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

    @property
    def ok(self) -> bool:
        return not (self.unsealed_accounts or self.roles_differ or self.disabled_differ or self.vanished_accounts
                    or self.unsealed_greenhouses)

    def describe(self) -> str:
        """One line: what was checked, and what the chain does not account for."""
        counts = f"{self.accounts} accounts, {self.greenhouses} greenhouses"
        if self.ok:
            return f"ok   {ACCESS_CHAIN}: every account and registration is sealed as it stands ({counts})"
        parts = [f"{what}: {_shown(names)}" for what, names in (
            ("accounts never sealed", self.unsealed_accounts),
            ("roles other than sealed", self.roles_differ),
            ("disabled state other than sealed", self.disabled_differ),
            ("sealed accounts gone from the table", self.vanished_accounts),
            ("greenhouses never sealed", self.unsealed_greenhouses)) if names]
        return f"MISSING {ACCESS_CHAIN} ({counts}): " + "; ".join(parts)


def compare_access(rows: AccessRows, sealed: SealedAccess) -> AccessCoverage:
    """The findings of comparing the tables with the replayed chain (both as of one moment)."""
    since = sealed.since
    out = AccessCoverage(accounts=len(rows.accounts), greenhouses=len(rows.greenhouses))
    for acct in rows.accounts:
        record = sealed.accounts.get(acct.username)
        if (record is None or not record.created) and _asked(acct.created_at, since):
            out.unsealed_accounts.append(acct.username)
        if record is None:
            continue
        if record.roles is not None and record.roles != sorted(acct.roles):
            out.roles_differ.append(f"{acct.username}: sealed {record.roles}, stored {sorted(acct.roles)}")
        if record.disabled is not None and record.disabled != acct.disabled:
            out.disabled_differ.append(f"{acct.username}: sealed {'disabled' if record.disabled else 'active'}, "
                                       f"stored {'disabled' if acct.disabled else 'active'}")
    stored = {a.username for a in rows.accounts}
    out.vanished_accounts = sorted(n for n, r in sealed.accounts.items() if r.created and n not in stored)
    out.unsealed_greenhouses = sorted(gh for gh, created in rows.greenhouses.items()
                                      if gh not in sealed.greenhouses and _asked(created, since))
    return out


def check_access(engine: Engine, store: AuditStore) -> AccessCoverage:
    """Replay the access chain and compare the tables with it, as of one moment: read again when an
    access record was sealed meanwhile (its change may be in one read and not the other). Each record
    is authenticated as it is opened; whether the chain links up is :meth:`AuditStore.verify`'s part."""
    for _ in range(SNAPSHOT_TRIES):
        head = store.tail_records(ACCESS_CHAIN, 1)
        sealed = SealedAccess(purged=store.latest_anchor(ACCESS_CHAIN) is not None)
        upto = head[0].seq if head else 0
        for record in store.iter_records(ACCESS_CHAIN):
            if record.seq > upto:
                break
            sealed.add(open_record(store.keyring, record))
        with engine.connect() as conn:
            rows = read_access_rows(conn)
        if store.tail_records(ACCESS_CHAIN, 1) == head:
            return compare_access(rows, sealed)
    raise RuntimeError(f"the {ACCESS_CHAIN} chain moved during each of {SNAPSHOT_TRIES} reads; try again")


def _asked(created: datetime | None, since: datetime | None) -> bool:
    return since is None or created is None or created >= since


def _aware(ts: datetime | None) -> datetime | None:
    """SQLite hands back naive UTC datetimes."""
    return ts if ts is None or ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def _shown(names: list[str]) -> str:
    more = f" (+{len(names) - SHOWN} more)" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more

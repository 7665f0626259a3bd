"""A site's accounts and greenhouses sealed as they stand: ``greentwin audit baseline-access``.

Accounts and registrations made before every change of who may do what was sealed have no record in
the ``_access`` chain, so ``audit verify`` reports them as never sealed. One ``access_baseline`` record
lists every account (roles, disabled) and every greenhouse as the tables hold them; from that record on
:class:`app.access_coverage.SealedAccess` takes it as the state, and every later change needs its own
record again. The record also says what it accepted (what was unsealed or other than sealed), so a
baseline that covered a change made behind the trail's back stays visible in the trail.

The rows are read in the transaction the record commits in, and the record must follow the head that
was read: an access change committed in between (it commits with its own record) takes that seq first,
so the baseline is read and sealed again rather than leaving the change out. On SQLite the transaction
takes the write lock before it reads, so no change can commit in between at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from app.access_coverage import BASELINE_KIND, AccessCoverage, AccessRows, check_access
from app.access_seal import AccessSealer
from app.audit_sink import ACCESS_CHAIN
from audit import SealedRecord

TRIES = 5
"""Reads and seals before giving up on a moment no other access change commits in."""


class BaselineRefused(RuntimeError):
    """Nothing was sealed: there is nothing to baseline, or the chain cannot be built on."""


@dataclass(frozen=True)
class Baseline:
    """The sealed baseline and what it accepted as it stood."""

    record: SealedRecord
    accepted: AccessCoverage


def baseline_payload(rows: AccessRows, accepted: AccessCoverage) -> dict[str, Any]:
    """What the record states: every account and greenhouse, and the findings it accepts."""
    return {
        "accounts": [{"username": a.username, "roles": sorted(a.roles), "disabled": a.disabled}
                     for a in rows.accounts],
        "greenhouses": sorted(rows.greenhouses),
        "settings": rows.settings,
        "accepted": {"never_sealed_accounts": accepted.unsealed_accounts,
                     "never_sealed_greenhouses": accepted.unsealed_greenhouses,
                     "settings_differ": accepted.settings_differ,
                     "roles_differ": accepted.roles_differ, "disabled_differ": accepted.disabled_differ,
                     "sealed_accounts_gone": accepted.vanished_accounts},
    }


def seal_baseline(engine: Engine, sealer: AccessSealer) -> Baseline:
    """Seal one ``access_baseline`` of the tables as they stand, in the transaction that reads them.

    Raises :class:`BaselineRefused` when the tables already match the chain, or when the chain fails
    verification (a baseline must not be built on records that cannot be trusted), and
    :class:`app.access_seal.ChangeNotSealed` when the trail refuses the record."""
    for _ in range(TRIES):
        with Session(engine) as session:
            conn = session.connection()
            if conn.dialect.name == "sqlite":
                conn.exec_driver_sql("BEGIN IMMEDIATE")
            check = check_access(conn, sealer.store)
            if not check.chain.ok:
                raise BaselineRefused(f"the {ACCESS_CHAIN} chain fails at seq {check.chain.first_bad_seq} "
                                      f"({check.chain.reason}): nothing sealed on it")
            if check.coverage.ok:
                raise BaselineRefused(f"nothing to baseline: every account and registration is sealed as it "
                                      f"stands ({check.coverage.accounts} accounts, "
                                      f"{check.coverage.greenhouses} greenhouses)")
            record = sealer.seal(session, BASELINE_KIND, baseline_payload(check.rows, check.coverage))
            if record.seq != check.chain.head_seq + 1:  # a change committed after the read: read again
                session.rollback()
                continue
            session.commit()
            return Baseline(record, check.coverage)
    raise BaselineRefused(f"the {ACCESS_CHAIN} chain moved during each of {TRIES} tries; run it again")

"""What ``greentwin db`` and ``greentwin greenhouse add`` do, print and exit with (the work is
:mod:`app.cli.db`'s and, for a registration, :mod:`app.services.greenhouses`', which the API shares)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from app.cli import db as db_cli


def run_db(args: argparse.Namespace) -> int:
    """``greentwin db upgrade|downgrade|current|grant``."""
    if args.db_command == "upgrade":
        db_cli.upgrade(args.url, args.revision)
    elif args.db_command == "downgrade":
        from app.cli.db_guard import AuditTrailDropRefused

        try:
            record = db_cli.downgrade(args.url, args.revision, drop_audit_trail=args.drop_audit_trail,
                                      state_dir=Path(args.state_dir))
        except AuditTrailDropRefused as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        if record is not None:
            print(f"audit trail dropped by {record['by']}: {record['reason']!r}; recorded in "
                  f"{Path(args.state_dir) / 'audit-trail-drops.jsonl'} with {len(record['chain_heads'])} "
                  "chain heads")
    elif args.db_command == "grant":
        from app.cli.db_grant import grant

        try:
            grants = grant(db_cli.resolve_url(args.url), args.role)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        for g in grants:
            print(f"{args.role}: {', '.join(g.privileges)} on {g.table}")
    else:
        print(db_cli.current(args.url) or "none (not migrated)")
    return 0


def run_greenhouse_add(args: argparse.Namespace) -> int:
    """``greentwin greenhouse add``: registered and sealed in one transaction, or neither."""
    from app.access_seal import ChangeNotSealed
    from app.cli.user import AccessTrail
    from app.core.db import SchemaOutOfDate
    from app.services.greenhouses import add_greenhouse
    from audit.errors import AuditKeyError

    trail = None
    try:
        # The keys first: a registration that could not be sealed is not made.
        trail = AccessTrail(args.url, args.state_dir)
        gh = add_greenhouse(args.url, args.gh_id, zones=args.zones, soil=args.soil, name=args.name,
                            daily_water_cap_l=args.daily_water_cap_l,
                            seal=trail.sealing("greenhouse_register"))
    except ChangeNotSealed as exc:  # the registration was rolled back with its record
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except (ValueError, SchemaOutOfDate, AuditKeyError) as exc:  # GreenhouseExists is a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if trail is not None:
            trail.close()
    print(f"added greenhouse {gh.id} ({gh.zones} zones, {args.soil}); sealed in the audit trail")
    return 0

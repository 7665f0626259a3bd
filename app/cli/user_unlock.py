"""``greentwin user unlock NAME``: lift an account's login lock before it runs out.

The lock lives in the database, so every replica sees it lifted at the account's next login; the
failures each replica counted in memory stay until their window slides open (the API's unlock
also clears the answering replica's). The lift is sealed into the access chain as
``cli:<os user>`` in the same transaction as the change.
"""

from __future__ import annotations

import argparse
import sys

from app.cli.user import EXIT_OK, EXIT_USAGE, AccessTrail, _os_user, _session


def add_unlock_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME")
    parser.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    parser.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                        "default: GREENTWIN_STATE_DIR or ./state)")


def run_unlock(args: argparse.Namespace) -> int:
    """0 lifted; 2 for an unknown or unlocked account, an old schema or missing audit keys."""
    from app.auth.lockout import NotLocked, lift_lock
    from app.auth.users import UnknownUser
    from app.core.db import SchemaOutOfDate
    from audit.errors import AuditKeyError

    trail: AccessTrail | None = None
    try:
        trail = AccessTrail(args.url, args.state_dir)
        with _session(args.url) as session:
            user, until = lift_lock(session=session, store=trail.store, username=args.name,
                                    actor=f"cli:{_os_user()}", kind="user_unlocked")
        print(f"lifted the login lock on {user.username} (it would have run until "
              f"{until.isoformat(timespec='seconds')})")
    except (UnknownUser, NotLocked, SchemaOutOfDate, AuditKeyError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if trail is not None:
            trail.close()
    return EXIT_OK

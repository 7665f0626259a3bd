"""Handlers behind ``greentwin user add|list|disable|roles|unlock``: API accounts and their roles.

A password comes from standard input with ``--password-stdin`` (one line, so it never shows in
the process list or the shell history); without it one is generated and printed once. Adding,
disabling and role changes commit together with their record in the audit trail (``_access`` chain),
the operating system user as the actor, or not at all, so they need the service's audit keys (demo
mode: its own); a record the trail refuses leaves the account as it was (exit 1).
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from sqlalchemy.orm import Session

from app.auth.roles import ROLES

if TYPE_CHECKING:
    from app.access_seal import SealChange

EXIT_OK, EXIT_NOT_SEALED, EXIT_USAGE = 0, 1, 2


def add_user_arguments(parser: argparse.ArgumentParser) -> None:
    """``user add`` / ``user list`` / ``user disable`` / ``user roles`` / ``user unlock`` (argparse only)."""
    sub = parser.add_subparsers(dest="user_command", required=True)
    add = sub.add_parser("add", help="create an account; prints a generated password unless --password-stdin")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--role", dest="roles", action="append", choices=ROLES, required=True,
                     help="repeat for several roles")
    add.add_argument("--password-stdin", action="store_true",
                     help="read the password from the first line of stdin")
    add.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    add.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                     "default: GREENTWIN_STATE_DIR or ./state)")
    lst = sub.add_parser("list", help="accounts, roles, state and last login")
    lst.add_argument("--url", default=None)
    dis = sub.add_parser("disable", help="refuse the account's logins and revoke its tokens")
    dis.add_argument("name", metavar="NAME")
    dis.add_argument("--url", default=None)
    dis.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                     "default: GREENTWIN_STATE_DIR or ./state)")
    rol = sub.add_parser("roles", help="replace an account's roles")
    rol.add_argument("name", metavar="NAME")
    rol.add_argument("--role", dest="roles", action="append", choices=ROLES, required=True,
                     help="repeat for several roles; the account gets exactly these")
    rol.add_argument("--url", default=None)
    rol.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                     "default: GREENTWIN_STATE_DIR or ./state)")
    unl = sub.add_parser("unlock", help="lift an account's login lock (failed logins from many addresses) "
                         "before it runs out")
    unl.add_argument("name", metavar="NAME")
    unl.add_argument("--url", default=None)
    unl.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                     "default: GREENTWIN_STATE_DIR or ./state)")


def _session(url: str | None) -> AbstractContextManager[Session]:
    """A session on a migrated database (``SchemaOutOfDate`` otherwise)."""
    from app.core.config import get_settings
    from app.core.db import migrated_session

    return migrated_session(url or get_settings().database_url)


class AccessTrail:
    """User management is a human action: each change is sealed into the service-level chain, in the
    change's own transaction.

    The keys are loaded before anything changes, so a command that could not be recorded
    changes nothing (the service's rule: no audit keys outside demo mode, no start).
    """

    def __init__(self, url: str | None, state_dir: str | None) -> None:
        from app.access_seal import AccessSealer
        from app.audit_sink import service_audit_keys
        from app.core.config import get_settings
        from app.core.db import make_engine
        from audit.store import AuditStore

        settings = get_settings()
        keyring, signer = service_audit_keys(settings, Path(state_dir) if state_dir else settings.state_dir)
        self.engine = make_engine(url or settings.database_url)
        self.store = AuditStore(self.engine, keyring, signer)
        self.sealer = AccessSealer(self.store, f"cli:{_os_user()}")

    def sealing(self, kind: str) -> SealChange:
        """The ``seal`` argument of a change: its record of ``kind`` commits with it."""
        return self.sealer.sealing(kind)

    def close(self) -> None:
        self.engine.dispose()


def _sealing(trail: AccessTrail | None, kind: str) -> SealChange:
    assert trail is not None, "changing commands load the trail first"
    return trail.sealing(kind)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return f"uid-{os.getuid()}"


def _read_password(stream: TextIO) -> str:
    line = stream.readline()
    if not line:
        raise ValueError("--password-stdin: nothing on standard input")
    return line.rstrip("\r\n")


def main(args: argparse.Namespace) -> int:
    """Dispatch ``greentwin user ...``; exit 2 with a message for bad input, a taken name or an old schema,
    1 when the audit trail refused the change's record (the change was not made)."""
    from app.access_seal import ChangeNotSealed
    from app.auth.lockout import NotLocked, lift_lock
    from app.auth.passwords import check_password_policy, generate_password
    from app.auth.users import UnknownUser, create_user, disable_user, list_users, set_roles
    from app.core.db import SchemaOutOfDate
    from audit.errors import AuditKeyError

    trail: AccessTrail | None = None
    try:
        if args.user_command in ("add", "disable", "roles", "unlock"):
            trail = AccessTrail(args.url, args.state_dir)
        if args.user_command == "add":
            generated = not args.password_stdin
            password = generate_password() if generated else _read_password(sys.stdin)
            check_password_policy(password)
            with _session(args.url) as session:
                user = create_user(session=session, username=args.name, password=password, roles=args.roles,
                                   seal=_sealing(trail, "user_added"))
                print(f"added user {user.username} ({', '.join(sorted(user.roles))})")
            if generated:
                print(f"password: {password}")
                print("(shown once; it is stored only as an Argon2id hash)")
        elif args.user_command == "list":
            with _session(args.url) as session:
                users = list_users(session=session)
                if not users:
                    print("no users (add one with `greentwin user add NAME --role operator`)")
                for u in users:
                    state = "disabled" if u.disabled_at is not None else "active"
                    last = u.last_login_at.isoformat(timespec="seconds") if u.last_login_at else "never"
                    print(f"{u.username:<24} {','.join(sorted(u.roles)):<28} {state:<9} last login {last}")
        elif args.user_command == "roles":
            with _session(args.url) as session:
                user, before = set_roles(session=session, username=args.name, roles=args.roles,
                                         seal=_sealing(trail, "user_roles"))
                print(f"user {user.username}: roles {', '.join(before)} -> {', '.join(sorted(user.roles))}")
        elif args.user_command == "unlock":  # the lock is in the database: every replica sees it lifted
            with _session(args.url) as session:
                user, until = lift_lock(session=session, username=args.name,
                                        seal=_sealing(trail, "user_unlocked"))
                print(f"lifted the login lock on {user.username} (it would have run until "
                      f"{until.isoformat(timespec='seconds')})")
        else:
            with _session(args.url) as session:
                user = disable_user(session=session, username=args.name,
                                    seal=_sealing(trail, "user_disabled"))
                print(f"disabled user {user.username}; its tokens no longer work")
    except ChangeNotSealed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NOT_SEALED
    except (ValueError, UnknownUser, NotLocked, SchemaOutOfDate,
            AuditKeyError) as exc:  # UserExists: a ValueError
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if trail is not None:
            trail.close()
    return EXIT_OK

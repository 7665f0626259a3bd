"""``greentwin policy list|promote VERSION|rollback``: the policy registry by hand.

The running service picks a change up within ``GREENTWIN_POLICY_POLL_S`` and seals the switch in
every greenhouse's audit chain, naming who promoted it (``cli:<os user>`` from here).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session, sessionmaker

EXIT_OK, EXIT_USAGE = 0, 2


def add_policy_arguments(parser: argparse.ArgumentParser) -> None:
    """``policy list|promote|rollback`` (argparse only)."""
    sub = parser.add_subparsers(dest="policy_command", required=True)
    lst = sub.add_parser("list", help="every registered version, newest first")
    pro = sub.add_parser("promote", help="serve VERSION from now on (the service swaps without a restart)")
    pro.add_argument("version")
    rb = sub.add_parser("rollback", help="take back the promoted version and serve the one before it again")
    for p in (lst, pro, rb):
        p.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    for p in (pro, rb):
        p.add_argument("--reason", default="", help="recorded with the change")


@contextmanager
def registry_sessions(url: str | None) -> Iterator[sessionmaker[Session]]:
    """Sessions on a migrated database; the registry adopts the configured ensemble when empty."""
    from app.core.config import get_settings
    from app.core.db import make_engine, make_session_factory, require_current_schema
    from app.registry import ensure_seeded

    settings = get_settings()
    engine = make_engine(url or settings.database_url)
    try:
        require_current_schema(engine)
        sessions = make_session_factory(engine)
        ensure_seeded(sessions, settings.policy_dir)
        yield sessions
    finally:
        engine.dispose()


def main(args: argparse.Namespace) -> int:
    from app.cli.user import _os_user
    from app.core.db import SchemaOutOfDate
    from app.registry import RegistryError, list_versions, promote, rollback

    actor = f"cli:{_os_user()}"
    try:
        with registry_sessions(args.url) as sessions:
            if args.policy_command == "list":
                rows = list_versions(sessions)
                if not rows:
                    print("no registered policy versions (the threshold expert serves)")
                for r in rows:
                    when = r.promoted_at.isoformat(timespec="seconds") if r.promoted_at else "-"
                    print(f"{r.version:<28} {r.status:<12} parent {r.parent or '-':<28} "
                          f"promoted {when:<25} {r.note}")
            elif args.policy_command == "promote":
                info = promote(sessions, args.version, actor, args.reason)
                print(f"promoted {info.version}; the service switches within its poll interval")
            else:
                back, again = rollback(sessions, actor, args.reason)
                print(f"rolled back {back.version}; {again.version} is promoted again")
    except (RegistryError, SchemaOutOfDate) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK

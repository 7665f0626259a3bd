"""The arguments of the commands whose modules are too heavy to import for ``--help`` (the twin's,
the service's, the emulator's) or that have no module of their own: argparse only, nothing else loads.

Every command declares its arguments the same way, as ``add_arguments(parser)``; these live here,
the rest beside their commands (``app.cli.user``, ``app.cli.report``, ``policy.train_cli``, ...).
"""

from __future__ import annotations

import argparse

from twin.config import DEFAULT_ZONES

_URL_HELP = "default: GREENTWIN_DATABASE_URL"
_STATE_HELP = "the service's state folder (demo-mode audit keys; default: GREENTWIN_STATE_DIR or ./state)"


def _twin_run(parser: argparse.ArgumentParser, instances: int) -> None:
    parser.add_argument("--instances", type=int, default=instances)
    parser.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    parser.add_argument("--seed", type=int, default=0)


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    _twin_run(parser, 256)
    parser.add_argument("--days", type=float, default=7.0)


def add_validate_env_arguments(parser: argparse.ArgumentParser) -> None:
    _twin_run(parser, 64)
    parser.add_argument("--steps", type=int, default=288)


def add_db_arguments(parser: argparse.ArgumentParser) -> None:
    dbs = parser.add_subparsers(dest="db_command", required=True)
    for name, default in (("upgrade", "head"), ("downgrade", "-1")):
        p = dbs.add_parser(name)
        p.add_argument("revision", nargs="?", default=default)
        p.add_argument("--url", default=None, help=_URL_HELP)
        if name == "downgrade":
            p.add_argument("--drop-audit-trail", metavar="REASON", default=None,
                           help="confirm a downgrade that drops the audit tables; the reason is recorded")
            p.add_argument("--state-dir", default="state", help="where the confirmation is recorded")
    cur = dbs.add_parser("current")
    cur.add_argument("--url", default=None, help=_URL_HELP)
    gr = dbs.add_parser("grant", help="give the service's restricted role exactly the rights it needs (run "
                                      "as the owner after each upgrade; PostgreSQL)")
    gr.add_argument("--role", required=True, help="the role the service connects as")
    gr.add_argument("--url", default=None, help="the owner's URL; " + _URL_HELP)


def add_greenhouse_arguments(parser: argparse.ArgumentParser) -> None:
    ghs = parser.add_subparsers(dest="gh_command", required=True)
    add = ghs.add_parser("add", help="register a greenhouse with its zones")
    add.add_argument("gh_id", metavar="GH")
    add.add_argument("--zones", type=int, default=DEFAULT_ZONES)
    add.add_argument("--soil", choices=["sand", "loam", "clay"], default="loam")
    add.add_argument("--name", default=None)
    add.add_argument("--daily-water-cap-l", type=float, default=250.0)
    add.add_argument("--url", default=None, help=_URL_HELP)
    add.add_argument("--state-dir", default=None, help=_STATE_HELP)


def add_audit_arguments(parser: argparse.ArgumentParser) -> None:
    auds = parser.add_subparsers(dest="audit_command", required=True)
    ver = auds.add_parser("verify", help="check every chain; non-zero exit names the first bad record")
    ver.add_argument("--greenhouse", metavar="GH", default=None)
    ver.add_argument("--url", default=None, help=_URL_HELP)
    ver.add_argument("--anchors", metavar="FILE", default=None,
                     help="exported chain heads to check against (default: GREENTWIN_AUDIT_ANCHOR_FILE, or "
                          "audit-anchors.jsonl in GREENTWIN_STATE_DIR)")
    base = auds.add_parser("baseline-access", help="seal every account and greenhouse as they stand, once, "
                           "on a site made before accounts were sealed (exit 1: nothing to baseline)")
    base.add_argument("--url", default=None, help=_URL_HELP)
    base.add_argument("--state-dir", default=None, help=_STATE_HELP)
    pur = auds.add_parser("purge", help="delete records older than N days (>= 180) behind a signed anchor")
    pur.add_argument("--older-than-days", type=int, default=180)
    pur.add_argument("--url", default=None, help=_URL_HELP)
    gen = auds.add_parser("keygen",
                          help="write a new keyring and signing key, or rotate a keyring's current key")
    what = gen.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", metavar="DIR",
                      help="write greentwin_audit_key and audit_signing_key here (mode 0600)")
    what.add_argument("--rotate", metavar="FILE",
                      help="keyring file: put a fresh current key in front of the old ones")
    gen.add_argument("--signing-key", metavar="PEM", help="with --rotate: replace this signing key too, "
                     "keeping its public key in PEM.retired so what it signed still verifies")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--state-dir", default=None,
                        help="controller snapshots and the decision spool (default: GREENTWIN_STATE_DIR or "
                             "./state)")


def add_settings_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--markdown", action="store_true",
                        help="as the Markdown table of deploy/README.md (the default)")


def add_plant_sim_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--greenhouses", default="gh1,gh2")
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--dt-s", type=float, default=60.0)
    parser.add_argument("--clock-offset-s", type=float, default=0.0,
                        help="the boxes' clocks run this many seconds ahead (behind when negative), to try "
                             "clock skew")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--zones", type=int, default=DEFAULT_ZONES)
    parser.add_argument("--mqtt-url", default=None, help="default: GREENTWIN_MQTT_URL")
    parser.add_argument("--topic-root", default=None, help="first level of its topics (default: "
                        "GREENTWIN_MQTT_TOPIC_ROOT, else greentwin): the service's")
    parser.add_argument("--site-timezone", default=None, metavar="TZ",
                        help="the service's site time zone, whose local hours the twins' days follow "
                             "(default: GREENTWIN_SITE_TIMEZONE)")
    parser.add_argument("--outlook-port", type=int, default=None, metavar="PORT",
                        help="also serve the twin's weather forecast (Open-Meteo shape) and day-ahead prices "
                             "over HTTP on 127.0.0.1:PORT, for GREENTWIN_WEATHER_URL and GREENTWIN_PRICE_URL "
                             "(0: any free port)")
    # An edge box has its own certificate (CN = its greenhouse id), never the service's.
    parser.add_argument("--ca-file", default=None, help="the site CA (mqtts://)")
    parser.add_argument("--cert-file", default=None, help="the edge box's client certificate (PEM)")
    parser.add_argument("--key-file", default=None, help="the edge box's client key (PEM)")

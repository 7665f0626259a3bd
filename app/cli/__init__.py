"""The ``greentwin`` command line: one entry point, subcommands import lazily.

Each command group has its module here (``db``, ``user``, ``demos``, ``audit``, ``report``,
``service``, ``plant_sim``, ``twin``); training and evaluation live with the learner
(``policy.train_cli``, ``policy.eval_cli``). Only the argparse setup runs on ``--help``.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence

from twin.config import DEFAULT_ZONES

Handler = Callable[[argparse.Namespace], int]


def _cmd_simulate(args: argparse.Namespace) -> int:
    from app.cli.twin import simulate

    return simulate(args)


def _cmd_validate_env(args: argparse.Namespace) -> int:
    from app.cli.twin import validate_env

    return validate_env(args)


def _cmd_db(args: argparse.Namespace) -> int:
    from app.cli.db_commands import run_db

    return run_db(args)


def _cmd_greenhouse_add(args: argparse.Namespace) -> int:
    from app.cli.db_commands import run_greenhouse_add

    return run_greenhouse_add(args)


def _cmd_user(args: argparse.Namespace) -> int:
    from app.cli import user as user_cli

    return user_cli.main(args)


def _cmd_demos(args: argparse.Namespace) -> int:
    from app.cli import demos as demos_cli

    return demos_cli.main(args)


def _cmd_policy(args: argparse.Namespace) -> int:
    from app.cli import policy as policy_cli

    return policy_cli.main(args)


def _cmd_retrain(args: argparse.Namespace) -> int:
    from app.cli import retrain as retrain_cli

    return retrain_cli.main(args)


def _cmd_retrain_worker(args: argparse.Namespace) -> int:
    from app.cli import retrain as retrain_cli

    return retrain_cli.worker_main(args)


def _cmd_train(args: argparse.Namespace) -> int:
    from policy.train_cli import run_train

    return run_train(args)


def _cmd_audit(args: argparse.Namespace) -> int:
    from app.cli import audit as audit_cli

    if args.audit_command == "verify":
        return audit_cli.run_verify(args)
    if args.audit_command == "keygen":
        return audit_cli.run_keygen(args)
    if args.audit_command == "baseline-access":
        return audit_cli.run_baseline_access(args)
    return audit_cli.run_purge(args)


def _cmd_serve(args: argparse.Namespace) -> int:
    from app.cli.service import run_serve

    return run_serve(args)


def _cmd_init(args: argparse.Namespace) -> int:
    from app.cli.init import run_init

    return run_init(args)


def _cmd_settings(args: argparse.Namespace) -> int:
    from app.core.settings_doc import settings_markdown

    print(settings_markdown(), end="")
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from app.cli.service import run_demo

    return run_demo(args)


def _cmd_plant_sim(args: argparse.Namespace) -> int:
    from app.cli.plant_sim import run_plant_sim

    return run_plant_sim(args)


def _cmd_eval(args: argparse.Namespace) -> int:
    from policy.eval_cli import run_eval

    return run_eval(args)


def _cmd_report(args: argparse.Namespace) -> int:
    from app.cli import report as report_cli

    return report_cli.main(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="greentwin", description="Digital-twin greenhouse control.")
    sub = parser.add_subparsers(dest="command", required=True)

    sim = sub.add_parser("simulate", help="run the batched twin under the expert controller and print a summary")
    sim.add_argument("--instances", type=int, default=256)
    sim.add_argument("--days", type=float, default=7.0)
    sim.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    sim.add_argument("--seed", type=int, default=0)
    sim.set_defaults(handler=_cmd_simulate)

    val = sub.add_parser("validate-env", help="check the twin against its specs and run smoke episodes")
    val.add_argument("--instances", type=int, default=64)
    val.add_argument("--steps", type=int, default=288)
    val.add_argument("--backend", choices=["numpy", "torch"], default="numpy")
    val.add_argument("--seed", type=int, default=0)
    val.set_defaults(handler=_cmd_validate_env)

    db = sub.add_parser("db", help="database migrations (Alembic)")
    dbs = db.add_subparsers(dest="db_command", required=True)
    for name, default in (("upgrade", "head"), ("downgrade", "-1")):
        p = dbs.add_parser(name)
        p.add_argument("revision", nargs="?", default=default)
        p.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
        if name == "downgrade":
            p.add_argument("--drop-audit-trail", metavar="REASON", default=None,
                           help="confirm a downgrade that drops the audit tables; the reason is recorded")
            p.add_argument("--state-dir", default="state", help="where the confirmation is recorded")
    cur = dbs.add_parser("current")
    cur.add_argument("--url", default=None)
    gr = dbs.add_parser("grant", help="give the service's restricted role exactly the rights it needs (run as "
                                      "the owner after each upgrade; PostgreSQL)")
    gr.add_argument("--role", required=True, help="the role the service connects as")
    gr.add_argument("--url", default=None, help="the owner's URL; default: GREENTWIN_DATABASE_URL")
    db.set_defaults(handler=_cmd_db)

    gh = sub.add_parser("greenhouse", help="manage registered greenhouses")
    ghs = gh.add_subparsers(dest="gh_command", required=True)
    add = ghs.add_parser("add", help="register a greenhouse with its zones")
    add.add_argument("gh_id", metavar="GH")
    add.add_argument("--zones", type=int, default=DEFAULT_ZONES)
    add.add_argument("--soil", choices=["sand", "loam", "clay"], default="loam")
    add.add_argument("--name", default=None)
    add.add_argument("--daily-water-cap-l", type=float, default=250.0)
    add.add_argument("--url", default=None)
    add.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                     "default: GREENTWIN_STATE_DIR or ./state)")
    add.set_defaults(handler=_cmd_greenhouse_add)

    from app.cli.user import add_user_arguments  # argparse only

    usr = sub.add_parser("user", help="API accounts: add (with roles), list, disable")
    add_user_arguments(usr)
    usr.set_defaults(handler=_cmd_user)

    from app.cli.demos import add_demos_arguments  # argparse only

    dem = sub.add_parser("demos", help="export operator overrides as demonstrations for training")
    add_demos_arguments(dem)
    dem.set_defaults(handler=_cmd_demos)

    from app.cli.policy import add_policy_arguments  # argparse only

    pol = sub.add_parser("policy", help="the policy registry: list, promote VERSION, rollback")
    add_policy_arguments(pol)
    pol.set_defaults(handler=_cmd_policy)

    from app.cli.retrain import add_retrain_arguments  # argparse only

    ret = sub.add_parser("retrain", help="nightly retraining: calibrate, fine-tune, gate, promote (exit 0/1/3/4)")
    add_retrain_arguments(ret)
    ret.set_defaults(handler=_cmd_retrain)
    from app.cli.retrain import add_worker_arguments

    rew = sub.add_parser("retrain-worker", help="one rank of retrain's fine-tuning under its launcher (not by hand)")
    add_worker_arguments(rew)
    rew.set_defaults(handler=_cmd_retrain_worker)

    from policy.train_cli import add_train_arguments  # argparse only; torch loads when the command runs

    tr = sub.add_parser("train", help="train the PPO policy ensemble on the twin (resumable)")
    add_train_arguments(tr)
    tr.set_defaults(handler=_cmd_train)

    aud = sub.add_parser("audit", help="verify or purge the sealed audit trail, make or rotate its keys")
    auds = aud.add_subparsers(dest="audit_command", required=True)
    ver = auds.add_parser("verify", help="check every chain; non-zero exit names the first bad record")
    ver.add_argument("--greenhouse", metavar="GH", default=None)
    ver.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    ver.add_argument("--anchors", metavar="FILE", default=None,
                     help="exported chain heads to check against (default: GREENTWIN_AUDIT_ANCHOR_FILE, or "
                          "audit-anchors.jsonl in GREENTWIN_STATE_DIR)")
    base = auds.add_parser("baseline-access", help="seal every account and greenhouse as they stand, once, on a "
                           "site made before accounts were sealed (exit 1: nothing to baseline)")
    base.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    base.add_argument("--state-dir", default=None, help="the service's state folder (demo-mode audit keys; "
                      "default: GREENTWIN_STATE_DIR or ./state)")
    pur = auds.add_parser("purge", help="delete records older than N days (>= 180) behind a signed anchor")
    pur.add_argument("--older-than-days", type=int, default=180)
    pur.add_argument("--url", default=None, help="default: GREENTWIN_DATABASE_URL")
    gen = auds.add_parser("keygen", help="write a new keyring and signing key, or rotate a keyring's current key")
    what = gen.add_mutually_exclusive_group(required=True)
    what.add_argument("--out", metavar="DIR", help="write greentwin_audit_key and audit_signing_key here (mode 0600)")
    what.add_argument("--rotate", metavar="FILE", help="keyring file: put a fresh current key in front of the old ones")
    gen.add_argument("--signing-key", metavar="PEM", help="with --rotate: replace this signing key too, keeping its "
                     "public key in PEM.retired so what it signed still verifies")
    aud.set_defaults(handler=_cmd_audit)

    from policy.eval_args import add_eval_arguments  # argparse only

    ev = sub.add_parser("eval", help="compare the policy with the tuned threshold, timer and random controllers "
                                     "on held-out scenarios, in water, yield and money")
    add_eval_arguments(ev)
    ev.set_defaults(handler=_cmd_eval)

    from app.cli.report import add_report_arguments  # argparse only; reportlab/pyHanko load when run

    rep = sub.add_parser("report", help="signed PDF report of one greenhouse's period; `report verify FILE.pdf`")
    add_report_arguments(rep)
    rep.set_defaults(handler=_cmd_report)

    srv = sub.add_parser("serve", help="run the control service (API, MQTT bridge, control loops)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8000)
    srv.add_argument("--state-dir", default=None,
                     help="controller snapshots and the decision spool (default: GREENTWIN_STATE_DIR or ./state)")
    srv.set_defaults(handler=_cmd_serve)

    from app.cli.init import add_init_arguments  # argparse only

    ini = sub.add_parser("init", help="make the token secret, audit keys and report signing key (owner-only)")
    add_init_arguments(ini)
    ini.set_defaults(handler=_cmd_init)

    st = sub.add_parser("settings", help="every GREENTWIN_* setting with its default and meaning")
    st.add_argument("--markdown", action="store_true", help="as the Markdown table of deploy/README.md (the default)")
    st.set_defaults(handler=_cmd_settings)

    from app.cli.demo_start import add_demo_arguments  # argparse only

    demo = sub.add_parser("demo", help="service + simulated greenhouses on the configured or an embedded MQTT "
                          "broker, one command")
    add_demo_arguments(demo)
    demo.set_defaults(handler=_cmd_demo)

    sim = sub.add_parser("plant-sim", help="edge-box emulator: twins speaking the MQTT contract")
    sim.add_argument("--greenhouses", default="gh1,gh2")
    sim.add_argument("--speed", type=float, default=1.0)
    sim.add_argument("--dt-s", type=float, default=60.0)
    sim.add_argument("--clock-offset-s", type=float, default=0.0,
                     help="the boxes' clocks run this many seconds ahead (behind when negative), to try clock skew")
    sim.add_argument("--seed", type=int, default=0)
    sim.add_argument("--zones", type=int, default=DEFAULT_ZONES)
    sim.add_argument("--mqtt-url", default=None, help="default: GREENTWIN_MQTT_URL")
    sim.add_argument("--topic-root", default=None, help="first level of its topics (default: GREENTWIN_MQTT_TOPIC_ROOT, "
                     "else greentwin): the service's")
    sim.add_argument("--site-timezone", default=None, metavar="TZ",
                     help="the service's site time zone, whose local hours the twins' days follow "
                          "(default: GREENTWIN_SITE_TIMEZONE)")
    sim.add_argument("--outlook-port", type=int, default=None, metavar="PORT",
                     help="also serve the twin's weather forecast (Open-Meteo shape) and day-ahead prices over "
                          "HTTP on 127.0.0.1:PORT, for GREENTWIN_WEATHER_URL and GREENTWIN_PRICE_URL (0: any free port)")
    # An edge box has its own certificate (CN = its greenhouse id), never the service's.
    sim.add_argument("--ca-file", default=None, help="the site CA (mqtts://)")
    sim.add_argument("--cert-file", default=None, help="the edge box's client certificate (PEM)")
    sim.add_argument("--key-file", default=None, help="the edge box's client key (PEM)")
    sim.set_defaults(handler=_cmd_plant_sim)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.handler
    code = handler(args)
    if os.environ.get("WORLD_SIZE", "1") not in ("", "1"):  # maybe a torchrun rank of train or retrain-worker
        from policy.distributed import exit_rank

        exit_rank(code)
    return code

"""``greentwin serve`` and ``greentwin demo``.

The demo needs nothing but this package: an SQLite file, the configured MQTT broker or an
embedded one (amqtt) when nothing listens on the port, a plant simulator with two greenhouses
at accelerated time, the shipped ensemble, and the API on http://127.0.0.1:8000 with one login
per role (fresh passwords at every start, printed once). What it checks before it starts, and
the topic root that keeps demos on one broker apart, is :mod:`app.cli.demo_start`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from app.cli.demo_start import DemoBlocked, DemoStart, listening, prepare_demo
from twin.config import DEFAULT_ZONES

if TYPE_CHECKING:
    from app.cli.user import AccessTrail

log = logging.getLogger(__name__)


class EmbeddedBroker:
    """An amqtt broker on its own event-loop thread, for machines without Mosquitto."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name="embedded-mqtt", daemon=True)
        self._broker: object | None = None

    def _run(self) -> None:
        import warnings

        from amqtt.broker import Broker

        asyncio.set_event_loop(self._loop)
        cfg = {"listeners": {"default": {"type": "tcp", "bind": f"{self.host}:{self.port}"}},
               "sys_interval": 0, "auth": {"allow-anonymous": True, "plugins": ["auth_anonymous"]},
               "topic-check": {"enabled": False}}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            broker = Broker(cfg, loop=self._loop)
            self._loop.run_until_complete(broker.start())
        self._broker = broker
        self._loop.run_forever()

    def start(self, timeout: float = 10.0) -> None:
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not listening(self.host, self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded MQTT broker did not start on {self.host}:{self.port}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self._broker is not None:
            fut = asyncio.run_coroutine_threadsafe(self._broker.shutdown(), self._loop)  # type: ignore[attr-defined]
            with contextlib.suppress(Exception):
                fut.result(timeout=5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)


def demo_logins(url: str, trail: AccessTrail) -> dict[str, str]:
    """One account per role, named after it, with a new password each run: {username: password}.
    Each account made and each password set is sealed in the access chain like ``greentwin user``'s."""
    from app.auth.passwords import generate_password
    from app.auth.roles import ROLES
    from app.auth.users import UserExists, create_user, set_password
    from app.core.db import make_engine, make_session_factory

    logins: dict[str, str] = {}
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            for role in ROLES:
                password = generate_password()
                try:
                    create_user(session=session, username=role, password=password, roles=[role],
                                seal=trail.sealing("user_added"))
                except UserExists:  # an earlier run made it; a new password revokes its old tokens
                    set_password(session=session, username=role, password=password,
                                 seal=trail.sealing("password_reset"))
                logins[role] = password
    finally:
        engine.dispose()
    return logins


def run_serve(args: argparse.Namespace) -> int:
    """Check everything a start needs (one line and exit 2 when something is missing), then serve."""
    import uvicorn

    from app.cli.preflight import StartBlocked, preflight

    try:
        settings = preflight()  # secret files count, as in deploy/
    except StartBlocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from app.main import create_app  # torch and the runtime load only for a start that can proceed
    from app.serving import configure_service_logging, uvicorn_options

    configure_service_logging(settings)
    app = create_app(settings, state_dir=Path(args.state_dir) if args.state_dir else settings.state_dir)
    uvicorn.run(app, host=args.host, port=args.port, **uvicorn_options(log_level="info"))
    return 0


def _demo_database(url: str, state_dir: Path) -> dict[str, str]:
    """Migrate the demo's database, register its greenhouses (once) and make its logins."""
    from app.cli import db as db_cli
    from app.cli.user import AccessTrail
    from app.services.greenhouses import GreenhouseExists, add_greenhouse

    db_cli.upgrade(url)
    trail = AccessTrail(url, str(state_dir))  # the demo's own audit keys; registrations are sealed
    try:
        for gh in ("gh1", "gh2"):
            try:
                add_greenhouse(url, gh, zones=DEFAULT_ZONES, soil="loam",
                               seal=trail.sealing("greenhouse_register"))
            except GreenhouseExists:  # registered on an earlier run
                continue
        return demo_logins(url, trail)
    finally:
        trail.close()


def run_demo(args: argparse.Namespace) -> int:
    """Start everything, or print one line saying why not and exit 2."""
    try:
        start = prepare_demo(args)
    except DemoBlocked as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    with start.lock:
        return _run_demo(args, start)


def _run_demo(args: argparse.Namespace, start: DemoStart) -> int:
    import uvicorn
    from sqlalchemy.exc import SQLAlchemyError

    from app.core.config import Settings
    from app.main import create_app
    from app.serving import configure_service_logging, uvicorn_options
    from plantsim.faults import FaultServer
    from plantsim.outlook import OutlookServer
    from plantsim.sim import PlantSim
    from wire.connection import redact_url

    settings = Settings()
    configure_service_logging(settings)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the outlook is asked every few seconds here
    data = start.data
    try:
        logins = _demo_database(settings.database_url, data / "state")
    except (SQLAlchemyError, OSError) as exc:
        print(f"error: the demo's database in {data} cannot be used ({type(exc).__name__}: "
              f"{str(exc).splitlines()[0]}): give another --data-dir", file=sys.stderr)
        return 2

    target, broker = start.target, None
    if start.embedded:
        print(f"no MQTT broker on {target.host}:{target.port}: starting an embedded one (amqtt)")
        broker = EmbeddedBroker(target.host, target.port)
        try:
            broker.start()
        except (RuntimeError, OSError) as exc:
            print(f"error: {exc}: give --mqtt-url a free port, or start a broker there", file=sys.stderr)
            return 2
    else:
        print(f"using the MQTT broker at {redact_url(start.url)}")
    print(f"MQTT topics: {start.topic_root}/<greenhouse>/<channel> (GREENTWIN_MQTT_TOPIC_ROOT picks another)")

    # The simulated plants have the registered soil, so the estimator's model matches them.
    # and their days follow the site's clock, as the service reads their timestamps.
    sim = PlantSim(settings.mqtt_url, ["gh1", "gh2"], speed=args.speed, dt_s=60.0, seed=0,
                   twin_overrides={"fixed_soils": ("loam",) * 6}, site_timezone=settings.site_timezone,
                   topic_root=start.topic_root)
    # The simulated site's weather service and power exchange, offline on 127.0.0.1; asked every ten
    # simulated minutes, as the plants run `speed` times faster than the wall clock.
    outlook = OutlookServer(sim).start()
    faults = FaultServer(sim).start()  # the demo's fault buttons: try an alarm (plantsim.faults)
    every = max(1.0, 600.0 / args.speed)
    settings = settings.model_copy(update={"weather_url": settings.weather_url or outlook.url,
                                           "price_url": settings.price_url or outlook.url,
                                           "outlook_refresh_s": every, "outlook_cache_ttl_s": every})
    app = create_app(settings, state_dir=data / "state")
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=args.port,
                                           **uvicorn_options(log_level="warning")))
    stop = threading.Event()
    sim_thread = threading.Thread(target=lambda: (sim.start(), sim.run(stop)), name="plant-sim", daemon=True)

    from app.retraining.schedule import RetrainSchedule

    schedule = RetrainSchedule(settings.retrain_dir, first_s=args.retrain_after,
                               every_s=settings.retrain_every_s) if settings.retrain_every_s > 0 else None

    async def main() -> None:
        serve = asyncio.create_task(server.serve())
        retrain = asyncio.create_task(schedule.run()) if schedule is not None else None
        while not server.started and not serve.done():
            await asyncio.sleep(0.1)
        sim_thread.start()
        print(f"\ngreentwin demo: dashboard on http://127.0.0.1:{args.port}/  "
              "(API: /docs, /api/greenhouses, /metrics)")
        if settings.metrics_token is None:  # a site's Prometheus sends GREENTWIN_METRICS_TOKEN instead
            print(f"metrics: http://127.0.0.1:{args.port}/metrics answers this machine only (demo mode)")
        print(f"two simulated greenhouses (gh1, gh2, loam soil) at {args.speed:g}x speed; their weather "
              f"forecast and day-ahead prices on {outlook.url} (see /api/greenhouses/gh1/live).")
        print(f"try an alarm: curl -X POST {faults.url}/v1/faults -d '{{\"greenhouse\": \"gh1\", "
              f"\"fault\": \"sensor_nan\", \"zone\": 2}}' (stuck_valve, drift, broker_disconnect with "
              f"\"seconds\"; {faults.url}/v1/faults/clear ends them)")
        print("logins for the dashboard and POST /api/auth/login (new passwords at every start):")
        for name, password in logins.items():
            print(f"  {name:<11} {password}")
        if schedule is not None:
            print(f"retraining (greentwin retrain, tiny budget) after {args.retrain_after:g} s, then every "
                  f"{settings.retrain_every_s:g} s; the service swaps to a promoted ensemble within "
                  f"{settings.policy_poll_s:g} s.")
        print("Ctrl-C stops everything.\n")
        try:
            await serve
        finally:
            if retrain is not None:
                schedule.stop()  # type: ignore[union-attr]
                retrain.cancel()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
    finally:
        stop.set()
        sim.close()
        outlook.close()
        faults.close()
        if broker is not None:
            broker.stop()
    return 0

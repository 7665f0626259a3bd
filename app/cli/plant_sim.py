"""``greentwin plant-sim``: the edge-box emulator as a process, until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from types import FrameType

from plantsim.outlook import OutlookServer
from plantsim.sim import PlantSim
from twin.config import DEFAULT_ZONES
from wire.connection import TlsFiles

logger = logging.getLogger(__name__)


def run_plant_sim(args: argparse.Namespace) -> int:
    """``greentwin plant-sim``: run the emulator until Ctrl-C / SIGTERM."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    url, tz = getattr(args, "mqtt_url", None), getattr(args, "site_timezone", None)
    root = getattr(args, "topic_root", None)
    if url is None or tz is None or root is None:
        from app.core.config import get_settings

        try:
            settings = get_settings()
        except ValueError as exc:  # names the bad setting, never its value (hide_input_in_errors)
            logger.error("plant-sim: %s", exc)
            return 2
        url, tz, root = (url or settings.mqtt_url, tz or settings.site_timezone,
                         root or settings.mqtt_topic_root)
    greenhouses = [g.strip() for g in str(args.greenhouses).split(",") if g.strip()]
    try:
        files = [getattr(args, f"{name}_file", None) for name in ("ca", "cert", "key")]
        tls = TlsFiles(*(None if f is None else Path(f) for f in files)) if any(files) else None
        sim = PlantSim(url, greenhouses, speed=args.speed, dt_s=args.dt_s, seed=getattr(args, "seed", 0),
                       zones=getattr(args, "zones", DEFAULT_ZONES), tls=tls, site_timezone=tz,
                       clock_offset_s=getattr(args, "clock_offset_s", 0.0), topic_root=root)
    except (ValueError, KeyError) as exc:  # ZoneInfo: KeyError for an unknown zone
        logger.error("plant-sim: %s", exc)  # parse errors never carry the URL's password (redact_url)
        return 2
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("signal %d: stopping plant-sim", signum)
        stop.set()

    port = getattr(args, "outlook_port", None)
    try:
        outlook = None if port is None else OutlookServer(sim, port).start()
    except OSError as exc:
        logger.error("plant-sim: cannot serve the outlook on 127.0.0.1:%s: %s", port, exc)
        return 2
    if outlook is not None:
        logger.info("plant-sim: weather forecast on %s/v1/forecast, day-ahead prices on %s/v1/day-ahead "
                    "(GREENTWIN_WEATHER_URL and GREENTWIN_PRICE_URL of the service)", outlook.url,
                    outlook.url)
    previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not sim.start():
            logger.warning("not all edge boxes connected yet; paho keeps retrying in the background")
        logger.info("plant-sim: %s, one step (%g s simulated) every %g s", ", ".join(greenhouses), sim.dt_s,
                    sim.dt_s / sim.speed)
        sim.run(stop)
    finally:
        if outlook is not None:
            outlook.close()
        sim.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0

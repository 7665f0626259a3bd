"""Edge-box emulator: one batched twin standing in for real greenhouses on the MQTT bus.

Each greenhouse gets its own MQTT client, as a real edge box would, so its retained
``online`` status and ``offline`` last will are its own and a broker disconnect fault hits only it.
Commands are applied at most once per cmd_id, dropped when older than their TTL, and a greenhouse
whose commands stop arriving for longer than the last TTL falls back to the safe state (all off).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import signal
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import FrameType
from typing import Any, Final, Literal, get_args
from uuid import UUID

import numpy as np
import paho.mqtt.client as mqtt

from app.mqtt.connection import (
    ONLINE,
    QOS,
    RECONNECT_MAX_S,
    RECONNECT_MIN_S,
    make_client,
    parse_mqtt_url,
)
from app.mqtt.topics import (
    Ack,
    Command,
    EstopEvent,
    PayloadError,
    Telemetry,
    ack_topic,
    command_topic,
    encode,
    estop_topic,
    parse_payload,
    status_topic,
    telemetry_topic,
    validate_gh_id,
)
from safety.action import safe_state
from twin.env import GreenhouseTwin

logger = logging.getLogger(__name__)

AckStatus = Literal["applied", "rejected", "expired"]
FaultKind = Literal["sensor_nan", "drift", "stuck_valve", "broker_disconnect"]
FAULT_KINDS: Final[tuple[str, ...]] = get_args(FaultKind)
DRIFT_VWC_PER_STEP: Final = 0.005
"""Injected probe drift, large enough to show within a few steps."""
REMEMBERED_CMD_IDS: Final = 1024
"""Per greenhouse; enough to cover any redelivery window, bounded so memory stays flat."""


@dataclass
class GreenhouseState:
    """What one emulated edge box knows; guarded by the simulator's lock."""

    gh: str
    zones: int
    client: mqtt.Client
    boot_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    seq: int = 0
    action: np.ndarray = field(init=False)
    """Applied set-points [valves..., pump %, light %]; starts in the safe state."""
    applied_count: int = 0
    last_command_at: float | None = None
    last_ttl_s: float | None = None
    failsafe: bool = False
    estop: bool = False
    outcomes: OrderedDict[UUID, tuple[AckStatus, str | None]] = field(default_factory=OrderedDict)
    nan_zone: int | None = None
    drift_vwc: float = 0.0
    drifting: bool = False
    stuck: dict[int, float] = field(default_factory=dict)
    subscribed: threading.Event = field(default_factory=threading.Event)
    sub_mid: int | None = None

    def __post_init__(self) -> None:
        self.action = safe_state(self.zones)


class PlantSim:
    """Emulates edge boxes for ``greenhouses``; ``step_once`` advances and publishes one step.

    ``run`` paces steps at ``dt_s / speed`` wall seconds; tests call ``step_once`` directly so
    they never depend on wall-clock pacing.
    """

    def __init__(self, url: str, greenhouses: list[str], *, speed: float = 1.0, dt_s: float = 60, seed: int = 0,
                 zones: int = 6, clock: Callable[[], float] = time.time, start_time: datetime | None = None,
                 twin_overrides: dict[str, Any] | None = None) -> None:
        if not greenhouses:
            raise ValueError("at least one greenhouse is needed")
        if len(set(greenhouses)) != len(greenhouses):
            raise ValueError("greenhouse ids must be unique")
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.greenhouses = [validate_gh_id(gh) for gh in greenhouses]
        self.speed = float(speed)
        self.dt_s = float(dt_s)
        self.zones = int(zones)
        self.target = parse_mqtt_url(url)
        self.twin = GreenhouseTwin(num_instances=len(greenhouses), seed=seed, zones=self.zones, dt_s=self.dt_s,
                                   **(twin_overrides or {}))
        self.twin.reset()
        self.rated_current_a = self.twin.config.hydraulics.pump_rated_current_a
        self.sim_time = start_time or datetime.now(UTC)
        self._clock = clock
        self._lock = threading.RLock()
        self._index = {gh: i for i, gh in enumerate(self.greenhouses)}
        self._started = False
        self.state: dict[str, GreenhouseState] = {}
        for gh in self.greenhouses:
            client = make_client(self.target, f"greentwin-edge-{gh}-{uuid.uuid4().hex[:6]}", status_topic(gh))
            st = GreenhouseState(gh=gh, zones=self.zones, client=client)
            client.user_data_set(st)
            client.on_connect = self._on_connect
            client.on_subscribe = self._on_subscribe
            client.on_disconnect = self._on_disconnect
            client.message_callback_add(command_topic(gh), self._on_command)
            self.state[gh] = st

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> bool:
        """Connect every edge box; True once all are subscribed to their command topic."""
        self._started = True
        for st in self.state.values():
            st.client.connect_async(self.target.host, self.target.port, keepalive=30)
            st.client.loop_start()
        deadline = time.monotonic() + timeout
        return all(st.subscribed.wait(max(0.0, deadline - time.monotonic())) for st in self.state.values())

    def close(self) -> None:
        """Clean disconnect: publish ``offline`` ourselves since the broker drops the will then."""
        if not self._started:
            return
        self._started = False
        for st in self.state.values():
            try:
                if st.client.is_connected():
                    st.client.publish(status_topic(st.gh), b"offline", qos=QOS, retain=True).wait_for_publish(2.0)
            except (RuntimeError, ValueError) as exc:
                logger.warning("%s: could not publish offline: %s", st.gh, exc)
            st.client.disconnect()
            st.client.loop_stop()

    def __enter__(self) -> PlantSim:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def run(self, stop: threading.Event) -> None:
        """Step every ``dt_s / speed`` wall seconds until ``stop`` is set; deadlines do not drift."""
        period = self.dt_s / self.speed
        next_at = time.monotonic()
        while not stop.is_set():
            self.step_once()
            next_at += period
            delay = next_at - time.monotonic()
            if delay < 0:  # fell behind (slow host): skip ahead instead of bursting
                next_at, delay = time.monotonic(), 0.0
            stop.wait(delay)

    # --- simulation --------------------------------------------------------------------------

    def step_once(self) -> dict[str, Telemetry]:
        """Apply watchdog and faults, step the twin once, publish and return each greenhouse's telemetry."""
        with self._lock:
            now = self._clock()
            for st in self.state.values():
                self._check_watchdog(st, now)
                if st.drifting:
                    st.drift_vwc += DRIFT_VWC_PER_STEP
            actions = np.stack([self._effective_action(st) for st in self.state.values()])
            commanded = {gh: st.action.copy() for gh, st in self.state.items()}
            _, _, _, _, info = self.twin.step(actions)
            self.sim_time += timedelta(seconds=self.dt_s)
            readings = {k: np.asarray(v) for k, v in info["readings"].items()}
            out: dict[str, Telemetry] = {}
            for gh, st in self.state.items():
                tel = self._telemetry(st, readings, self._index[gh], commanded[gh])
                st.seq += 1
                out[gh] = tel
        for gh, tel in out.items():
            client = self.state[gh].client
            if client.is_connected():
                client.publish(telemetry_topic(gh), encode(tel), qos=QOS)
            else:
                logger.debug("%s offline: telemetry seq %d not sent", gh, tel.seq)
        return out

    def _effective_action(self, st: GreenhouseState) -> np.ndarray:
        """What the plant really does: the set-points, with stuck valves holding their position."""
        action = safe_state(st.zones) if st.estop else st.action.copy()
        for zone, pos in st.stuck.items():
            action[zone] = pos
        return action

    def _check_watchdog(self, st: GreenhouseState, now: float) -> None:
        """Commands stopped arriving for longer than the last TTL: the service is gone, go safe."""
        if st.last_command_at is None or st.last_ttl_s is None or st.failsafe:
            return
        if now - st.last_command_at > st.last_ttl_s:
            logger.warning("%s: no valid command for %.1f s (> ttl %.1f s); safe state", st.gh,
                           now - st.last_command_at, st.last_ttl_s)
            st.action = safe_state(st.zones)
            st.failsafe = True

    def _telemetry(self, st: GreenhouseState, r: dict[str, np.ndarray], i: int, action: np.ndarray) -> Telemetry:
        """Contract payload from raw readings; NaN becomes None, values saturate at the schema's limits."""
        soil = np.clip(r["soil_vwc"][i].astype(np.float64), 0.0, 1.0)
        if st.drifting and not math.isnan(soil[0, 0]):
            soil[0, 0] = min(1.0, soil[0, 0] + st.drift_vwc)
        if st.nan_zone is not None:
            soil[st.nan_zone, :] = np.nan
        z = st.zones
        current = _finite(r["pump_current_frac"][i], 0.0) * self.rated_current_a
        return Telemetry(
            ts=self.sim_time,
            boot_id=st.boot_id,
            seq=st.seq,
            soil_vwc=[[None if math.isnan(v) else float(v) for v in row] for row in soil.tolist()],
            air_temp_c=_opt(r["air_temp_c"][i], -40.0, 70.0),
            air_rh_pct=_opt(r["air_rh_pct"][i], 0.0, 100.0),
            par_umol_m2_s=_opt(r["par_umol_m2_s"][i], 0.0, 3000.0),
            co2_ppm=_opt(r["co2_ppm"][i], 0.0, 10000.0),
            leaf_temp_c=_opt(r["leaf_temp_c"][i], -40.0, 70.0),
            flow_l_min=min(max(_finite(r["flow_l_min"][i], 0.0), 0.0), 1000.0),
            pump_current_a=min(max(current, 0.0), 100.0),
            valve_open=[int(v >= 0.5) for v in action[:z]],
            pump_pct=float(np.clip(action[z], 0.0, 100.0)),
            light_pct=float(np.clip(action[z + 1], 0.0, 100.0)),
            estop=st.estop,
        )

    # --- commands ----------------------------------------------------------------------------

    def _on_command(self, client: mqtt.Client, st: GreenhouseState, msg: mqtt.MQTTMessage) -> None:
        """Validate, dedupe, TTL-check and apply one command, then ack; never raises (paho thread)."""
        try:
            status, reason, cmd_id = self._handle_command(st, msg.payload)
            if cmd_id is None:
                logger.warning("%s: dropped command without a usable cmd_id: %s", st.gh, reason)
                return
            ack = Ack(cmd_id=cmd_id, ts=datetime.now(UTC), status=status, reason=reason)
            client.publish(ack_topic(st.gh), encode(ack), qos=QOS)
        except Exception:  # noqa: BLE001 - a paho callback must never raise
            logger.exception("%s: failed to handle command", st.gh)

    def _handle_command(self, st: GreenhouseState, raw: bytes) -> tuple[AckStatus, str | None, UUID | None]:
        try:
            cmd = parse_payload(raw, Command)
        except PayloadError as exc:
            return "rejected", f"{exc.reason_code}: {exc.detail}"[:200], _salvage_cmd_id(raw)
        with self._lock:
            previous = st.outcomes.get(cmd.cmd_id)
            if previous is not None:
                # At most once: a redelivered or retried cmd_id gets its original answer, never a second apply.
                logger.info("%s: duplicate command %s, re-acking %s", st.gh, cmd.cmd_id, previous[0])
                return previous[0], previous[1], cmd.cmd_id
            status, reason = self._decide(st, cmd)
            st.outcomes[cmd.cmd_id] = (status, reason)
            while len(st.outcomes) > REMEMBERED_CMD_IDS:
                st.outcomes.popitem(last=False)
        return status, reason, cmd.cmd_id

    def _decide(self, st: GreenhouseState, cmd: Command) -> tuple[AckStatus, str | None]:
        now = self._clock()
        age = now - cmd.ts.timestamp()
        if age > cmd.ttl_s:
            return "expired", f"{age:.1f} s old > ttl {cmd.ttl_s:g} s"
        if len(cmd.valves) != st.zones:
            return "rejected", f"zone_count: {len(cmd.valves)} valves for {st.zones} zones"
        if st.estop:
            return "rejected", "estop latched"
        # A valid command feeds the watchdog even in estop mode: the service is alive.
        st.last_command_at, st.last_ttl_s, st.failsafe = now, cmd.ttl_s, False
        if cmd.mode == "estop":
            st.action = safe_state(st.zones)
        else:
            st.action = np.array([*cmd.valves, cmd.pump_pct, cmd.light_pct], dtype=np.float64)
        st.applied_count += 1
        return "applied", None

    # --- operator actions and faults ---------------------------------------------------------

    def press_estop(self, gh: str, source: str = "panel") -> None:
        """Latch everything off until ``release_estop``; the service hears about it on the estop topic."""
        st = self.state[gh]
        with self._lock:
            st.estop = True
            st.action = safe_state(st.zones)
        self._publish_estop(st, pressed=True, source=source)

    def release_estop(self, gh: str, source: str = "panel") -> None:
        """Unlatch; actuators stay off until the next valid command (never resume an old one)."""
        st = self.state[gh]
        with self._lock:
            st.estop = False
        self._publish_estop(st, pressed=False, source=source)

    def _publish_estop(self, st: GreenhouseState, *, pressed: bool, source: str) -> None:
        event = EstopEvent(ts=datetime.now(UTC), pressed=pressed, source=source)
        st.client.publish(estop_topic(st.gh), encode(event), qos=QOS)

    def inject(self, gh: str, kind: FaultKind, *, zone: int = 0, seconds: float = 3.0) -> None:
        """Start a fault: ``sensor_nan`` blanks a zone's probes, ``drift`` biases probe 0 more every step,
        ``stuck_valve`` freezes a valve at its current set-point (telemetry still reports the command,
        like a real box without position feedback), ``broker_disconnect`` drops the link for ``seconds``.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault {kind!r}; known: {FAULT_KINDS}")
        st = self.state[gh]
        logger.warning("%s: injecting fault %s", gh, kind)
        with self._lock:
            if kind == "sensor_nan":
                st.nan_zone = zone
            elif kind == "drift":
                st.drifting = True
            elif kind == "stuck_valve":
                st.stuck[zone] = float(st.action[zone])
        if kind == "broker_disconnect":
            self._drop_link(st, seconds)

    def clear_faults(self, gh: str) -> None:
        """Remove sensor and valve faults (a disconnect heals by itself)."""
        st = self.state[gh]
        with self._lock:
            st.nan_zone, st.drifting, st.drift_vwc = None, False, 0.0
            st.stuck.clear()

    def _drop_link(self, st: GreenhouseState, seconds: float) -> None:
        """Cut the socket without DISCONNECT (so the broker fires the will) and hold off reconnecting."""
        delay = max(1, math.ceil(seconds))
        st.client.reconnect_delay_set(min_delay=delay, max_delay=delay)
        sock = st.client.socket()
        if sock is None:
            return
        try:
            sock.shutdown(2)  # socket.SHUT_RDWR: paho's thread sees the loss and reconnects after `delay`
        except OSError as exc:
            logger.warning("%s: could not drop the link: %s", st.gh, exc)

    # --- paho callbacks ----------------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, st: GreenhouseState, _flags: Any, reason_code: Any,
                    _properties: Any) -> None:
        if reason_code.is_failure:
            logger.error("%s: MQTT connect refused: %s", st.gh, reason_code)
            return
        client.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
        _, st.sub_mid = client.subscribe(command_topic(st.gh), qos=QOS)
        client.publish(status_topic(st.gh), ONLINE, qos=QOS, retain=True)

    def _on_subscribe(self, _client: mqtt.Client, st: GreenhouseState, mid: int, reason_codes: list[Any],
                      _properties: Any) -> None:
        if mid == st.sub_mid and not any(rc.is_failure for rc in reason_codes):
            st.subscribed.set()

    def _on_disconnect(self, _client: mqtt.Client, st: GreenhouseState, _flags: Any, reason_code: Any,
                       _properties: Any) -> None:
        st.subscribed.clear()
        if self._started:
            logger.warning("%s: MQTT connection lost (%s)", st.gh, reason_code)


def _finite(x: Any, default: float) -> float:
    v = float(x)
    return v if math.isfinite(v) else default


def _opt(x: Any, lo: float, hi: float) -> float | None:
    """A reading, None when missing, clamped to the sensor's range like a saturated sensor."""
    v = float(x)
    return None if not math.isfinite(v) else min(max(v, lo), hi)


def _salvage_cmd_id(raw: bytes) -> UUID | None:
    """Best effort: a rejected command can only be acked if its cmd_id is readable."""
    try:
        obj = json.loads(raw)
        return UUID(str(obj["cmd_id"])) if isinstance(obj, dict) else None
    except (ValueError, TypeError, KeyError, RecursionError):
        return None


def run_plant_sim(args: argparse.Namespace) -> int:
    """``greentwin plant-sim``: run the emulator until Ctrl-C / SIGTERM."""
    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    url = getattr(args, "mqtt_url", None)
    if url is None:
        from app.core.config import get_settings

        url = get_settings().mqtt_url
    greenhouses = [g.strip() for g in str(args.greenhouses).split(",") if g.strip()]
    try:
        sim = PlantSim(url, greenhouses, speed=args.speed, dt_s=args.dt_s, seed=getattr(args, "seed", 0),
                       zones=getattr(args, "zones", 6))
    except ValueError as exc:
        logger.error("plant-sim: %s", exc)
        return 2
    stop = threading.Event()

    def _stop(signum: int, _frame: FrameType | None) -> None:
        logger.info("signal %d: stopping plant-sim", signum)
        stop.set()

    previous = {s: signal.signal(s, _stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        if not sim.start():
            logger.warning("not all edge boxes connected yet; paho keeps retrying in the background")
        logger.info("plant-sim: %s, one step (%g s simulated) every %g s", ", ".join(greenhouses), sim.dt_s,
                    sim.dt_s / sim.speed)
        sim.run(stop)
    finally:
        sim.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 0

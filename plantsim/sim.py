"""Edge-box emulator: one batched twin standing in for real greenhouses on the MQTT bus.

Each greenhouse gets its own MQTT client, as a real edge box would, so its retained
``online`` status and ``offline`` last will are its own and a broker disconnect fault hits only it.
Commands are applied at most once per cmd_id, dropped when older than their TTL, and a greenhouse
whose commands stop arriving for longer than the last TTL falls back to the safe state (all off).
What a box decides lives in :mod:`plantsim.edge`; this module owns the twin, the pacing,
the MQTT clients and the operator's fault buttons.

One clock: the telemetry's timestamp (``sim_time``), read in the site's time zone, is the hour of
day of every twin instance (its sun, its lamps' dark period) and of the outlook it serves, so the
service's time-of-day features, the plant's light and the forecast agree.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import numpy as np
import paho.mqtt.client as mqtt

from plantsim.edge import (
    DRIFT_VWC_PER_STEP,
    FAULT_KINDS,
    AckStatus,
    FaultKind,
    GreenhouseState,
    salvage_cmd_id,
)
from safety.action import safe_state
from twin.config import DEFAULT_ZONES
from twin.env import GreenhouseTwin
from twin.weather import HOURS_PER_YEAR
from wire.connection import (
    ONLINE,
    QOS,
    RECONNECT_MAX_S,
    RECONNECT_MIN_S,
    MqttTarget,
    TlsFiles,
    make_client,
    parse_mqtt_url,
)
from wire.topics import (
    TOPIC_ROOT,
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
    validate_topic_root,
)

logger = logging.getLogger(__name__)


class PlantSim:
    """Emulates edge boxes for ``greenhouses``; ``step_once`` advances and publishes one step.

    ``run`` paces steps at ``dt_s / speed`` wall seconds; tests call ``step_once`` directly so
    they never depend on wall-clock pacing.
    """

    def __init__(self, url: str | MqttTarget, greenhouses: list[str], *, speed: float = 1.0, dt_s: float = 60,
                 seed: int = 0, zones: int = DEFAULT_ZONES, clock: Callable[[], float] = time.time,
                 start_time: datetime | None = None, twin_overrides: dict[str, Any] | None = None,
                 tls: TlsFiles | None = None, site_timezone: str = "UTC", clock_offset_s: float = 0.0,
                 topic_root: str = TOPIC_ROOT) -> None:
        if not greenhouses:
            raise ValueError("at least one greenhouse is needed")
        if len(set(greenhouses)) != len(greenhouses):
            raise ValueError("greenhouse ids must be unique")
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.greenhouses = [validate_gh_id(gh) for gh in greenhouses]
        self.topic_root = validate_topic_root(topic_root)  # the service's (GREENTWIN_MQTT_TOPIC_ROOT)
        self.speed = float(speed)
        self.dt_s = float(dt_s)
        self.zones = int(zones)
        self.target = url if isinstance(url, MqttTarget) else parse_mqtt_url(url)
        self.twin = GreenhouseTwin(num_instances=len(greenhouses), seed=seed, zones=self.zones,
                                   dt_s=self.dt_s, **(twin_overrides or {}))
        self.twin.reset()
        self._lamps_ours_drawn = np.asarray(self.twin.backend.to_numpy(self.twin.params.lamps_ours),
                                            dtype=np.float64)
        self.rated_current_a = self.twin.config.hydraulics.pump_rated_current_a
        self.clock_offset_s = float(clock_offset_s)
        """How far this box's clock runs ahead of the real one (behind when negative): its telemetry,
        acks and e-stops are stamped by it and it judges a command's TTL by it, like a box whose
        clock is set wrong."""
        # The first step lands on the box's clock: at speed 1 and no offset its timestamps are the
        # real time, as the service's clock-skew check expects of an edge box.
        self.sim_time = start_time or self._now() - timedelta(seconds=self.dt_s)
        self.site_tz = ZoneInfo(site_timezone)
        """The service's site time zone: the twin's hours of day are its local hours."""
        self._align_clock()
        self._clock = clock
        self._lock = threading.RLock()
        self._index = {gh: i for i, gh in enumerate(self.greenhouses)}
        self._started = False
        self.state: dict[str, GreenhouseState] = {}
        for gh in self.greenhouses:
            client = make_client(self.target, f"greentwin-edge-{gh}-{uuid.uuid4().hex[:6]}",
                                 status_topic(gh, self.topic_root), tls)
            st = GreenhouseState(gh=gh, zones=self.zones, client=client)
            client.user_data_set(st)
            client.on_connect = self._on_connect
            client.on_subscribe = self._on_subscribe
            client.on_disconnect = self._on_disconnect
            client.message_callback_add(command_topic(gh, self.topic_root), self._on_command)
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
                    st.client.publish(status_topic(st.gh, self.topic_root), b"offline", qos=QOS,
                                      retain=True).wait_for_publish(2.0)
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
                st.check_watchdog(now)
                if st.drifting:
                    st.drift_vwc += DRIFT_VWC_PER_STEP
            actions = np.stack([self._effective_action(st) for st in self.state.values()])
            commanded = {gh: st.action.copy() for gh, st in self.state.items()}
            self._hand_lamps_to_site()
            _, _, _, _, info = self.twin.step(actions)
            lights = 100.0 * np.asarray(self.twin.backend.to_numpy(info["lights"]), dtype=np.float64)
            for gh in (gh for gh, st in self.state.items() if st.site_lamps):  # it reports the site's level
                commanded[gh][-1] = lights[self._index[gh]]
            self._on_step(self.sim_time, actions, info)
            self.sim_time += timedelta(seconds=self.dt_s)
            self._align_clock()
            readings = {k: np.asarray(v) for k, v in info["readings"].items()}
            out: dict[str, Telemetry] = {}
            for gh, st in self.state.items():
                tel = st.telemetry(readings, self._index[gh], commanded[gh], self.sim_time,
                                   self.rated_current_a)
                st.seq += 1
                out[gh] = tel
        for gh, tel in out.items():
            client = self.state[gh].client
            if client.is_connected():
                client.publish(telemetry_topic(gh, self.topic_root), encode(tel), qos=QOS)
            else:
                logger.debug("%s offline: telemetry seq %d not sent", gh, tel.seq)
        return out

    def _now(self) -> datetime:
        """This box's idea of the time (the real time plus its clock offset)."""
        return datetime.now(UTC) + timedelta(seconds=self.clock_offset_s)

    def _on_step(self, start: datetime, actions: np.ndarray, info: dict[str, Any]) -> None:
        """What the plant really ran over the step from ``start`` (rows in ``greenhouses`` order): the
        hook a recording subclass uses to check the safety limits against the plant itself."""

    def _align_clock(self) -> None:
        """Move each twin instance to the site-local hour of day of ``sim_time``, keeping its day of
        the year (its season): a new episode (its start hour drawn at random) and a daylight-saving
        change are the only times this moves anything."""
        local = self.sim_time.astimezone(self.site_tz)
        hour_of_day = local.hour + local.minute / 60.0 + (local.second + local.microsecond * 1e-6) / 3600.0
        b, params = self.twin.backend, self.twin.params
        start = np.asarray(b.to_numpy(params.start_hour), dtype=np.float64)
        now = start + np.asarray(b.to_numpy(self.twin.state.step), dtype=np.float64) * self.twin.config.dt_h
        shift = (hour_of_day - now % 24.0 + 12.0) % 24.0 - 12.0  # the nearer way round the clock
        if np.all(np.abs(shift) < 1e-3):
            return
        start = (start + shift) % HOURS_PER_YEAR  # the weather tables wrap the year the same way
        params.start_hour[:] = b.asarray(start, dtype=b.float)

    def _hand_lamps_to_site(self) -> None:
        """Instances whose last command left the lamps to the site run on its schedule
        (``lamps_ours`` off)."""
        site = np.array([self.state[gh].site_lamps for gh in self.greenhouses])
        self.twin.params.lamps_ours[:] = self.twin.backend.asarray(
            np.where(site, 0.0, self._lamps_ours_drawn))

    def _effective_action(self, st: GreenhouseState) -> np.ndarray:
        """What the plant really does: the set-points, with stuck valves holding their position."""
        action = safe_state(st.zones) if st.estop else st.action.copy()
        for zone, pos in st.stuck.items():
            action[zone] = pos
        return action

    # --- commands ----------------------------------------------------------------------------

    def _on_command(self, client: mqtt.Client, st: GreenhouseState, msg: mqtt.MQTTMessage) -> None:
        """Validate, dedupe, TTL-check and apply one command, then ack; never raises (paho thread)."""
        try:
            status, reason, cmd_id = self._handle_command(st, msg.payload)
            if cmd_id is None:
                logger.warning("%s: dropped command without a usable cmd_id: %s", st.gh, reason)
                return
            ack = Ack(cmd_id=cmd_id, ts=self._now(), status=status, reason=reason)
            client.publish(ack_topic(st.gh, self.topic_root), encode(ack), qos=QOS)
        except Exception:  # noqa: BLE001 - a paho callback must never raise
            logger.exception("%s: failed to handle command", st.gh)

    def _handle_command(self, st: GreenhouseState, raw: bytes) -> tuple[AckStatus, str | None, UUID | None]:
        try:
            cmd = parse_payload(raw, Command)
        except PayloadError as exc:
            return "rejected", f"{exc.reason_code}: {exc.detail}"[:200], salvage_cmd_id(raw)
        with self._lock:
            status, reason = st.answer(cmd, lambda: self._decide(st, cmd))
        return status, reason, cmd.cmd_id

    def _decide(self, st: GreenhouseState, cmd: Command) -> tuple[AckStatus, str | None]:
        """Judge a new command against this simulator's clock (the hook a recording subclass wraps)."""
        return st.decide(cmd, self._clock() + self.clock_offset_s)

    # --- operator actions and faults ---------------------------------------------------------

    def press_estop(self, gh: str, source: str = "panel") -> None:
        """Latch everything off until ``release_estop``; the service hears about it on the estop topic."""
        st = self.state[gh]
        with self._lock:
            st.estop = True
            st.action = safe_state(st.zones)
            st.held_seq = None
        self._publish_estop(st, pressed=True, source=source)

    def release_estop(self, gh: str, source: str = "panel") -> None:
        """Unlatch; actuators stay off until the next valid command (never resume an old one)."""
        st = self.state[gh]
        with self._lock:
            st.estop = False
        self._publish_estop(st, pressed=False, source=source)

    def _publish_estop(self, st: GreenhouseState, *, pressed: bool, source: str) -> None:
        event = EstopEvent(ts=self._now(), pressed=pressed, source=source)
        st.client.publish(estop_topic(st.gh, self.topic_root), encode(event), qos=QOS)

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
            st.drop_link(seconds)

    def clear_faults(self, gh: str) -> None:
        """Remove sensor and valve faults (a disconnect heals by itself)."""
        st = self.state[gh]
        with self._lock:
            st.nan_zone, st.drifting, st.drift_vwc = None, False, 0.0
            st.stuck.clear()

    # --- paho callbacks ----------------------------------------------------------------------

    def _on_connect(self, client: mqtt.Client, st: GreenhouseState, _flags: Any, reason_code: Any,
                    _properties: Any) -> None:
        if reason_code.is_failure:
            logger.error("%s: MQTT connect refused: %s", st.gh, reason_code)
            return
        client.reconnect_delay_set(min_delay=RECONNECT_MIN_S, max_delay=RECONNECT_MAX_S)
        _, st.sub_mid = client.subscribe(command_topic(st.gh, self.topic_root), qos=QOS)
        client.publish(status_topic(st.gh, self.topic_root), ONLINE, qos=QOS, retain=True)

    def _on_subscribe(self, _client: mqtt.Client, st: GreenhouseState, mid: int, reason_codes: list[Any],
                      _properties: Any) -> None:
        if mid == st.sub_mid and not any(rc.is_failure for rc in reason_codes):
            st.subscribed.set()

    def _on_disconnect(self, _client: mqtt.Client, st: GreenhouseState, _flags: Any, reason_code: Any,
                       _properties: Any) -> None:
        st.subscribed.clear()
        if self._started:
            logger.warning("%s: MQTT connection lost (%s)", st.gh, reason_code)


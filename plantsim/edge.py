"""What one emulated edge box knows and decides, apart from the MQTT session that carries it.

:class:`GreenhouseState` holds a box's set-points, watchdog, command memory and injected faults;
its methods answer a command (at most once per cmd_id, never after its TTL), turn the twin's raw
readings into contract telemetry, and fall back to the safe state when commands stop arriving.
:class:`plantsim.sim.PlantSim` owns the twin, the clock, the lock and the clients around them.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal, get_args
from uuid import UUID

import numpy as np
import paho.mqtt.client as mqtt

from safety.action import safe_state
from wire.topics import Command, Telemetry

logger = logging.getLogger(__name__)

AckStatus = Literal["applied", "rejected", "expired"]
FaultKind = Literal["sensor_nan", "drift", "stuck_valve", "broker_disconnect"]
Outcome = tuple[AckStatus, str | None]
"""An ack's status and reason."""
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
    held_seq: int | None = None
    """The command whose set-points the box holds (reported as telemetry's ``cmd_seq``); None in its safe
    state."""
    outcomes: OrderedDict[UUID, Outcome] = field(default_factory=OrderedDict)
    nan_zone: int | None = None
    drift_vwc: float = 0.0
    drifting: bool = False
    stuck: dict[int, float] = field(default_factory=dict)
    site_lamps: bool = False
    """The last applied command left the lamps to the site (``light_pct`` null): the site's climate
    computer runs them, through every fall-back, until a command sets a level again."""
    fence: int = 0
    """Highest fencing token seen: a command with a lower one comes from a replica that lost its lease."""
    subscribed: threading.Event = field(default_factory=threading.Event)
    sub_mid: int | None = None

    def __post_init__(self) -> None:
        self.action = safe_state(self.zones)

    def check_watchdog(self, now: float) -> None:
        """Commands stopped arriving for longer than the last TTL: the service is gone, go safe."""
        if self.last_command_at is None or self.last_ttl_s is None or self.failsafe:
            return
        if now - self.last_command_at > self.last_ttl_s:
            logger.warning("%s: no valid command for %.1f s (> ttl %.1f s); safe state", self.gh,
                           now - self.last_command_at, self.last_ttl_s)
            self.action = safe_state(self.zones)
            self.failsafe = True
            self.held_seq = None

    def answer(self, cmd: Command, decide: Callable[[], Outcome]) -> Outcome:
        """The ack for ``cmd``: ``decide()`` for a new cmd_id; a redelivered or retried one gets its
        first answer again, never a second apply."""
        previous = self.outcomes.get(cmd.cmd_id)
        if previous is not None:
            logger.info("%s: duplicate command %s, re-acking %s", self.gh, cmd.cmd_id, previous[0])
            return previous
        outcome = decide()
        self.outcomes[cmd.cmd_id] = outcome
        while len(self.outcomes) > REMEMBERED_CMD_IDS:
            self.outcomes.popitem(last=False)
        return outcome

    def decide(self, cmd: Command, now: float) -> Outcome:
        """Apply ``cmd`` unless it is fenced off, past its TTL, sized for another zone count, or meets a
        latched e-stop."""
        token = cmd.fencing_token or 0
        if token < self.fence:
            return "rejected", f"fenced: token {token} < {self.fence} (a newer lease holder commands)"
        self.fence = token  # even a command refused below proves its sender holds the newer lease
        age = now - cmd.ts.timestamp()
        if age > cmd.ttl_s:
            return "expired", f"{age:.1f} s old > ttl {cmd.ttl_s:g} s"
        if len(cmd.valves) != self.zones:
            return "rejected", f"zone_count: {len(cmd.valves)} valves for {self.zones} zones"
        if self.estop:
            return "rejected", "estop latched"
        # A valid command feeds the watchdog even in estop mode: the service is alive.
        self.last_command_at, self.last_ttl_s, self.failsafe = now, cmd.ttl_s, False
        if cmd.mode == "estop":
            self.action = safe_state(self.zones)
        else:
            self.site_lamps = cmd.light_pct is None
            self.action = np.array([*cmd.valves, cmd.pump_pct, cmd.light_pct or 0.0], dtype=np.float64)
        self.held_seq = cmd.seq
        self.applied_count += 1
        return "applied", None

    def drop_link(self, seconds: float) -> None:
        """Cut the socket without DISCONNECT (so the broker fires the will) and hold off reconnecting."""
        delay = max(1, math.ceil(seconds))
        self.client.reconnect_delay_set(min_delay=delay, max_delay=delay)
        sock = self.client.socket()
        if sock is None:
            return
        try:
            sock.shutdown(2)  # socket.SHUT_RDWR: paho's thread sees the loss and reconnects after `delay`
        except OSError as exc:
            logger.warning("%s: could not drop the link: %s", self.gh, exc)

    def telemetry(self, r: dict[str, np.ndarray], i: int, action: np.ndarray, ts: datetime,
                  rated_current_a: float) -> Telemetry:
        """Contract payload from instance ``i``'s raw readings; NaN becomes None, values saturate at
        the schema's limits, and the valves, pump and lights report ``action`` (the set-points)."""
        soil = np.clip(r["soil_vwc"][i].astype(np.float64), 0.0, 1.0)
        if self.drifting and not math.isnan(soil[0, 0]):
            soil[0, 0] = min(1.0, soil[0, 0] + self.drift_vwc)
        if self.nan_zone is not None:
            soil[self.nan_zone, :] = np.nan
        z = self.zones
        current = _finite(r["pump_current_frac"][i], 0.0) * rated_current_a
        return Telemetry(
            ts=ts,
            boot_id=self.boot_id,
            seq=self.seq,
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
            estop=self.estop,
            cmd_seq=self.held_seq,
        )


def _finite(x: Any, default: float) -> float:
    v = float(x)
    return v if math.isfinite(v) else default


def _opt(x: Any, lo: float, hi: float) -> float | None:
    """A reading, None when missing, clamped to the sensor's range like a saturated sensor."""
    v = float(x)
    return None if not math.isfinite(v) else min(max(v, lo), hi)


def salvage_cmd_id(raw: bytes) -> UUID | None:
    """Best effort: a rejected command can only be acked if its cmd_id is readable."""
    try:
        obj = json.loads(raw)
        return UUID(str(obj["cmd_id"])) if isinstance(obj, dict) else None
    except (ValueError, TypeError, KeyError, RecursionError):
        return None

"""Topic layout ``<root>/<gh>/<channel>`` (root ``greentwin`` unless the site names another) and the
JSON payloads exchanged with edge boxes.

Everything arriving from the network goes through :func:`parse_payload` / :func:`parse_telemetry`,
which turn *any* malformed input into one :class:`PayloadError` carrying a short, stable reason
code, so the bridge can count rejections per reason and never crash on a bad message.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Final, Literal, NoReturn, TypeVar, get_args
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from wire.fields import AckReason, DbTimestamp, EstopSource, ShortText

TOPIC_ROOT: Final = "greentwin"
"""The first level of every topic unless a site names another (``GREENTWIN_MQTT_TOPIC_ROOT``): services
and edge boxes with different roots share a broker without hearing each other (``greentwin demo``
takes one of its own)."""
Channel = Literal["telemetry", "command", "ack", "status", "estop"]
CHANNELS: Final[tuple[str, ...]] = get_args(Channel)

# Lower-case slug: safe in topics (no '+', '#', '/'), URLs and file names.
GH_ID_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
# The broker's ACL gives an edge box the topics of its username: these names are the service's.
RESERVED_GH_IDS: Final = frozenset({"service", "greentwin-service"})

MAX_PAYLOAD_BYTES: Final = 64 * 1024
# Telemetry is object -> list -> list -> number (depth 3); anything much deeper is hostile.
MAX_JSON_DEPTH: Final = 8
MAX_ZONES: Final = 64
MAX_PROBES_PER_ZONE: Final = 8
MAX_LIST_ITEMS: Final = MAX_ZONES
"""No list in any payload is longer (zones; probes per zone are fewer): a longer one is refused before
the schema is asked, whose cost grows with every item it checks before it gets to the length."""

ReasonCode = Literal["too_large", "not_utf8", "not_json", "too_deep", "non_finite", "schema", "zone_count"]
REASON_CODES: Final[tuple[str, ...]] = get_args(ReasonCode)

M = TypeVar("M", bound=BaseModel)


class PayloadError(ValueError):
    """A rejected payload; ``reason_code`` is a stable Prometheus label, ``detail`` is for logs."""

    def __init__(self, reason_code: ReasonCode, detail: str) -> None:
        super().__init__(f"{reason_code}: {detail}")
        self.reason_code: ReasonCode = reason_code
        self.detail = detail


# --- topics ---------------------------------------------------------------------------------


def validate_gh_id(gh_id: str) -> str:
    """Return ``gh_id`` if it is a valid greenhouse slug, else raise ValueError (keeps wildcards out of
    topics)."""
    if not isinstance(gh_id, str) or GH_ID_RE.fullmatch(gh_id) is None:
        raise ValueError(f"invalid greenhouse id {gh_id!r}: expected [a-z0-9][a-z0-9_-]{{0,62}}")
    if gh_id in RESERVED_GH_IDS:
        raise ValueError(f"greenhouse id {gh_id!r} is reserved for the service")
    return gh_id


def validate_topic_root(root: str) -> str:
    """Return ``root`` if it is one topic level spelled like a greenhouse id (no ``/``, ``+``, ``#``,
    so a filter built on it matches only its own topics), else raise ValueError."""
    if not isinstance(root, str) or GH_ID_RE.fullmatch(root) is None:
        raise ValueError(f"invalid MQTT topic root {root!r}: expected [a-z0-9][a-z0-9_-]{{0,62}}")
    return root


def topic(gh_id: str, channel: Channel, root: str = TOPIC_ROOT) -> str:
    """Concrete topic for one greenhouse and channel."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}")
    return f"{validate_topic_root(root)}/{validate_gh_id(gh_id)}/{channel}"


def telemetry_topic(gh_id: str, root: str = TOPIC_ROOT) -> str:
    """Edge box -> service sensor readings."""
    return topic(gh_id, "telemetry", root)


def command_topic(gh_id: str, root: str = TOPIC_ROOT) -> str:
    """Service -> edge box actuator commands."""
    return topic(gh_id, "command", root)


def ack_topic(gh_id: str, root: str = TOPIC_ROOT) -> str:
    """Edge box -> service command acknowledgements."""
    return topic(gh_id, "ack", root)


def status_topic(gh_id: str, root: str = TOPIC_ROOT) -> str:
    """Edge box online/offline (retained, also its last will)."""
    return topic(gh_id, "status", root)


def estop_topic(gh_id: str, root: str = TOPIC_ROOT) -> str:
    """Physical emergency-stop button events."""
    return topic(gh_id, "estop", root)


def service_status_topic(root: str = TOPIC_ROOT) -> str:
    """The service's own online/offline (retained, also its last will)."""
    return f"{validate_topic_root(root)}/service/status"


def subscription(channel: Channel, root: str = TOPIC_ROOT) -> str:
    """Wildcard filter for one channel of every greenhouse, e.g. ``greentwin/+/telemetry``."""
    if channel not in CHANNELS:
        raise ValueError(f"unknown channel {channel!r}")
    return f"{validate_topic_root(root)}/+/{channel}"


def parse_topic(name: str, root: str = TOPIC_ROOT) -> tuple[str, Channel]:
    """Split a received topic into (greenhouse id, channel); ValueError for anything not ours."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != root or parts[2] not in CHANNELS:
        raise ValueError(f"not a greentwin topic: {name!r}")
    channel: Channel = parts[2]  # type: ignore[assignment]
    return validate_gh_id(parts[1]), channel


# --- payloads -------------------------------------------------------------------------------

# strict: no "1" -> 1 or 1 -> True coercion; JSON strings still become datetimes and UUIDs.
_PAYLOAD_CONFIG = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True, frozen=True)

# Strict int in [0, 1]: JSON true/false and 1.0 are refused (Literal[0, 1] would accept true).
Bit = Annotated[int, Field(ge=0, le=1)]
Percent = Annotated[float, Field(ge=0, le=100)]
Vwc = Annotated[float, Field(ge=0, le=1)]
# Strings and timestamps within what the database stores (wire.fields): refused here, never in the writer.
ShortStr = ShortText
Seq = Annotated[int, Field(ge=0, le=2**63 - 1)]


class Telemetry(BaseModel):
    """One sensor snapshot; ``None`` marks a reading the edge box could not take (failed probe)."""

    model_config = _PAYLOAD_CONFIG

    ts: DbTimestamp
    boot_id: ShortStr
    seq: Seq
    soil_vwc: Annotated[
        list[Annotated[list[Vwc | None], Field(min_length=1, max_length=MAX_PROBES_PER_ZONE)]],
        Field(min_length=1, max_length=MAX_ZONES),
    ]
    air_temp_c: Annotated[float, Field(ge=-40, le=70)] | None
    air_rh_pct: Percent | None
    par_umol_m2_s: Annotated[float, Field(ge=0, le=3000)] | None
    co2_ppm: Annotated[float, Field(ge=0, le=10000)] | None
    leaf_temp_c: Annotated[float, Field(ge=-40, le=70)] | None
    flow_l_min: Annotated[float, Field(ge=0, le=1000)]
    pump_current_a: Annotated[float, Field(ge=0, le=100)]
    valve_open: Annotated[list[Bit], Field(min_length=1, max_length=MAX_ZONES)]
    pump_pct: Percent
    light_pct: Percent
    estop: bool
    cmd_seq: Seq | None = None
    """The ``seq`` of the command whose set-points the box holds; null (or absent) while it holds its
    own safe state: after a boot, its TTL fall-back, an e-stop. Valve feedback is judged against it."""


class Command(BaseModel):
    """Actuator set-points; the edge box drops it once ``ts + ttl_s`` has passed."""

    model_config = _PAYLOAD_CONFIG

    cmd_id: UUID
    ts: DbTimestamp
    seq: Seq
    ttl_s: Annotated[float, Field(gt=0, le=3600)]
    mode: Literal["auto", "manual", "estop"]
    valves: Annotated[list[Bit], Field(min_length=1, max_length=MAX_ZONES)]
    pump_pct: Percent
    light_pct: Percent | None
    """Null: the lamps are not greentwin's (the greenhouse's ``lamps_ours`` setting is off); the edge box
    leaves them to the site's climate computer, in its safe state too, and reports the level they run at."""
    policy_version: ShortStr
    # The sender's lease on this greenhouse (app.leases); the edge box refuses one lower than the
    # highest it has seen. Absent (a service without leases) counts as 0.
    fencing_token: Seq | None = None


class Ack(BaseModel):
    """The edge box's answer to one command."""

    model_config = _PAYLOAD_CONFIG

    cmd_id: UUID
    ts: DbTimestamp
    status: Literal["applied", "rejected", "expired"]
    reason: AckReason | None = None


class EstopEvent(BaseModel):
    """Emergency-stop button pressed or released, and where (panel, remote, watchdog)."""

    model_config = _PAYLOAD_CONFIG

    ts: DbTimestamp
    pressed: bool
    source: EstopSource


def _reject_constant(token: str) -> NoReturn:
    """``json`` accepts NaN/Infinity tokens by default; sensor data must be finite."""
    raise PayloadError("non_finite", f"non-finite number {token}")


def _check_shape(obj: Any) -> None:
    """Refuse decoded JSON nested deeper than :data:`MAX_JSON_DEPTH` or holding a list longer than
    :data:`MAX_LIST_ITEMS`, iteratively (no recursion on hostile input) and at the first offender."""
    stack = [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise PayloadError("too_deep", f"depth {depth} > {MAX_JSON_DEPTH}")
            if isinstance(node, list) and len(node) > MAX_LIST_ITEMS:
                raise PayloadError("schema", f"a list of {len(node)} items > {MAX_LIST_ITEMS}")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)


def _has_non_finite(obj: Any) -> bool:
    """Floats that overflowed to inf (``1e999``) slip past ``parse_constant``; catch them here."""
    stack = [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, float) and not math.isfinite(node):
            return True
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def _schema_detail(exc: ValidationError) -> str:
    """First few validation errors, short enough for one log line."""
    parts = [f"{'.'.join(str(p) for p in e['loc']) or '<root>'}: {e['msg']}" for e in exc.errors()[:3]]
    more = exc.error_count() - len(parts)
    return "; ".join(parts) + (f" (+{more} more)" if more > 0 else "")


def parse_payload(raw: bytes, model: type[M]) -> M:
    """Decode and validate one MQTT payload; raises only :class:`PayloadError`."""
    if not isinstance(raw, bytes | bytearray):
        raise PayloadError("schema", f"payload must be bytes, got {type(raw).__name__}")
    if len(raw) > MAX_PAYLOAD_BYTES:
        raise PayloadError("too_large", f"{len(raw)} bytes > {MAX_PAYLOAD_BYTES}")
    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError("not_utf8", str(exc)) from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise PayloadError("too_deep", "nesting exceeds the parser's recursion limit") from None
    except ValueError as exc:  # JSONDecodeError, and int strings past sys.get_int_max_str_digits
        if isinstance(exc, PayloadError):
            raise
        raise PayloadError("not_json", str(exc)[:200]) from None
    _check_shape(obj)
    if _has_non_finite(obj):
        raise PayloadError("non_finite", "number overflows to infinity")
    try:
        # Validate from the text, not ``obj``: JSON-mode strictness turns strings into datetimes/UUIDs.
        return model.model_validate_json(text, strict=True)
    except ValidationError as exc:
        raise PayloadError("schema", _schema_detail(exc)) from None
    except (ValueError, TypeError) as exc:
        raise PayloadError("schema", str(exc)[:200]) from None


def parse_telemetry(raw: bytes, zones: int) -> Telemetry:
    """Validate telemetry for a greenhouse with ``zones`` zones; raises only :class:`PayloadError`."""
    tel = parse_payload(raw, Telemetry)
    if len(tel.soil_vwc) != zones or len(tel.valve_open) != zones:
        raise PayloadError(
            "zone_count",
            f"expected {zones} zones, got soil_vwc={len(tel.soil_vwc)} valve_open={len(tel.valve_open)}",
        )
    return tel


def encode(payload: BaseModel) -> bytes:
    """Serialise an outgoing payload (UUIDs as strings, timestamps ISO-8601 with offset)."""
    return payload.model_dump_json().encode("utf-8")


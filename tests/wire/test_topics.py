"""Topic helpers and payload parsing: good payloads parse, every bad class has its reason code."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from wire.topics import (
    MAX_PAYLOAD_BYTES,
    REASON_CODES,
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
    parse_telemetry,
    parse_topic,
    service_status_topic,
    status_topic,
    subscription,
    telemetry_topic,
    validate_gh_id,
    validate_topic_root,
)

ZONES = 3


def good() -> dict[str, Any]:
    return {
        "ts": "2026-05-01T12:00:00+02:00",
        "boot_id": "b-7f3a",
        "seq": 42,
        "soil_vwc": [[0.21, 0.22], [0.3, None], [0.0, 1]],
        "air_temp_c": 24.5,
        "air_rh_pct": 61.0,
        "par_umol_m2_s": 850,
        "co2_ppm": 420.0,
        "leaf_temp_c": None,
        "flow_l_min": 12.5,
        "pump_current_a": 3.1,
        "valve_open": [1, 0, 0],
        "pump_pct": 55.0,
        "light_pct": 0,
        "estop": False,
    }


def raw(obj: Any) -> bytes:
    return json.dumps(obj).encode()


def with_(**changes: Any) -> bytes:
    return raw(good() | changes)


def without(key: str) -> bytes:
    return raw({k: v for k, v in good().items() if k != key})


# --- topics ---------------------------------------------------------------------------------


def test_topics() -> None:
    assert telemetry_topic("gh-1") == "greentwin/gh-1/telemetry"
    assert command_topic("gh-1") == "greentwin/gh-1/command"
    assert ack_topic("gh_2") == "greentwin/gh_2/ack"
    assert status_topic("0") == "greentwin/0/status"
    assert estop_topic("a" * 63) == f"greentwin/{'a' * 63}/estop"
    assert subscription("telemetry") == "greentwin/+/telemetry"
    assert parse_topic("greentwin/gh-1/ack") == ("gh-1", "ack")


@pytest.mark.parametrize("gh", ["", "GH1", "-gh", "_gh", "gh/1", "gh+", "gh#", "+", "#", "gh 1", "a" * 64,
                                "gh\x00", "é"])
def test_invalid_gh_ids(gh: str) -> None:
    with pytest.raises(ValueError, match="invalid greenhouse id"):
        validate_gh_id(gh)
    with pytest.raises(ValueError):
        telemetry_topic(gh)


@pytest.mark.parametrize(
    "name", ["greentwin/gh-1", "greentwin/gh-1/telemetry/x", "other/gh-1/ack", "greentwin/gh-1/debug",
             "greentwin/+/ack"]
)
def test_parse_topic_rejects_foreign(name: str) -> None:
    with pytest.raises(ValueError):
        parse_topic(name)


def test_another_root_is_another_namespace() -> None:
    """A site's (or a demo's) own root: its topics, filters and service status, and nobody else's."""
    root = "greentwin-demo-1a2b3c4d"
    assert telemetry_topic("gh1", root) == f"{root}/gh1/telemetry"
    assert command_topic("gh1", root) == f"{root}/gh1/command"
    assert subscription("ack", root) == f"{root}/+/ack"
    assert service_status_topic(root) == f"{root}/service/status"
    assert service_status_topic() == "greentwin/service/status"
    assert parse_topic(f"{root}/gh1/estop", root) == ("gh1", "estop")
    with pytest.raises(ValueError, match="not a greentwin topic"):
        parse_topic("greentwin/gh1/telemetry", root)
    with pytest.raises(ValueError, match="not a greentwin topic"):
        parse_topic(f"{root}/gh1/telemetry")


@pytest.mark.parametrize("root", ["", "site/a", "+", "#", "site+", "Site", "a" * 64, "-x"])
def test_a_root_is_one_plain_level(root: str) -> None:
    """Slashes or wildcards would make a filter on the root match other sites' topics."""
    with pytest.raises(ValueError, match="invalid MQTT topic root"):
        validate_topic_root(root)
    with pytest.raises(ValueError, match="invalid MQTT topic root"):
        subscription("telemetry", root)


# --- telemetry ------------------------------------------------------------------------------


def test_good_telemetry() -> None:
    tel = parse_telemetry(raw(good()), zones=ZONES)
    assert isinstance(tel, Telemetry)
    assert tel.ts == datetime(2026, 5, 1, 10, 0, tzinfo=UTC)
    assert tel.ts.utcoffset() == timedelta(hours=2)
    assert tel.soil_vwc[1] == [0.3, None] and tel.leaf_temp_c is None
    assert tel.valve_open == [1, 0, 0] and tel.estop is False
    assert parse_telemetry(bytearray(raw(good())), zones=ZONES) == tel


BAD: list[tuple[str, bytes, str]] = [
    ("too_large", with_(boot_id="x" * MAX_PAYLOAD_BYTES), "too_large"),
    ("invalid utf-8", b'{"boot_id": "\xff\xfe"}', "not_utf8"),
    ("truncated", raw(good())[:-5], "not_json"),
    ("empty", b"", "not_json"),
    ("trailing garbage", raw(good()) + b"x", "not_json"),
    ("huge int", b"1" * 5000, "not_json"),
    ("NaN token", raw(good()).replace(b'"air_temp_c": 24.5', b'"air_temp_c": NaN'), "non_finite"),
    ("Infinity token", raw(good()).replace(b'"flow_l_min": 12.5', b'"flow_l_min": Infinity'), "non_finite"),
    ("-Infinity token", raw(good()).replace(b'"co2_ppm": 420.0', b'"co2_ppm": -Infinity'), "non_finite"),
    ("overflow to inf", raw(good()).replace(b'"pump_pct": 55.0', b'"pump_pct": 1e999'), "non_finite"),
    ("deep nesting", with_(soil_vwc=[[[[[[[[[[0.2]]]]]]]]]]), "too_deep"),
    ("parser recursion", b"[" * 30000 + b"]" * 30000, "too_deep"),
    ("naive ts", with_(ts="2026-05-01T12:00:00"), "schema"),
    ("date only", with_(ts="2026-05-01"), "schema"),
    ("epoch ts", with_(ts=1777636800), "schema"),
    ("extra field", with_(debug=True), "schema"),
    ("missing field", without("pump_pct"), "schema"),
    ("array root", raw([good()]), "schema"),
    ("string number", with_(air_temp_c="24.5"), "schema"),
    ("bool as valve", with_(valve_open=[True, False, False]), "schema"),
    ("valve 2", with_(valve_open=[2, 0, 0]), "schema"),
    ("float seq", with_(seq=1.5), "schema"),
    ("negative seq", with_(seq=-1), "schema"),
    ("int estop", with_(estop=1), "schema"),
    ("vwc > 1", with_(soil_vwc=[[1.2], [0.2], [0.2]]), "schema"),
    ("vwc < 0", with_(soil_vwc=[[-0.01], [0.2], [0.2]]), "schema"),
    ("empty zone", with_(soil_vwc=[[], [0.2], [0.2]]), "schema"),
    ("too many probes", with_(soil_vwc=[[0.2] * 9, [0.2], [0.2]]), "schema"),
    ("air too hot", with_(air_temp_c=70.5), "schema"),
    ("air too cold", with_(air_temp_c=-41), "schema"),
    ("rh > 100", with_(air_rh_pct=101), "schema"),
    ("par > 3000", with_(par_umol_m2_s=3001), "schema"),
    ("co2 > 10000", with_(co2_ppm=10001), "schema"),
    ("negative flow", with_(flow_l_min=-0.1), "schema"),
    ("negative current", with_(pump_current_a=-1), "schema"),
    ("pump > 100", with_(pump_pct=100.5), "schema"),
    ("light < 0", with_(light_pct=-1), "schema"),
    ("empty boot id", with_(boot_id=""), "schema"),
    ("soil zones", with_(soil_vwc=[[0.2], [0.2]]), "zone_count"),
    ("valve zones", with_(valve_open=[0, 0, 0, 0]), "zone_count"),
]


@pytest.mark.parametrize("payload, reason", [(p, r) for _, p, r in BAD], ids=[name for name, _, _ in BAD])
def test_bad_telemetry_reason_codes(payload: bytes, reason: str) -> None:
    with pytest.raises(PayloadError) as info:
        parse_telemetry(payload, zones=ZONES)
    assert info.value.reason_code == reason
    assert reason in REASON_CODES
    assert info.value.detail and len(str(info.value)) < 1000


def test_not_bytes_is_payload_error() -> None:
    with pytest.raises(PayloadError) as info:
        parse_telemetry("{}", zones=ZONES)  # type: ignore[arg-type]
    assert info.value.reason_code == "schema"


# --- command / ack / estop ------------------------------------------------------------------


def test_command_round_trip() -> None:
    cmd = Command(
        cmd_id=uuid.uuid4(),
        ts=datetime.now(timezone(timedelta(hours=-5))),
        seq=7,
        ttl_s=30,
        mode="auto",
        valves=[1, 0, 1],
        pump_pct=40.0,
        light_pct=0.0,
        policy_version="ppo-2026.05.01",
    )
    body = json.loads(encode(cmd))
    assert body["cmd_id"] == str(cmd.cmd_id) and body["ts"].endswith("-05:00")
    assert parse_payload(encode(cmd), Command) == cmd


@pytest.mark.parametrize(
    "change",
    [{"ttl_s": 0}, {"mode": "turbo"}, {"cmd_id": "not-a-uuid"}, {"valves": []},
     {"ts": "2026-05-01T12:00:00"}],
)
def test_command_rejects(change: dict[str, Any]) -> None:
    body = {
        "cmd_id": str(uuid.uuid4()), "ts": "2026-05-01T12:00:00Z", "seq": 1, "ttl_s": 30, "mode": "manual",
        "valves": [0], "pump_pct": 0, "light_pct": 0, "policy_version": "expert",
    }
    parse_payload(raw(body), Command)
    with pytest.raises(PayloadError) as info:
        parse_payload(raw(body | change), Command)
    assert info.value.reason_code == "schema"


def test_ack_and_estop() -> None:
    cid = uuid.uuid4()
    ack = parse_payload(raw({"cmd_id": str(cid), "ts": "2026-05-01T12:00:00Z", "status": "expired"}), Ack)
    assert ack.cmd_id == cid and ack.reason is None
    with pytest.raises(PayloadError):
        parse_payload(raw({"cmd_id": str(cid), "ts": "2026-05-01T12:00:00Z", "status": "ok"}), Ack)
    ev = parse_payload(raw({"ts": "2026-05-01T12:00:00+00:00", "pressed": True, "source": "panel"}),
                       EstopEvent)
    assert ev.pressed is True
    with pytest.raises(PayloadError):
        parse_payload(raw({"ts": "2026-05-01T12:00:00+00:00", "pressed": "yes", "source": "panel"}),
                      EstopEvent)


# --- fuzz -----------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda children: (st.lists(children, max_size=4)
                      | st.dictionaries(st.text(max_size=6), children, max_size=4)),
    max_leaves=8,
)
# Generation, not parsing (~0.2 ms), dominates; sizes are kept small so 1,000 examples stay fast.
FUZZ = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


def _only_payload_errors(payload: bytes, zones: int = ZONES) -> None:
    try:
        parse_telemetry(payload, zones=zones)
    except PayloadError as exc:
        assert exc.reason_code in REASON_CODES


@FUZZ
@given(st.binary(max_size=512))
def test_fuzz_random_bytes(payload: bytes) -> None:
    _only_payload_errors(payload)


@settings(FUZZ, max_examples=200)
@given(json_values)
def test_fuzz_random_json(value: Any) -> None:
    # allow_nan=True on purpose: the encoder writes NaN/Infinity tokens the parser must refuse.
    _only_payload_errors(json.dumps(value, allow_nan=True).encode())


_LEAVES: tuple[Any, ...] = (
    None, True, False, 0, 1, -1, 2, 0.5, 1.5, -0.0, 1e308, float("nan"), float("inf"), 2**70, "", "x",
    "2026-05-01T12:00:00Z", "2026-05-01T12:00:00", "\ud800", [], {},
)


def _random_json(rng: random.Random, depth: int = 0) -> Any:
    """Cheap seeded generator biased toward telemetry-shaped objects (keys and lists of numbers)."""
    roll = rng.random()
    if depth > 4 or roll < 0.45:
        return rng.choice(_LEAVES)
    if roll < 0.75:
        return [_random_json(rng, depth + 1) for _ in range(rng.randrange(5))]
    keys = [*good(), "extra", ""]
    return {rng.choice(keys): _random_json(rng, depth + 1) for _ in range(rng.randrange(16))}


def test_fuzz_seeded_json_structures() -> None:
    """Thousands of structures in well under a second; hypothesis above shrinks whatever this misses."""
    rng = random.Random(20260501)
    base = good()
    for i in range(3000):
        value = _random_json(rng)
        if i % 2 and isinstance(value, dict):
            value = base | value  # mostly valid telemetry with a few fields replaced
        _only_payload_errors(json.dumps(value, allow_nan=True).encode(), zones=rng.randrange(1, 5))


@settings(FUZZ, max_examples=200)
@given(st.dictionaries(st.sampled_from(sorted(good())), json_values, max_size=3), st.integers(1, 4))
def test_fuzz_mutated_telemetry(changes: dict[str, Any], zones: int) -> None:
    _only_payload_errors(json.dumps(good() | changes, allow_nan=True).encode(), zones=zones)

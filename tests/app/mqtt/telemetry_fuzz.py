"""Seeded hostile telemetry: payloads that break the MQTT contract in known ways, a few valid ones among them.

Every case carries the reason the contract (docs/mqtt-contract.md) says the service must give
when rejecting it, or ``None`` for a valid message that must reach the controller. Reasons
follow the order of the checks: topic, size, UTF-8, JSON, depth, non-finite numbers, schema,
zone count, then sequence (per boot) and age.
"""

from __future__ import annotations

import json
import random
import string
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_PAYLOAD_BYTES = 64 * 1024
ZONES, PROBES = 6, 2
FIRST_SEQ = 1000  # room below for out-of-order sequence numbers

# Share of each rejection kind in the stream (valid messages come on top).
WEIGHTS: dict[str, int] = {
    "not_utf8": 10, "not_json": 10, "too_large": 1, "too_deep": 5, "non_finite": 10, "schema": 35,
    "zone_count": 5, "unknown_greenhouse": 8, "bad_topic": 1, "duplicate": 5, "out_of_order": 5, "stale": 5,
}
_NUMERIC = ("air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm", "leaf_temp_c", "flow_l_min",
            "pump_current_a",
            "pump_pct", "light_pct")
_RANGES: dict[str, tuple[float, float]] = {
    "air_temp_c": (-40, 70), "air_rh_pct": (0, 100), "par_umol_m2_s": (0, 3000), "co2_ppm": (0, 10000),
    "leaf_temp_c": (-40, 70), "flow_l_min": (0, 1000), "pump_current_a": (0, 100), "pump_pct": (0, 100),
    "light_pct": (0, 100),
}
_OPTIONAL = ("air_temp_c", "air_rh_pct", "par_umol_m2_s", "co2_ppm", "leaf_temp_c")


@dataclass(frozen=True)
class Case:
    """One message to publish; ``reason`` is the expected rejection reason, None when it must be accepted."""

    topic: str
    payload: bytes
    reason: str | None


class TelemetryFuzzer:
    """Builds the stream for one registered greenhouse ``gh`` with ``zones`` zones."""

    def __init__(self, gh: str, seed: int, *, max_age_s: float) -> None:
        self.gh = gh
        self.rng = random.Random(seed)
        self.max_age_s = max_age_s
        self.boot_id = f"boot-{seed}"
        self.last_seq = FIRST_SEQ - 1

    # --- building blocks -----------------------------------------------------------------------

    def _value(self, name: str) -> float | None:
        """In range, often exactly on a bound; optional sensors are sometimes missing."""
        lo, hi = _RANGES[name]
        if name in _OPTIONAL and self.rng.random() < 0.15:
            return None
        roll = self.rng.random()
        return float(lo) if roll < 0.1 else float(hi) if roll < 0.2 else round(self.rng.uniform(lo, hi), 3)

    def body(self, *, seq: int, ts: datetime, zones: int = ZONES) -> dict[str, Any]:
        """A telemetry object that satisfies the schema (extreme but legal values)."""
        r = self.rng
        return {
            "ts": ts.isoformat(), "boot_id": self.boot_id, "seq": seq,
            "soil_vwc": [[None if r.random() < 0.1 else r.choice([0.0, 1.0, round(r.random(), 4)])
                          for _ in range(PROBES)] for _ in range(zones)],
            **{name: self._value(name) for name in _NUMERIC},
            "valve_open": [r.randint(0, 1) for _ in range(zones)], "estop": False,
        }

    def _now(self) -> datetime:
        return datetime.now(UTC)

    def _encode(self, obj: Any) -> bytes:
        return json.dumps(obj, allow_nan=False).encode()

    def _next_body(self) -> dict[str, Any]:
        """A body that would be accepted if sent now (the next seq of this boot)."""
        return self.body(seq=self.last_seq + 1, ts=self._now())

    @property
    def topic(self) -> str:
        return f"greentwin/{self.gh}/telemetry"

    # --- one generator per expected reason ----------------------------------------------------

    def valid(self, *, estop: bool = False) -> Case:
        self.last_seq += 1
        body = self.body(seq=self.last_seq, ts=self._now())
        body["estop"] = estop
        return Case(self.topic, self._encode(body), None)

    def not_utf8(self) -> Case:
        return Case(self.topic, b"\xff" + self.rng.randbytes(self.rng.randint(0, 2000)), "not_utf8")

    def not_json(self) -> Case:
        r = self.rng
        kind = r.randrange(3)
        if kind == 0:  # a valid message cut short: an object that never closes
            text = json.dumps(self._next_body())
            return Case(self.topic, text[: r.randrange(len(text) - 1)].encode(), "not_json")
        if kind == 1:
            return Case(self.topic,
                        ("~" + "".join(r.choices(string.printable, k=r.randint(0, 300)))).encode(),
                        "not_json")
        return Case(self.topic, r.choice([b"", b"{'ts': 1}", b"{\"seq\": 1,}", b"[1, 2", b"nul", b"0x10"]),
                    "not_json")

    def too_large(self) -> Case:
        r = self.rng
        if r.random() < 0.5:  # a huge array in an otherwise valid object
            body = self._next_body()
            body["soil_vwc"] = [[0.25] * PROBES] * r.randint(5500, 8000)
            raw = self._encode(body)
        else:
            raw = r.randbytes(r.randint(MAX_PAYLOAD_BYTES + 1, MAX_PAYLOAD_BYTES + 20_000))
        assert len(raw) > MAX_PAYLOAD_BYTES
        return Case(self.topic, raw, "too_large")

    def too_deep(self) -> Case:
        r = self.rng
        kind = r.randrange(3)
        per_level = 6 if kind == 1 else 2  # bytes each level adds
        # Past the depth check, past the parser's recursion limit (RecursionError), still under the size
        # limit.
        roll = r.random()
        depth = (r.randint(9, 60) if roll < 0.6 else r.randint(60, 900) if roll < 0.9
                 else r.randint(5000, (MAX_PAYLOAD_BYTES - 2000) // per_level))
        if kind == 0:
            text = "[" * depth + "]" * depth
        elif kind == 1:
            text = '{"a":' * depth + "1" + "}" * depth
        else:  # deep inside a field of an otherwise plausible message
            body = self._next_body()
            body["soil_vwc"] = "@@"
            text = json.dumps(body).replace('"@@"', "[" * depth + "0.2" + "]" * depth)
        assert len(text) <= MAX_PAYLOAD_BYTES
        return Case(self.topic, text.encode(), "too_deep")

    def non_finite(self) -> Case:
        r = self.rng
        body = self._next_body()
        token = r.choice(["NaN", "Infinity", "-Infinity", "1e999", "-1e999"])
        if r.random() < 0.3:
            body["soil_vwc"][r.randrange(ZONES)][r.randrange(PROBES)] = "@@"
        else:
            body[r.choice(_NUMERIC)] = "@@"
        return Case(self.topic, json.dumps(body).replace('"@@"', token).encode(), "non_finite")

    def schema(self) -> Case:
        r = self.rng
        body: Any = self._next_body()
        kind = r.randrange(12)
        if kind == 0:  # wrong type for a number (strict: no strings, booleans, lists or objects)
            body[r.choice(_NUMERIC)] = r.choice(["12.5", True, False, [], {}, [1.0], {"v": 1}])
        elif kind == 1:  # out of range
            name = r.choice(_NUMERIC)
            lo, hi = _RANGES[name]
            body[name] = r.choice([lo - r.uniform(0.001, 1e6), hi + r.uniform(0.001, 1e6)])
        elif kind == 2:  # timestamp: naive, garbage, wrong type
            body["ts"] = r.choice([datetime.now().replace(tzinfo=None).isoformat(), "yesterday", "",
                                   1_780_000_000,
                                   None, ["2026-06-01T06:00:00+00:00"]])
        elif kind == 3:  # boot id of the wrong type or size
            body["boot_id"] = r.choice(["", "b" * 65, 7, None, ["boot"], {"id": 1}, True])
        elif kind == 4:  # seq of the wrong type or out of range
            body["seq"] = r.choice([-1, -(2**40), 1.5, float(self.last_seq + 1), str(self.last_seq + 1),
                                    True, None,
                                    2**63, 2**70])
        elif kind == 5:  # probe readings outside [0, 1] or not numbers
            body["soil_vwc"][r.randrange(ZONES)][r.randrange(PROBES)] = r.choice([1.0001, -0.01, 7, "0.2",
                                                                                  True, []])
        elif kind == 6:  # valve feedback not a 0/1 integer
            body["valve_open"][r.randrange(ZONES)] = r.choice([2, -1, 0.0, 1.0, True, "1", None])
        elif kind == 7:  # a field missing
            del body[r.choice(sorted(body))]
        elif kind == 8:  # an unknown field
            body[r.choice(["extra", "zone", "Seq", "__proto__"])] = r.choice([1, "x", None, []])
        elif kind == 9:  # not an object at all
            body = r.choice([[1, 2, 3], 42, "telemetry", None, True, [], [body]])
        elif kind == 10:  # too many zones or probes (but under the size limit)
            if r.random() < 0.5:
                body["soil_vwc"] = [[0.2] * PROBES] * r.randint(65, 600)
            else:
                body["soil_vwc"] = [[0.2] * r.randint(9, 100)] * ZONES
        else:  # empty lists, the estop flag as a number or string
            body[r.choice(["soil_vwc", "valve_open", "estop"])] = r.choice([[], [[]], 1, "false"])
        raw = self._encode(body)
        return Case(self.topic, raw, "too_large" if len(raw) > MAX_PAYLOAD_BYTES else "schema")

    def zone_count(self) -> Case:
        body = self.body(seq=self.last_seq + 1, ts=self._now(), zones=self.rng.choice([1, 2, 5, 7, 12, 64]))
        if self.rng.random() < 0.3:  # lists that disagree with each other
            body["valve_open"] = body["valve_open"][:1] + [0] * ZONES
        return Case(self.topic, self._encode(body), "zone_count")

    def unknown_greenhouse(self) -> Case:
        other = "".join(self.rng.choices(string.ascii_lowercase + string.digits, k=self.rng.randint(1, 20)))
        other = other if other != self.gh else other + "x"
        payload = self._encode(self._next_body()) if self.rng.random() < 0.7 else self.rng.randbytes(50)
        return Case(f"greentwin/{other}/telemetry", payload, "unknown_greenhouse")

    def bad_topic(self) -> Case:
        name = self.rng.choice(["GH1", "-gh", "_x", "gh.1", "gh 1", "ü", "", "a" * 64, "Gh1"])
        return Case(f"greentwin/{name}/telemetry", self._encode(self._next_body()), "bad_topic")

    def duplicate(self) -> Case:
        return Case(self.topic, self._encode(self.body(seq=self.last_seq, ts=self._now())), "duplicate")

    def out_of_order(self) -> Case:
        seq = self.rng.randrange(0, self.last_seq)
        return Case(self.topic, self._encode(self.body(seq=seq, ts=self._now())), "out_of_order")

    def stale(self) -> Case:
        age = self.rng.uniform(self.max_age_s + 60, 30 * 86400)
        body = self.body(seq=self.last_seq + 1 + self.rng.randrange(5),
                         ts=self._now() - timedelta(seconds=age))
        return Case(self.topic, self._encode(body), "stale")

    # --- the stream ----------------------------------------------------------------------------

    def stream(self, total: int, valid: int) -> list[Case]:
        """``total`` messages: the first valid, ``valid - 1`` more valid ones at random places, the
        last of them reporting the e-stop pressed; the rest drawn by ``WEIGHTS``."""
        kinds = list(WEIGHTS)
        weights = [WEIGHTS[k] for k in kinds]
        valid_at = set(self.rng.sample(range(1, total), valid - 1)) | {0}
        last_valid = max(valid_at)
        cases: list[Case] = []
        for i in range(total):
            if i in valid_at:
                cases.append(self.valid(estop=i == last_valid))
            else:
                cases.append(getattr(self, self.rng.choices(kinds, weights)[0])())
        return cases


def expected_counts(cases: list[Case]) -> Counter[str]:
    """How many rejections per reason the stream must produce."""
    return Counter(c.reason for c in cases if c.reason is not None)

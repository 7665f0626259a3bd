"""Round trip through the real broker: topics from the helpers, payloads through the parser."""

from __future__ import annotations

import json
import queue
import uuid
from typing import Any

import pytest

from wire.topics import encode, parse_telemetry, parse_topic, subscription, telemetry_topic

pytestmark = pytest.mark.mqtt


def test_publish_subscribe_round_trip(mqtt_available: tuple[str, int]) -> None:
    import paho.mqtt.client as mqtt
    from paho.mqtt.enums import CallbackAPIVersion

    host, port = mqtt_available
    gh = f"t-{uuid.uuid4().hex[:10]}"
    received: queue.Queue[tuple[str, bytes]] = queue.Queue()
    subscribed: queue.Queue[bool] = queue.Queue()

    def on_message(_c: Any, _u: Any, msg: mqtt.MQTTMessage) -> None:
        received.put((msg.topic, msg.payload))

    def on_subscribe(*_args: Any) -> None:
        subscribed.put(True)

    client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=f"gt-test-{gh}")
    client.on_message = on_message
    client.on_subscribe = on_subscribe
    client.connect(host, port, keepalive=10)
    client.loop_start()
    try:
        client.subscribe(subscription("telemetry"), qos=1)
        assert subscribed.get(timeout=5)
        body = {
            "ts": "2026-05-01T12:00:00Z", "boot_id": "b1", "seq": 0, "soil_vwc": [[0.2], [0.25]],
            "air_temp_c": 20, "air_rh_pct": 50, "par_umol_m2_s": 0, "co2_ppm": 400, "leaf_temp_c": 19.5,
            "flow_l_min": 0, "pump_current_a": 0, "valve_open": [0, 0], "pump_pct": 0, "light_pct": 0,
            "estop": False,
        }
        client.publish(telemetry_topic(gh), json.dumps(body).encode(), qos=1).wait_for_publish(timeout=5)
        while True:
            name, payload = received.get(timeout=5)
            if name == telemetry_topic(gh):
                break
        assert parse_topic(name) == (gh, "telemetry")
        tel = parse_telemetry(payload, zones=2)
        assert tel.soil_vwc == [[0.2], [0.25]]
        assert parse_telemetry(encode(tel), zones=2) == tel
    finally:
        client.loop_stop()
        client.disconnect()

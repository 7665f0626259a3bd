"""MQTT side of the service: topic layout and payload schemas shared with the edge boxes."""

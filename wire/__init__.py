"""What travels between the service and an edge box: the MQTT topic layout, the payload schemas and the
limits they share with the database (:mod:`wire.fields`), and how either side connects to the broker.

The ground floor: the service (``app``), the control core (``control``) and the edge-box emulator
(``plantsim``) all read the contract here, and it imports nothing from the project, so the two ends of
the wire cannot drift apart. ``docs/mqtt-contract.md`` describes the same contract for integrators.
"""

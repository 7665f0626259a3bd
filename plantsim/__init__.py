"""The edge-box emulator: batched twins standing in for real greenhouses on the MQTT bus.

It speaks the contract in :mod:`wire`, runs the plant on :mod:`twin` and holds the edge box's own
safety fall-back from :mod:`safety`; it knows nothing of the service (``app``) or the control core,
exactly as a real edge box would not. :mod:`plantsim.sim` owns the twin, pacing and MQTT clients,
:mod:`plantsim.edge` what a box decides, :mod:`plantsim.faults` and :mod:`plantsim.outlook` the demo's
fault buttons and weather/price feed (small local HTTP servers, :mod:`plantsim.http`).
"""

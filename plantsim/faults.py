"""The demo's fault buttons over HTTP, on 127.0.0.1 only: try an alarm without flooding MQTT by hand.

* ``POST /v1/faults`` with ``{"greenhouse": "gh1", "fault": F, "zone": 2, "seconds": 400}`` starts a
  fault of the simulated edge box (:meth:`plantsim.sim.PlantSim.inject`): ``sensor_nan`` blanks the
  zone's probes (a ``probe_fault`` alarm within a few simulated minutes), ``drift`` biases a probe,
  ``stuck_valve`` freezes the zone's valve where it is (closed: the zone dries out, ``zone_dry``),
  ``broker_disconnect`` cuts the box's link for ``seconds`` (over 5 minutes: ``edge_offline``).
  ``zone`` is numbered from 1, as the dashboard numbers zones.
* ``POST /v1/faults/clear`` with ``{"greenhouse": "gh1"}`` removes its sensor and valve faults.

Bad input answers 422 with what is wrong; nothing a request says can stop the simulator.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from plantsim.edge import FaultKind
from plantsim.http import LocalJsonServer

if TYPE_CHECKING:
    from plantsim.sim import PlantSim

log = logging.getLogger(__name__)
MAX_BODY = 4096


class FaultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    greenhouse: str = Field(min_length=1, max_length=63)
    fault: FaultKind
    zone: int = Field(1, ge=1, le=64, description="numbered from 1")
    seconds: float = Field(3.0, gt=0, le=3600)


class ClearRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    greenhouse: str = Field(min_length=1, max_length=63)


def handle(sim: PlantSim, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
    """(status, body) of one request."""
    try:
        if path == "/v1/faults":
            req = FaultRequest.model_validate_json(raw)
            st = sim.state.get(req.greenhouse)
            if st is None:
                return 404, {"error": f"unknown greenhouse {req.greenhouse!r}; known: {sorted(sim.state)}"}
            if req.zone > st.zones:
                return 422, {"error": f"{req.greenhouse} has zones 1 to {st.zones}"}
            sim.inject(req.greenhouse, req.fault, zone=req.zone - 1, seconds=req.seconds)
            return 200, {"injected": req.fault, "greenhouse": req.greenhouse, "zone": req.zone}
        if path == "/v1/faults/clear":
            clear = ClearRequest.model_validate_json(raw)
            if clear.greenhouse not in sim.state:
                return 404, {"error": f"unknown greenhouse {clear.greenhouse!r}"}
            sim.clear_faults(clear.greenhouse)
            return 200, {"cleared": clear.greenhouse}
        return 404, {"error": "not found: POST /v1/faults or /v1/faults/clear"}
    except ValidationError as exc:
        return 422, {"error": "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}"
                                        for e in exc.errors())}


class FaultServer(LocalJsonServer):
    """The endpoints above on 127.0.0.1:``port`` (0: any free port; see :attr:`url`)."""

    def __init__(self, sim: PlantSim, port: int = 0) -> None:
        def answer(method: str, path: str, raw: bytes) -> tuple[int, dict[str, Any]]:
            if method != "POST":
                return 405, {"error": "POST /v1/faults or /v1/faults/clear"}
            return handle(sim, path, raw)

        super().__init__(answer, "plant-sim-faults", port, max_body=MAX_BODY)

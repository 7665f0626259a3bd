"""The demo's fault buttons: a fault posted over HTTP reaches the simulated edge box, zones numbered from 1;
bad input is a 422 that says what is wrong, and clearing undoes sensor and valve faults."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from plantsim.faults import FaultServer
from plantsim.sim import PlantSim


@pytest.fixture(scope="module")
def sim_and_url() -> Iterator[tuple[PlantSim, str]]:
    sim = PlantSim("mqtt://127.0.0.1:1", ["gh1", "gh2"], zones=3)  # never started: no broker needed
    server = FaultServer(sim).start()
    yield sim, server.url
    server.close()


def test_a_posted_fault_reaches_the_box_and_clear_undoes_it(sim_and_url: tuple[PlantSim, str]) -> None:
    sim, url = sim_and_url
    r = httpx.post(f"{url}/v1/faults", json={"greenhouse": "gh2", "fault": "sensor_nan", "zone": 3})
    assert r.status_code == 200 and r.json() == {"injected": "sensor_nan", "greenhouse": "gh2", "zone": 3}
    assert sim.state["gh2"].nan_zone == 2 and sim.state["gh1"].nan_zone is None, "zone 3 is index 2"
    assert httpx.post(f"{url}/v1/faults",
                      json={"greenhouse": "gh2", "fault": "stuck_valve", "zone": 1}).status_code == 200
    assert 0 in sim.state["gh2"].stuck
    assert httpx.post(f"{url}/v1/faults/clear", json={"greenhouse": "gh2"}).json() == {"cleared": "gh2"}
    assert sim.state["gh2"].nan_zone is None and not sim.state["gh2"].stuck


@pytest.mark.parametrize(("body", "status", "says"), [
    ({"greenhouse": "gh1", "fault": "fire"}, 422, "fault"),
    ({"greenhouse": "gh1", "fault": "drift", "zone": 0}, 422, "zone"),
    ({"greenhouse": "gh1", "fault": "drift", "zone": 4}, 422, "zones 1 to 3"),
    ({"greenhouse": "gh9", "fault": "drift"}, 404, "unknown greenhouse"),
    ({"greenhouse": "gh1", "fault": "drift", "extra": 1}, 422, "extra"),
])
def test_bad_fault_requests_say_what_is_wrong(sim_and_url: tuple[PlantSim, str], body: dict[str, object],
                                              status: int, says: str) -> None:
    r = httpx.post(f"{sim_and_url[1]}/v1/faults", json=body)
    assert r.status_code == status and says in r.json()["error"], r.text
    assert httpx.post(f"{sim_and_url[1]}/v1/faults", content=b"{not json").status_code == 422

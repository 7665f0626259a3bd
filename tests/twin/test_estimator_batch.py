"""The service's vectorised moisture filter against the filterpy reference, zone by zone.

:class:`twin.estimator.ZoneEstimator` (one filterpy ``KalmanFilter`` per zone) is the reference;
:class:`GreenhouseEstimator` and :func:`update_many` run the same equations over arrays. Both are
fed the same twin readings with drift, offline probes and communication losses.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.twin.recording import record_threshold_run
from twin import FaultConfig
from twin.estimator import GreenhouseEstimator, ZoneEstimator, models_from_twin_params, update_many

B, STEPS = 2, 200


@pytest.fixture(scope="module")
def recorded() -> dict[str, np.ndarray]:
    faults = FaultConfig(sensor_drift=0.03, comm_loss=0.1, sensor_offline=0.03)
    twin, rec = record_threshold_run(B, STEPS, 4, faults)
    rec["models"] = [models_from_twin_params(twin.params, i, twin.config.dt_s) for i in range(B)]  # type: ignore[assignment]
    return rec


def test_vectorised_filter_equals_filterpy_zone_by_zone(recorded: dict) -> None:
    flagged, absent = 0, 0
    for i in range(B):
        reference = [ZoneEstimator(m, 2) for m in recorded["models"][i]]
        vectorised = GreenhouseEstimator(recorded["models"][i], probes_per_zone=2)
        for t in range(STEPS):
            got = vectorised.update(recorded["probes"][t, i], recorded["irr"][t, i], recorded["etc"][t, i])
            for z, ref in enumerate(reference):
                want = ref.update(recorded["probes"][t, i, z], recorded["irr"][t, i, z],
                                  recorded["etc"][t, i])
                assert got[z].probe_status == want.probe_status and got[z].filled == want.filled, (i, t, z)
                assert got[z].theta == pytest.approx(want.theta, rel=1e-9, abs=1e-12), (i, t, z)
                assert got[z].std == pytest.approx(want.std, rel=1e-7, abs=1e-12), (i, t, z)
                flagged += "drifting" in want.probe_status
                absent += "offline" in want.probe_status or "missing" in want.probe_status
        state = vectorised.state_dict()
        for z, ref in enumerate(reference):
            mine, theirs = state["zones"][z], ref.state_dict()
            assert mine["missing"] == theirs["missing"] and mine["drifting"] == theirs["drifting"]
            assert mine["streak"] == theirs["streak"]
            np.testing.assert_allclose(mine["ewma"], theirs["ewma"], rtol=1e-7, atol=1e-12)
    assert flagged > 0 and absent > 0, "the scenario must exercise drift and outages"


def test_update_many_equals_stepping_each_greenhouse_alone(recorded: dict) -> None:
    alone = [GreenhouseEstimator(recorded["models"][i]) for i in range(B)]
    together = [GreenhouseEstimator(recorded["models"][i]) for i in range(B)]
    for t in range(STEPS):
        each = [alone[i].update(recorded["probes"][t, i], recorded["irr"][t, i], recorded["etc"][t, i])
                for i in range(B)]
        # A micro-batch holds whichever greenhouses reported: here a varying subset, in any order.
        members = [i for i in range(B) if (t + i) % 3 != 0][::-1]
        batch = update_many([together[i] for i in members], [recorded["probes"][t, i] for i in members],
                            [recorded["irr"][t, i] for i in members],
                            [recorded["etc"][t, i] for i in members])
        for i, est in zip(members, batch, strict=True):
            assert est.zones() == each[i]
        for i in set(range(B)) - set(members):  # skipped this step: catch up alone, in order
            assert together[i].update(recorded["probes"][t, i], recorded["irr"][t, i],
                                      recorded["etc"][t, i]) == each[i]
    assert [a.state_dict() for a in alone] == [b.state_dict() for b in together]


def test_update_many_refuses_a_greenhouse_twice_and_mismatched_inputs(recorded: dict) -> None:
    est = GreenhouseEstimator(recorded["models"][0])
    vwc, irr, etc = recorded["probes"][0, 0], recorded["irr"][0, 0], recorded["etc"][0, 0]
    with pytest.raises(ValueError, match="twice"):
        update_many([est, est], [vwc, vwc], [irr, irr], [etc, etc])
    with pytest.raises(ValueError, match="one input"):
        update_many([est], [vwc], [irr], [])
    assert update_many([], [], [], []) == []


def test_state_from_the_per_zone_estimator_restores_into_the_vectorised_one(recorded: dict) -> None:
    """Snapshots written before the vectorised filter (one dict per zone) still restore."""
    models = recorded["models"][1]
    reference = [ZoneEstimator(m, 2) for m in models]
    for t in range(60):
        for z, ref in enumerate(reference):
            ref.update(recorded["probes"][t, 1, z], recorded["irr"][t, 1, z], recorded["etc"][t, 1])
    est = GreenhouseEstimator(models)
    est.load_state_dict({"version": 1, "probes_per_zone": 2, "zones": [r.state_dict() for r in reference]})
    got = est.update(recorded["probes"][60, 1], recorded["irr"][60, 1], recorded["etc"][60, 1])
    for z, ref in enumerate(reference):
        want = ref.update(recorded["probes"][60, 1, z], recorded["irr"][60, 1, z], recorded["etc"][60, 1])
        assert (got[z].probe_status == want.probe_status
                and got[z].theta == pytest.approx(want.theta, rel=1e-9))

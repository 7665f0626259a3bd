"""Micro-batched decisions against one-message-at-a-time ones, and e-stops between a batch's phases."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
import torch

from control import (
    DecisionBatch,
    ExpertProposer,
    GreenhouseController,
    ZoneSetup,
    explain_decisions,
)
from policy.baselines import ThresholdExpert
from policy.ensemble import Ensemble
from policy.networks import ActorCritic
from safety import SafetyLimits
from twin import GreenhouseTwin, ObservationSpec
from wire.topics import Telemetry

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]
N = 5


def _ids(prefix: int):
    n = 0

    def make() -> uuid.UUID:
        nonlocal n
        n += 1
        return uuid.UUID(int=prefix * 10**6 + n)

    return make


def _controllers(proposer, n: int = N, **kw) -> list[GreenhouseController]:
    return [GreenhouseController(f"gh{i}", ZONES, proposer, SafetyLimits.default(), step_s=60.0,
                                 cmd_id_factory=_ids(i), **kw) for i in range(n)]


def _telemetry(r: dict | None, i: int, k: int, action: np.ndarray, theta: np.ndarray) -> Telemetry:
    soil = r["soil_vwc"][i] if r else np.repeat(theta[i][:, None], 2, axis=1)

    def num(key: str) -> float | None:
        return None if r is None or np.isnan(r[key][i]) else float(r[key][i])

    return Telemetry(
        ts=T0 + timedelta(seconds=60 * k), boot_id="b1", seq=k,
        soil_vwc=[[None if np.isnan(v) else float(v) for v in zone] for zone in soil],
        air_temp_c=num("air_temp_c"), air_rh_pct=num("air_rh_pct"), par_umol_m2_s=num("par_umol_m2_s"),
        co2_ppm=num("co2_ppm"), leaf_temp_c=num("leaf_temp_c"),
        flow_l_min=float(r["flow_l_min"][i]) if r else 0.0,
        pump_current_a=float(r["pump_current_frac"][i]) * 4.0 if r else 0.0,
        valve_open=[int(v >= 0.5) for v in action[:6]], pump_pct=float(action[6]), light_pct=float(action[7]),
        estop=False)


def _ensemble() -> Ensemble:
    """Three small residual members with random heads, near enough to their shared prior that they
    agree on most decisions and disagree now and then."""
    spec = ObservationSpec(6)
    members = []
    for seed in range(3):
        torch.manual_seed(seed)
        agent = ActorCritic(spec.dim, 6, hidden=16, residual=ThresholdExpert())
        with torch.no_grad():
            agent.actor_head.weight.normal_(0.0, 0.2)
            agent.obs_rms.mean.copy_(torch.from_numpy((spec.low + spec.high) / 2.0))
            agent.obs_rms.var.copy_(torch.from_numpy(((spec.high - spec.low) / 4.0) ** 2))
            agent.obs_rms.count.fill_(1000.0)
        members.append(agent)
    return Ensemble(members, "test-ensemble")


def _drive(steps: int, decide, seed: int = 0) -> list[list]:
    """Closed loop on a twin with N instances; ``decide(k, telemetry list)`` returns decisions."""
    twin = GreenhouseTwin(N, seed=seed, dt_s=60.0, sensor_noise=0.02)
    twin.reset()
    actions = np.zeros((N, 8), np.float32)
    info = None
    out = []
    for k in range(steps):
        tels = [_telemetry(info["readings"] if info else None, i, k, actions[i], twin.state.theta)
                for i in range(N)]
        decisions = decide(k, tels)
        out.append(decisions)
        actions = np.array([d.command.valves + [d.command.pump_pct, d.command.light_pct] for d in decisions],
                           np.float32)
        _, _, _, _, info = twin.step(actions)
    return out


def _same(a, b, *, exact: bool) -> None:
    assert (a.greenhouse_id, a.seq, a.actor, a.mode, a.alarms) \
        == (b.greenhouse_id, b.seq, b.actor, b.mode, b.alarms)
    assert a.command.valves == b.command.valves and a.command.seq == b.command.seq
    assert a.command.cmd_id == b.command.cmd_id
    if exact:
        assert (a.command.pump_pct, a.command.light_pct, a.confidence) == (b.command.pump_pct,
                                                                           b.command.light_pct, b.confidence)
        assert a.estimate == b.estimate and a.telemetry == b.telemetry
    else:  # a batched forward may round in the last bit, and the twin then drifts apart as little
        assert a.command.pump_pct == pytest.approx(b.command.pump_pct, abs=1e-3)
        assert a.command.light_pct == pytest.approx(b.command.light_pct, abs=1e-3)
        assert a.confidence == pytest.approx(b.confidence, abs=1e-5)
        np.testing.assert_allclose(a.estimate["theta"], b.estimate["theta"], atol=1e-8)


@pytest.mark.parametrize("kind", ["expert", "ensemble"])
def test_a_batch_decides_as_each_greenhouse_alone(kind: str) -> None:
    proposer = ExpertProposer(ThresholdExpert()) if kind == "expert" else _ensemble()
    alone, batched = _controllers(proposer, disagreement_threshold=0.1), _controllers(proposer,
                                                                                      disagreement_threshold=0.1)
    one = _drive(5, lambda k, tels: [DecisionBatch([c.pending(t)]).run()[0]
                                     for c, t in zip(alone, tels, strict=True)])
    many = _drive(5, lambda k, tels: DecisionBatch([c.pending(t)
                                                    for c, t in zip(batched, tels, strict=True)]).run())
    for step_one, step_many in zip(one, many, strict=True):
        for a, b in zip(step_one, step_many, strict=True):
            _same(a, b, exact=kind == "expert")
    if kind == "ensemble":
        # The writer explains a whole batch in one pass: the same explanations as one by one (the
        # requests of every step, so that low-confidence ones are among them).
        requests = [d.explain for step in many for d in step if d.explain is not None]
        # low-confidence ones carry a history
        assert requests and any(r.history is not None for r in requests)
        together = explain_decisions(proposer, requests)
        for request, got in zip(requests, together, strict=True):
            [want] = explain_decisions(proposer, [request])
            assert [f["feature"] for f in got["top"]] == [f["feature"] for f in want["top"]]
            assert got["score"] == pytest.approx(want["score"], abs=1e-5)
            assert ("history" in got) == ("history" in want) == (request.history is not None)


def test_an_estop_between_phases_applies_to_the_decision_in_flight() -> None:
    ctls = _controllers(ExpertProposer(ThresholdExpert()))
    _drive(3, lambda k, tels: DecisionBatch([c.pending(t) for c, t in zip(ctls, tels, strict=True)]).run())
    twin = GreenhouseTwin(N, seed=1, dt_s=60.0)
    twin.reset()
    tels = [_telemetry(None, i, 3, np.zeros(8), twin.state.theta) for i in range(N)]
    batch = DecisionBatch([c.pending(t) for c, t in zip(ctls, tels, strict=True)])
    batch.begin()
    batch.estimate()
    batch.observe()
    batch.propose()
    seq_before = ctls[2].seq
    event = ctls[2].estop("op1", "leak", tels[2].ts)  # what the event loop may run between phases
    decisions = [batch.finish(i) for i in range(N)]
    d = decisions[2]
    assert event.seq == seq_before + 1 and d.seq == event.seq + 1
    assert d.mode == "estop" and d.actor == "estop" and d.command.pump_pct == 0 and not any(d.command.valves)
    assert all(o.mode == "auto" for i, o in enumerate(decisions) if i != 2)


def test_estop_reported_in_telemetry_is_a_recorded_mode_change() -> None:
    [ctl] = _controllers(ExpertProposer(ThresholdExpert()), n=1)
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    tel = _telemetry(None, 0, 0, np.zeros(8), twin.state.theta).model_copy(update={"estop": True})
    d = ctl.on_telemetry(tel)
    [event] = d.events
    assert (event.to_mode, event.actor, event.seq) == ("estop", "edge:estop", d.seq - 1)


def test_a_bad_message_drops_out_of_a_lenient_batch_alone() -> None:
    ctls = _controllers(ExpertProposer(ThresholdExpert()))
    twin = GreenhouseTwin(N, seed=0, dt_s=60.0)
    twin.reset()
    tels = [_telemetry(None, i, 0, np.zeros(8), twin.state.theta) for i in range(N)]
    # three probes, the filter has two
    tels[1] = tels[1].model_copy(update={"soil_vwc": [[0.2, 0.2, 0.2]] * 6})
    with pytest.raises(ValueError):
        DecisionBatch([c.pending(t) for c, t in zip(ctls, tels, strict=True)]).run()
    ctls = _controllers(ExpertProposer(ThresholdExpert()))
    batch = DecisionBatch([c.pending(t) for c, t in zip(ctls, tels, strict=True)], strict=False)
    decisions = batch.run()
    assert [d.greenhouse_id for d in decisions] == ["gh0", "gh2", "gh3", "gh4"]
    assert [item.setup.gh for item, _ in batch.failed] == ["gh1"]
    with pytest.raises(ValueError, match="one message per greenhouse"):
        DecisionBatch([ctls[0].pending(tels[0]), ctls[0].pending(tels[0])])


def test_a_decision_keeps_the_set_up_it_began_with() -> None:
    """A proposer swapped while a decision is under way serves from the next one on: the decision reads
    the set-up value it was handed, which a swap replaces rather than changes."""
    [ctl] = _controllers(ExpertProposer(ThresholdExpert()), n=1)
    twin = GreenhouseTwin(1, seed=0, dt_s=60.0)
    twin.reset()
    tels = [_telemetry(None, 0, k, np.zeros(8), twin.state.theta) for k in range(2)]
    batch = DecisionBatch([ctl.pending(tels[0])])
    before = ctl.decision_setup
    batch.begin()
    ctl.proposer = ExpertProposer(ThresholdExpert(), policy_version="expert-b")
    assert ctl.decision_setup is not before and before.proposer.policy_version == "expert"
    batch.estimate()
    batch.observe()
    batch.propose()
    assert batch.finish(0).command.policy_version == "expert"
    assert ctl.on_telemetry(tels[1]).command.policy_version == "expert-b"

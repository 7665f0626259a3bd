"""Operator overrides become demonstrations: recorded with their observation, exported, trained on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import torch

from app.cli import db as db_cli
from app.cli import main as cli_main
from app.core.db import make_engine, make_session_factory
from app.recorder import DecisionRecorder
from app.services.greenhouses import add_greenhouse
from control import ExpertProposer, GreenhouseController, ZoneSetup
from policy.baselines import ThresholdExpert
from policy.bc import load_demos
from policy.config import PPOConfig
from policy.ppo import train
from safety import SafetyLimits
from twin.spec import ObservationSpec
from wire.topics import Telemetry

T0 = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)
ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]


def _telemetry(k: int, valves: list[int], pump: float) -> Telemetry:
    return Telemetry(ts=T0 + timedelta(minutes=k), boot_id="b1", seq=k, soil_vwc=[[0.2, 0.21]] * 6,
                     air_temp_c=22.0, air_rh_pct=60.0, par_umol_m2_s=300.0, co2_ppm=450.0, leaf_temp_c=22.5,
                     flow_l_min=6.0 if pump else 0.0, pump_current_a=1.0, valve_open=valves, pump_pct=pump,
                     light_pct=0.0, estop=False)


def test_overrides_are_exported_as_demonstrations_and_feed_training(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6)
    recorder = DecisionRecorder(make_session_factory(make_engine(url)), tmp_path / "spool.jsonl")
    ctl = GreenhouseController("gh1", ZONES, ExpertProposer(ThresholdExpert()), SafetyLimits.default(),
                               step_s=60.0)
    decisions = [ctl.on_telemetry(_telemetry(0, [0] * 6, 0.0))]  # auto: not a demonstration
    ctl.set_mode("manual", "operator:olga", "hand watering zones 0 and 1", T0,
                 manual_action=np.array([1, 1, 0, 0, 0, 0, 60.0, 0.0]))
    for k in range(1, 4):
        decisions.append(ctl.on_telemetry(_telemetry(k, [1, 1, 0, 0, 0, 0] if k > 1 else [0] * 6, 60.0)))
    recorder.record_many([("decision", d.record()) for d in decisions])

    out = tmp_path / "demos.npz"
    assert cli_main(["demos", "export", "--out", str(out), "--url", url]) == 0
    assert "wrote 3 operator demonstrations" in capsys.readouterr().out
    demos = load_demos(out, ObservationSpec(6))
    overrides = [d for d in decisions if d.is_override]
    assert len(overrides) == 3 and list(demos.who) == ["olga"] * 3
    np.testing.assert_array_equal(demos.obs.numpy(),
                                  np.asarray([d.observation for d in overrides], np.float32))
    applied = [[*d.clipped["valves"], d.clipped["pump_pct"], d.clipped["light_pct"]] for d in overrides]
    np.testing.assert_array_equal(demos.action.numpy(), np.asarray(applied, np.float32))
    assert cli_main(["demos", "export", "--out", str(out), "--url", url, "--zones", "4"]) == 2

    # A residual run has no expert demonstrations; with the operators' it has a BC term, which decays.
    cfg = PPOConfig.preset("tiny", residual=True, total_steps=64 * 48 * 2, demo_files=(str(out),))
    torch.set_num_threads(1)
    result = train(cfg)
    assert result.metrics[0].bc_coef > 0 and np.isfinite(result.metrics[0].bc_loss)
    plain = train(PPOConfig.preset("tiny", residual=True, total_steps=64 * 48 * 2))
    assert plain.metrics[0].bc_coef == 0

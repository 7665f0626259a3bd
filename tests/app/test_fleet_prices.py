"""The site's fruit price reaches every controller the service builds: the policy's observation
prices fruit as the PDF report does."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from app.cli import db as db_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.fleet import build_controllers
from app.services.greenhouses import add_greenhouse
from app.snapshots import SnapshotStore
from control import ExpertProposer
from policy.tuning import served_expert
from safety import SafetyLimits
from wire.topics import Telemetry


def test_the_observation_sees_the_configured_fruit_price(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3)
    engine = make_engine(url)
    try:
        settings = Settings(database_url=url, fruit_price_eur_kg=2.5)
        controllers = build_controllers(make_session_factory(engine), settings, SafetyLimits.default(),
                                        lambda z: ExpertProposer(served_expert(z)),
                                        SnapshotStore(tmp_path / "snap"))
    finally:
        engine.dispose()
    ctl = controllers["gh1"]
    tel = Telemetry(ts=datetime(2026, 6, 1, 12, tzinfo=UTC), boot_id="b", seq=1, soil_vwc=[[0.24, 0.24]] * 3,
                    air_temp_c=20.0, air_rh_pct=70.0, par_umol_m2_s=300.0, co2_ppm=600.0, leaf_temp_c=19.0,
                    flow_l_min=0.0, pump_current_a=0.0, valve_open=[0] * 3, pump_pct=0.0, light_pct=0.0,
                    estop=False)
    obs = np.asarray(ctl.on_telemetry(tel).observation)
    assert obs[ctl.obs_builder.spec.slices["fruit_price"].start] == np.float32(2.5)

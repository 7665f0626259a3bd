"""The twin's view ahead: the forecast itself (direction of its what-ifs, determinism), the scene taken
from a controller, the error tracking, and the worker (another process, survives failures, off where
the policy does not decide, and never imported by the decision path)."""

from __future__ import annotations

import asyncio
import dataclasses
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from app.forecast.run import compute
from app.forecast.scene import Scene, Variant, default_variants, scene_of
from app.forecast.tracking import ForecastTracker
from app.forecast.worker import ForecastWorker
from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.outlook import Outlook
from control.setup import GreenhouseSetup
from policy.tuning import served_expert
from safety import SafetyLimits
from wire.topics import Telemetry

Z = 6
T0 = datetime(2026, 6, 1, 8, 10, tzinfo=UTC)
SETUP = GreenhouseSetup("gh1", tuple(ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(Z)))
EXPERT = ExpertProposer(served_expert(Z))


def outlook(price: float = 60.0) -> Outlook:
    issued = T0.replace(minute=0)
    lead = np.arange(1, 48)
    solar = np.maximum(0.0, 600.0 * np.sin((lead + issued.hour - 6) / 12.0 * np.pi))
    hours = np.arange(24)
    return Outlook(issued, 15.0 + 5.0 * np.sin(hours / 24.0 * 2 * np.pi), solar,
                   price + 0.4 * price * np.cos(hours / 24.0 * 2 * np.pi), np.ones(24))


def scene(moisture: float = 0.205, price: float = 60.0, **kw: Any) -> Scene:
    base = Scene(greenhouse_id="gh1", start=T0, local_hour_of_year=151 * 24 + 8 + 10 / 60, setup=SETUP,
                 site_limits=SafetyLimits.default(), moisture=(moisture,) * Z, crop_day=60.0, crop_pools=None,
                 dli_today=5.0, lamp_hours_today=0.0, water_today_l=(0.0,) * Z, irrigation_24h_mm=(2.0,) * Z,
                 air_temp_c=20.0, air_rh_pct=70.0, co2_ppm=420.0, outlook=outlook(price),
                 fruit_price_eur_kg=1.0, water_price_eur_m3=0.75, price_adder_eur_mwh=30.0,
                 transmissivity=0.65, threshold=0.35, policy_version="expert",
                 variants=default_variants(SETUP))
    return dataclasses.replace(base, **kw)


@pytest.fixture(scope="module")
def bands() -> Any:
    """The greenhouse as set, with a wetter band and with a lower, wider band, in one batch."""
    wetter = Variant("wetter", bands=((0.24, 0.30),) * Z)
    wider = Variant("wider", bands=((0.15, 0.30),) * Z)
    return compute(scene().with_variants(Variant("forecast"), wetter, wider), EXPERT)


def test_a_wetter_band_waters_more_and_a_lower_one_less(bands: Any) -> None:
    base, wetter, wider = (bands.variant(n) for n in ("forecast", "wetter", "wider"))
    assert base.totals["water_l"] > 0.0, "starting below its band, the zone is watered"
    assert wetter.totals["water_l"] > base.totals["water_l"] > wider.totals["water_l"]
    end = {v.name: np.mean([m[-1] for m in v.moisture_vwc]) for v in (base, wetter, wider)}
    assert end["wetter"] > end["forecast"] > end["wider"]
    assert wetter.totals["water_cost_eur"] > base.totals["water_cost_eur"]
    assert wider.bands[0] == [0.15, 0.3] and base.bands[0] == [0.21, 0.27]
    assert sum(wider.totals["hours_dry"]) < sum(base.totals["hours_dry"]), \
        "a lower band end counts fewer dry hours"


def test_shape_and_times(bands: Any) -> None:
    assert bands.hours == 24 and len(bands.times) == 25 and bands.times[0] == T0
    for v in bands.variants:
        assert np.shape(v.moisture_vwc) == (Z, 25) and np.shape(v.irrigation_l) == (Z, 24) \
            and len(v.lamp_hours) == 24
        assert abs(sum(map(sum, v.irrigation_l)) - v.totals["water_l"]) < 1.0


def test_lamps_as_the_rule_runs_them_ignore_a_dear_hour() -> None:
    """At 600 EUR/MWh the served rule keeps the lamps off; the site's price-blind schedule does not."""
    f = compute(scene(moisture=0.24, price=600.0), EXPERT)
    policy, rule = f.variant("forecast"), f.variant("lamps_rule")
    assert policy.lamps == "policy" and rule.lamps == "rule"
    assert rule.totals["lamp_hours"] > policy.totals["lamp_hours"]
    assert rule.totals["energy_cost_eur"] > policy.totals["energy_cost_eur"]
    cheap = compute(scene(moisture=0.24, price=5.0), EXPERT).variant("lamps_rule")
    assert cheap.totals["lamp_hours"] == rule.totals["lamp_hours"], "the rule does not read the price"


def test_a_lamp_budget_caps_the_lamps() -> None:
    f = compute(scene(moisture=0.24, price=5.0).with_variants(Variant("forecast"),
                                                              Variant("short", lamp_hours_per_day=1.0)),
                EXPERT)
    assert f.variant("short").lamp_hours_cap == 1.0
    assert f.variant("short").totals["lamp_hours"] < f.variant("forecast").totals["lamp_hours"]


def test_the_forecast_is_deterministic(bands: Any) -> None:
    again = compute(scene().with_variants(*[Variant(v.name, bands=tuple(tuple(b) for b in v.bands))
                                            for v in bands.variants]),
                    EXPERT)
    assert again.variants[0] == bands.variants[0]
    assert [v.totals for v in again.variants] == [v.totals for v in bands.variants]


def _telemetry(k: int, vwc: float = 0.23) -> Telemetry:
    return Telemetry(ts=T0 + timedelta(minutes=k), boot_id="b1", seq=k,
                     soil_vwc=[[vwc, vwc] for _ in range(Z)], air_temp_c=21.0, air_rh_pct=65.0,
                     par_umol_m2_s=300.0, co2_ppm=450.0, leaf_temp_c=21.0, flow_l_min=0.0, pump_current_a=0.0,
                     valve_open=[0] * Z, pump_pct=0.0, light_pct=0.0, estop=False)


def _controller(gh: str = "gh1", proposer: Any = EXPERT) -> GreenhouseController:
    return GreenhouseController(gh, list(SETUP.zones), proposer, SafetyLimits.default(), step_s=60.0)


def test_scene_of_a_controller_copies_what_it_knows() -> None:
    ctl = _controller()
    assert scene_of(ctl, outlook(), SafetyLimits.default(), water_price_eur_m3=0.75) is None
    for k in range(5):
        ctl.on_telemetry(_telemetry(k))
    s = scene_of(ctl, outlook(), SafetyLimits.default(), water_price_eur_m3=0.75)
    assert s is not None and s.start == ctl.last_ts and s.zones == Z
    assert s.moisture == tuple(float(v) for v in ctl.estimator.state["theta"])
    assert s.air_temp_c == 21.0 and s.co2_ppm == 450.0 and s.crop_day == ctl.crop_twin.day
    assert [v.name for v in s.variants] == ["forecast", "lamps_rule"]
    f = compute(s, EXPERT)
    assert f.issued == ctl.last_ts \
        and f.variants[0].moisture_vwc[0][0] == pytest.approx(s.moisture[0], abs=1e-4)


def test_tracking_compares_forecasts_with_what_happened(bands: Any) -> None:
    tracker = ForecastTracker()
    tracker.meter("gh1", 0.0)
    tracker.add(bands)
    predicted = bands.moisture_at(T0 + timedelta(hours=2))
    tracker.meter("gh1", 30.0)
    tracker.observe("gh1", T0 + timedelta(hours=2), predicted + 0.01)
    tracker.observe("gh1", T0 + timedelta(hours=8), bands.moisture_at(T0 + timedelta(hours=8)))
    s = tracker.summary("gh1")
    assert s["samples"] == 2 and s["mae_pct_vwc"] == pytest.approx(0.5, abs=1e-6)
    assert [b["samples"] for b in s["by_lead"]] == [0, 1, 1, 0]
    assert s["water"]["metered_l"] == 30.0 and s["water"]["predicted_l"] == pytest.approx(bands.water_until(
        T0 + timedelta(hours=8)), abs=0.1)
    tracker.observe("gh1", T0 + timedelta(hours=30), predicted)
    assert tracker.summary("gh1")["samples"] == 2, "a forecast past its 24 h is no longer held to account"


class _Broken:
    policy_version = "broken"

    def propose(self, obs: np.ndarray) -> np.ndarray:
        raise RuntimeError("a member that fails")


class _Feed:
    def __init__(self) -> None:
        self.current = outlook()


@pytest.fixture(scope="module")
def worker() -> Any:
    ctls = {"gh1": _controller("gh1"), "gh2": _controller("gh2", _Broken()), "gh3": _controller("gh3")}
    for ctl in ctls.values():
        for k in range(3):
            ctl.on_telemetry(_telemetry(k)) if ctl.gh != "gh2" else None
    ctls["gh2"].state = dataclasses.replace(ctls["gh2"].state,
                                            last_ts=T0)  # it has telemetry, but its policy fails in the twin
    ctls["gh3"].set_mode("manual", "operator:olga", "testing", T0, np.zeros(Z + 2))
    w = ForecastWorker(ctls, _Feed(), SafetyLimits.default(), every_s=60.0, water_price_eur_m3=0.75)  # type: ignore[arg-type]
    yield w
    w.close()


def test_the_worker_runs_in_another_process_and_survives_a_failure(worker: Any) -> None:
    asyncio.run(worker.round())
    assert worker.status["gh1"].state == "ok" and worker.status["gh2"].state == "waiting"
    assert worker.status["gh3"].state == "off" and "manual" in worker.status["gh3"].why
    f = worker.latest["gh1"]
    assert f.pid not in (0, os.getpid()), "the forecast never runs in the deciding process"
    local = compute(scene_of(worker.controllers["gh1"], outlook(), SafetyLimits.default(),
                             water_price_eur_m3=0.75),
                    EXPERT)
    assert [v.totals for v in local.variants] == [v.totals for v in f.variants], "the same in any process"
    asyncio.run(worker.round())  # the failing greenhouse did not stop the rounds
    assert worker.rounds == 2 and worker.status["gh1"].state == "ok"


def test_what_if_beside_the_forecast(worker: Any) -> None:
    f = worker.what_if("gh1", Variant("what_if", lamps="rule"))
    assert [v.name for v in f.variants] == ["forecast", "what_if"] and f.variants[1].lamps == "rule"
    with pytest.raises(ValueError, match="manual"):
        worker.what_if("gh3", Variant("what_if", lamps="rule"))


def test_the_decision_path_never_imports_the_forecast() -> None:
    from tests.import_graph import import_graph

    graph = import_graph(Path(__file__).resolve().parents[3])
    path = [m for m in graph if m.startswith(("control", "app.intake", "app.dispatch", "app.runtime"))]
    reach: set[str] = set()
    todo = list(path)
    while todo:
        m = todo.pop()
        for n in graph.get(m, ()):
            if n not in reach:
                reach.add(n)
                todo.append(n)
    assert not [m for m in reach if m.startswith("app.forecast")]

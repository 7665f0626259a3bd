"""Today's economics and the outlook the dashboard shows, from a real controller's decisions and trend
cells."""

from __future__ import annotations

import uuid
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

from app.api import economics as econ
from app.api import trend_rollup as roll
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision
from app.services.greenhouses import add_greenhouse
from control import ExpertProposer, GreenhouseController, ZoneSetup
from control.outlook import Outlook
from policy.baselines import ThresholdExpert
from safety import SafetyLimits
from twin.config import PriceConfig
from wire.topics import Telemetry

ZONES = [ZoneSetup("loam", 0.21, 0.27, 0.45, 400.0) for _ in range(6)]
TZ = "Europe/Amsterdam"
# A Wednesday: 10:00 local is a peak hour of the tariff, 02:00 off-peak.
T0 = datetime(2026, 6, 3, 0, 5, tzinfo=UTC)


def _controller() -> GreenhouseController:
    return GreenhouseController("gh1", ZONES, ExpertProposer(ThresholdExpert()), SafetyLimits.default(),
                                step_s=60.0,
                                site_timezone=TZ, cmd_id_factory=lambda: uuid.uuid4())


def _telemetry(ts: datetime, seq: int, light_pct: float = 0.0, par: float = 0.0) -> Telemetry:
    return Telemetry(ts=ts, boot_id="b1", seq=seq, soil_vwc=[[0.24, 0.24]] * 6, air_temp_c=21.0,
                     air_rh_pct=70.0, par_umol_m2_s=par, co2_ppm=600.0, leaf_temp_c=21.0, flow_l_min=0.0,
                     pump_current_a=0.0, valve_open=[0] * 6, pump_pct=0.0, light_pct=light_pct, estop=False)


def test_hourly_price_is_the_tariff_of_the_sites_clock_hour() -> None:
    ctl = _controller()
    cfg = PriceConfig()
    wednesday_10 = datetime(2026, 6, 3, 8, 30, tzinfo=UTC)  # 10:30 in Amsterdam (UTC+2)
    wednesday_02 = datetime(2026, 6, 3, 0, 30, tzinfo=UTC)  # 02:30
    saturday_10 = datetime(2026, 6, 6, 8, 30, tzinfo=UTC)
    prices = econ.hourly_price(ctl, [wednesday_10, wednesday_02, saturday_10])
    assert prices.tolist() == [cfg.tou_peak_eur_mwh + cfg.adder_eur_mwh,
                               cfg.tou_offpeak_eur_mwh + cfg.adder_eur_mwh,
                               cfg.tou_offpeak_eur_mwh + cfg.adder_eur_mwh]
    # 06:30 UTC is 08:30 in Amsterdam: peak there, though 06:30 would be off-peak on a UTC clock.
    assert econ.hourly_price(ctl, [datetime(2026, 6, 3, 6, 30, tzinfo=UTC)])[0] == \
        cfg.tou_peak_eur_mwh + cfg.adder_eur_mwh
    assert econ.hourly_price(ctl, []).shape == (0,)


def test_counted_costs_and_the_estimate_add_up_to_the_profit() -> None:
    ctl = _controller()
    assert econ.today(ctl, None, 1.0, T0) is None, "nothing before the first telemetry"
    ctl.on_telemetry(_telemetry(T0, 1))
    ctl.state = replace(ctl.state, lights_hours_today=2.0, water_today_l=np.full(6, 100.0))
    ctl.crop_twin.dli_today = 3.5
    day = date(2026, 6, 3)
    cached = econ.DayEstimate(day, yield_kg=40.0, lamp_price_eur_mwh=125.0)
    e = econ.today(ctl, cached, 1.5, T0)
    assert e is not None and e.day == day
    area = 6 * 50.0
    assert e.lamp_kwh == pytest.approx(2.0 * 100.0 * area / 1000.0)  # 2 h x 100 W/m2 x 300 m2 = 60 kWh
    assert e.energy_cost_eur == pytest.approx(60.0 * 125.0 / 1000.0)
    assert e.water_l == 600.0 and e.water_cost_eur == pytest.approx(0.6 * 1.5)
    assert e.revenue_eur == pytest.approx(40.0 * ctl.obs_builder.fruit_price_eur_kg)
    assert e.profit_eur == pytest.approx(e.revenue_eur - e.energy_cost_eur - e.water_cost_eur)
    assert e.dli_mol_m2 == 3.5 and set(e.estimated) == {"yield_kg", "revenue_eur", "profit_eur"}
    # Yesterday's estimate is not today's; without one the lamps are priced at the current hour.
    stale = econ.today(ctl, econ.DayEstimate(date(2026, 6, 2), 99.0, 1.0), 1.5, T0)
    assert stale is not None and stale.yield_kg is None and stale.profit_eur is None
    assert stale.lamp_price_eur_mwh == econ.hourly_price(ctl, [T0])[0]


def test_more_light_grows_more_fruit_and_one_batch_equals_single_runs() -> None:
    n = 72
    starts = [T0 + timedelta(seconds=roll.CELL_S * i) for i in range(n)]

    def climate(par: float) -> econ.DayClimate:
        ch = np.zeros((n, len(roll.SCALARS)))
        ch[:, roll.SCALARS.index("par_umol_m2_s")] = par
        ch[:, roll.SCALARS.index("co2_ppm")] = 600.0
        ch[:, roll.SCALARS.index("air_temp_c")] = 21.0
        return econ.DayClimate(starts, ch)

    dim, bright = climate(100.0), climate(500.0)
    empty = econ.DayClimate([], np.zeros((0, len(roll.SCALARS))))
    batch = econ.fruit_kg_m2([dim, bright, empty], [90.0, 90.0, 90.0])
    assert batch[2] is None
    assert batch[0] is not None and batch[1] is not None and 0.0 < batch[0] < batch[1]
    assert batch[1] == pytest.approx(econ.fruit_kg_m2([bright], [90.0])[0], rel=1e-12)
    # Six hours of a producing crop: a plausible fraction of a good day's 0.25 kg/m2.
    assert 0.005 < batch[1] < 0.25


def test_cells_of_today_give_the_lamp_weighted_price_and_a_yield(tmp_path: Path) -> None:
    """Decisions stored, rolled up into cells, read back as the dashboard does."""
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6, soil="loam")
    ctl = _controller()
    rows = []
    # 02:00-03:00 local (off-peak) lamps at 100 %, 10:00-11:00 (peak) at 50 %; one decision a minute.
    for k, (hour, light) in enumerate([(0, 100.0)] * 60 + [(8, 50.0)] * 60):
        ts = datetime(2026, 6, 3, hour, k % 60, tzinfo=UTC)
        d = ctl.on_telemetry(_telemetry(ts, k + 1, light_pct=light, par=250.0 * light / 100.0))
        rows.append(d.record())
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    with sessions() as s:
        s.execute(Decision.__table__.insert(), rows)
        s.commit()
    assert roll.TrendRollup(sessions).catch_up()
    day, start, end = econ.day_bounds(ctl) or (None, None, None)
    assert day == date(2026, 6, 3) and start is not None and end is not None
    with sessions() as s:
        cells, _, sums, counts = roll.read_cells(s, "gh1", roll.cell_index(start), roll.cell_index(end))
    engine.dispose()
    climate = econ.day_climate(cells, sums, counts, 6)
    assert len(climate.starts) == 24
    [kg_m2] = econ.fruit_kg_m2([climate], [econ.crop_age_days(ctl, start)])
    est = econ.estimate(ctl, climate, kg_m2, day)
    cfg = PriceConfig()
    off, peak = cfg.tou_offpeak_eur_mwh + cfg.adder_eur_mwh, cfg.tou_peak_eur_mwh + cfg.adder_eur_mwh
    assert est.lamp_price_eur_mwh == pytest.approx((100.0 * off + 50.0 * peak) / 150.0)
    assert est.yield_kg is not None and est.yield_kg > 0.0
    e = econ.today(ctl, est, 1.0, rows[-1]["ts"])
    assert e is not None and e.lights_hours == ctl.lights_hours_today > 1.4
    assert e.energy_cost_eur == pytest.approx(e.lamp_kwh * est.lamp_price_eur_mwh / 1000.0)


def test_outlook_lines_prices_and_forecast_up_on_clock_hours() -> None:
    ctl = _controller()
    ts = datetime(2026, 6, 3, 8, 40, tzinfo=UTC)  # 10:40 local
    temp = np.arange(24, dtype=float) + 10.0
    solar = np.linspace(0.0, 690.0, 24)
    spot = np.linspace(40.0, 63.0, 24)
    site = Outlook(issued=ts.replace(minute=0), forecast_temp_c=temp,
                   forecast_solar_w_m2=np.concatenate([solar, np.zeros(23)]), price_eur_mwh=spot,
                   price_published=np.zeros(24), price_source="fallback")
    d = ctl.on_telemetry(_telemetry(ts, 1), outlook=site)
    assert econ.outlook(ctl, None) is None
    assert econ.outlook(ctl, (ts, [0.0, 1.0])) is None, "an observation of another layout shows nothing"
    o = econ.outlook(ctl, (d.ts, d.observation))
    assert o is not None and len(o.hours) == len(o.price_eur_mwh) == len(o.temp_c) == len(o.published) == 24
    assert o.hours[0] == datetime(2026, 6, 3, 8, 0, tzinfo=UTC) \
        and o.hours[1] - o.hours[0] == timedelta(hours=1)
    assert o.temp_c[0] is None and o.temp_c[1:] == pytest.approx(temp[:23].tolist())
    assert o.solar_w_m2[1:] == pytest.approx(solar[:23].tolist(), abs=1e-3)
    assert o.price_eur_mwh == pytest.approx((spot + ctl.obs_builder.tariff.adder_eur_mwh).tolist())
    assert o.published == [False] * 24, "forecast slots are marked unpublished"
    # A timestamp written with another offset: the slots are still the site's clock hours (UTC here).
    kolkata = datetime(2026, 6, 3, 10, 40, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    k = econ.outlook(ctl, (kolkata, d.observation))
    assert k is not None and k.hours[0] == datetime(2026, 6, 3, 5, 0, tzinfo=UTC)


def _feed(spot: float, at: datetime) -> Outlook:
    """A day-ahead feed's outlook with a flat spot price (unlike the tariff's peak and off-peak)."""
    return Outlook(issued=at.replace(minute=0), forecast_temp_c=np.full(24, 15.0),
                   forecast_solar_w_m2=np.zeros(47),
                   price_eur_mwh=np.full(24, spot), price_published=np.ones(24), price_source="live")


def test_lamps_cost_the_price_their_decisions_recorded_and_the_tariff_only_fills_in(tmp_path: Path) -> None:
    """A day-ahead feed at 400 EUR/MWh spot while the tariff says peak: the cells keep the 400, the costs
    use it;
    an hour whose records hold no price (stored before prices were kept) is priced at the tariff."""
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6, soil="loam")
    ctl = _controller()
    cfg = PriceConfig()
    recorded, peak = 400.0 + cfg.adder_eur_mwh, cfg.tou_peak_eur_mwh + cfg.adder_eur_mwh
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    rollup = roll.TrendRollup(sessions)

    def store(hour: int, seq0: int, keep_price: bool) -> list[dict[str, object]]:
        rows = []
        for m in range(60):  # 11:00-11:59 and 12:00-12:59 local: peak hours of the tariff, lamps at 100 %
            ts = datetime(2026, 6, 3, hour, m, tzinfo=UTC)
            row = ctl.on_telemetry(_telemetry(ts, seq0 + m, light_pct=100.0, par=250.0),
                                   outlook=_feed(400.0, ts)).record()
            if not keep_price:
                row["estimate"] = {k: v for k, v in row["estimate"].items() if k != "price_eur_mwh"}
            rows.append(row)
        with sessions() as s:
            s.execute(Decision.__table__.insert(), rows)
            s.commit()
        assert rollup.catch_up()
        return rows

    def estimate_now(at: datetime) -> econ.DayEstimate:
        day, start, end = econ.day_bounds(ctl) or (None, None, None)
        assert day is not None and start is not None and end is not None
        with sessions() as s:
            cells, _, sums, counts = roll.read_cells(s, "gh1", roll.cell_index(start), roll.cell_index(end))
        climate = econ.day_climate(cells, sums, counts, 6)
        [kg_m2] = econ.fruit_kg_m2([climate], [econ.crop_age_days(ctl, start)])
        return econ.estimate(ctl, climate, kg_m2, day, at)

    rows = store(9, 1, keep_price=True)
    assert rows[0]["estimate"]["price_eur_mwh"] == recorded != peak
    est = estimate_now(rows[-1]["ts"])
    assert est.lamp_price_eur_mwh == pytest.approx(recorded) and est.lamp_price_source == "recorded"
    e = econ.today(ctl, est, 1.0, rows[-1]["ts"])
    assert e is not None and e.lamp_kwh > 0 and e.price_source == "recorded"
    assert e.energy_cost_eur == pytest.approx(e.lamp_kwh * recorded / 1000.0)

    rows = store(10, 61, keep_price=False)
    est = estimate_now(rows[-1]["ts"])
    assert est.lamp_price_eur_mwh == pytest.approx((recorded + peak) / 2) and est.lamp_price_source == "mixed"
    e = econ.today(ctl, est, 1.0, rows[-1]["ts"])
    assert e is not None and e.price_source == "mixed"
    assert e.energy_cost_eur == pytest.approx(e.lamp_kwh * (recorded + peak) / 2 / 1000.0)
    engine.dispose()


def test_the_current_hours_price_is_the_last_decisions_while_the_lamps_are_off() -> None:
    ctl = _controller()
    ts = datetime(2026, 6, 3, 8, 10, tzinfo=UTC)
    d = ctl.on_telemetry(_telemetry(ts, 1), outlook=_feed(250.0, ts))
    price = econ.recorded_now(ctl, (d.ts, d.observation), ts + timedelta(minutes=40))
    assert price == pytest.approx(250.0 + PriceConfig().adder_eur_mwh)
    assert econ.recorded_now(ctl, (d.ts, d.observation), ts + timedelta(minutes=50)) is None, \
        "the next clock hour"
    assert econ.recorded_now(ctl, None, ts) is None
    empty = econ.DayClimate([], np.zeros((0, len(roll.SCALARS) + 1)))
    e = econ.today(ctl, econ.estimate(ctl, empty, None, date(2026, 6, 3), ts, price), 1.0, ts)
    assert e is not None and e.lamp_price_eur_mwh == price and e.price_source == "recorded"
    e = econ.today(ctl, econ.estimate(ctl, empty, None, date(2026, 6, 3), ts), 1.0, ts)
    assert e is not None and e.lamp_price_eur_mwh == econ.hourly_price(ctl, [ts])[0] \
        and e.price_source == "tariff"

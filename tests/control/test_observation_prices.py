"""Without a site outlook the service's observation carries the tariff in its price slots, unpublished."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from control.observation import ObservationBuilder
from twin.config import PriceConfig
from twin.prices import tou_at
from twin.spec import observation_spec


def tariff_outlook(cfg: PriceConfig, ts: datetime, hours: int) -> np.ndarray:
    """All-in tariff prices of the clock hours from ``ts``, the adder included, as the price slots hold
    them."""
    return tou_at(cfg, [ts + timedelta(hours=k) for k in range(hours)]) + cfg.adder_eur_mwh


def test_tariff_outlook_follows_peak_hours_weekdays_and_the_adder() -> None:
    cfg = PriceConfig(adder_eur_mwh=30.0)
    friday_evening = datetime(2026, 12, 4, 21, 30, tzinfo=UTC)  # a Friday
    prices = tariff_outlook(cfg, friday_evening, 24)
    peak, off = cfg.tou_peak_eur_mwh + 30.0, cfg.tou_offpeak_eur_mwh + 30.0
    assert prices[0] == prices[1] == peak  # 21:00 and 22:00 Friday are peak
    assert prices[2] == off  # 23:00 Friday
    assert np.all(prices[3:] == off)  # Saturday: off-peak all day


def test_observation_price_slots_hold_the_tariff_marked_unpublished() -> None:
    spec = observation_spec(6)
    builder = ObservationBuilder(6, np.full(6, 0.2), np.full(6, 0.35))
    ts = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)  # a Wednesday morning
    obs, _ = builder.build(ts=ts, moisture=np.full(6, 0.3), readings={}, valve_open=np.zeros(6), pump_pct=0.0,
                           light_pct=0.0, pump_current_a=0.0)
    sl = spec.slices
    np.testing.assert_allclose(obs[sl["price"]], tariff_outlook(builder.tariff, ts, 24), rtol=1e-6)
    assert obs[sl["price"]].min() > 0.0  # never the free-power zero that lit every allowed hour
    assert np.all(obs[sl["price_published"]] == 0.0)

"""The report's economics, interval by interval: energy at each decision's recorded price, water at the
site's price, and the fruit the crop twin grew, valued at the fruit price the policy's observation sees."""

from __future__ import annotations

import math
from typing import Any

from audit.report.data import Economics, EnergyModel


class Ledger:
    """Adds each decision's interval to the period's :class:`Economics`; remembers the crop twin's last
    yield, since the twin reports its yield to date, not the interval's."""

    def __init__(self, economics: Economics, energy: EnergyModel) -> None:
        self.econ = economics
        self.energy = energy
        self.prev_yield: float | None = None

    def add(self, estimate: dict[str, Any], dt_h: float, litres: float, lamp_kwh: float,
            pump_kwh: float) -> None:
        """The economic view of one interval: energy at its recorded price, water, the crop twin's harvest."""
        econ = self.econ
        price = estimate.get("price_eur_mwh")
        if isinstance(price, int | float) and math.isfinite(price):
            econ.energy_cost_eur += (lamp_kwh + pump_kwh) * price / 1000.0
            econ.lamp_paid_eur += lamp_kwh * price / 1000.0
            econ.lamp_kwh_priced += lamp_kwh
            econ.priced_hours += dt_h
            econ.price_hours_eur_mwh += price * dt_h
        else:
            econ.unpriced_hours += dt_h
        econ.water_cost_eur += max(litres, 0.0) / 1000.0 * self.energy.water_price_eur_m3
        crop = estimate.get("crop_twin")
        grown = crop.get("yield_kg_m2") if isinstance(crop, dict) else None
        if isinstance(grown, int | float) and math.isfinite(grown):
            if self.prev_yield is not None:  # a restarted crop twin counts from zero again
                gained = grown - self.prev_yield if grown >= self.prev_yield else grown
                econ.yield_kg += gained * econ.floor_m2
                econ.revenue_eur += gained * econ.floor_m2 * self.energy.fruit_price_eur_kg
            self.prev_yield = grown

"""The forecast worker of a running service, wired to its controllers, outlook, limits and leases."""

from __future__ import annotations

from app.forecast.worker import ForecastWorker
from app.runtime import Runtime


def forecast_worker(runtime: Runtime) -> ForecastWorker:
    """A worker over the runtime's greenhouses (off with ``GREENTWIN_FORECAST_EVERY_S=0``)."""
    s = runtime.settings
    return ForecastWorker(runtime.controllers, runtime.outlook, runtime.limits, every_s=s.forecast_every_s,
                          water_price_eur_m3=s.water_price_eur_m3, busy=lambda: runtime.intake.in_flight,
                          mine=runtime.dispatch.may_command)

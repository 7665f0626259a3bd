"""The site's outlook: one weather and one price provider, shared by every greenhouse of the site.

:meth:`OutlookFeed.refresh` asks both providers (each bounded by its time-out and retries, and
never raising) and publishes one :class:`~control.outlook.Outlook`; :meth:`OutlookFeed.run`
does so on the event loop's behalf in a worker thread every ``outlook_refresh_s``, so a decision
only ever reads :attr:`OutlookFeed.current` and never waits on the network. A source that fell back
or whose data is older than ``outlook_stale_s`` puts an ``outlook_*`` alarm on the outlook, which
every decision made on it carries (the alarm book groups them).

The feed's clock is the site's: the wall clock, or the newest decided telemetry's time when that runs
ahead (a simulated site in fast-forward, as ``greentwin demo`` runs one), so the outlook always
starts at the hour the decisions are made in.

No outside weather is measured at the site, so the weather fallback's "yesterday" is the hour the
forecast gave for it at the time (each refresh records its current hour), else climatology.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime

import numpy as np

from app.core.config import Settings
from app.outlook.price_provider import PriceProvider
from app.outlook.weather_provider import WeatherProvider
from control.outlook import SOLAR_LEADS, Outlook
from twin.config import PriceConfig
from twin.price_data import PriceOutlook
from twin.spec import FORECAST_HOURS
from twin.weather_data import climatology

log = logging.getLogger(__name__)


class SiteClock:
    """The wall clock, moved ahead to the newest telemetry time seen (never back)."""

    def __init__(self, wall: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._wall = wall
        self._seen: datetime | None = None

    def saw(self, ts: datetime) -> None:
        if self._seen is None or ts > self._seen:
            self._seen = ts

    def __call__(self) -> datetime:
        wall, seen = self._wall(), self._seen
        return wall if seen is None or seen <= wall else seen


class OutlookFeed:
    """The latest outlook of the site, refreshed off the event loop."""

    def __init__(self, weather: WeatherProvider, prices: PriceProvider, *, stale_s: float = 3 * 3600.0,
                 refresh_s: float = 300.0, longitude: float = 5.0,
                 utc_now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self.weather, self.prices = weather, prices
        self.stale_s, self.refresh_s = float(stale_s), float(refresh_s)
        self._utc_now = utc_now
        self._lock = threading.Lock()
        now = utc_now().astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        # Until the first refresh: climatology and the tariff, as a failed first refresh would give.
        times = np.datetime64(now.replace(tzinfo=None), "s") + np.arange(1, SOLAR_LEADS + 1) \
            * np.timedelta64(3600, "s")
        clim = climatology(times, longitude)
        first = prices.outlook() if not prices.configured else PriceOutlook(
            now, prices.tariff_prices(now), np.zeros(FORECAST_HOURS), "fallback", None, "not fetched yet")
        self._current = self._merge(now, clim[0][:FORECAST_HOURS], clim[2], "fallback", None, first, False)

    @classmethod
    def from_settings(cls, settings: Settings) -> OutlookFeed:
        """Providers as the ``GREENTWIN_*`` settings say (empty URLs: the fallbacks, see the settings)."""
        tariff = PriceConfig(source="tou", adder_eur_mwh=settings.price_adder_eur_mwh)
        clock = SiteClock()
        common = {"timeout_s": settings.outlook_timeout_s, "retries": settings.outlook_retries,
                  "cache_ttl_s": settings.outlook_cache_ttl_s, "utc_now": clock}
        weather = WeatherProvider(settings.weather_url, settings.site_latitude, settings.site_longitude,
                                  **common)
        prices = PriceProvider(settings.price_url, tariff, site_timezone=settings.site_timezone, **common)
        return cls(weather, prices, stale_s=settings.outlook_stale_s, refresh_s=settings.outlook_refresh_s,
                   longitude=settings.site_longitude, utc_now=clock)

    @property
    def tariff(self) -> PriceConfig:
        """The grower's tariff and adder (the observation adds the adder to every price slot)."""
        return self.prices.tariff

    def for_decisions(self, newest: datetime | None) -> Outlook:
        """The outlook for a batch whose newest telemetry is stamped ``newest`` (it moves a site clock on)."""
        if newest is not None and isinstance(self._utc_now, SiteClock):
            self._utc_now.saw(newest)
        out = self.current
        if (self._utc_now() - out.issued).total_seconds() > self.stale_s + 3600.0:  # the refreshes stopped
            out = replace(out, alarms=(*out.alarms, "outlook:not_refreshed"))
        return out

    @property
    def current(self) -> Outlook:
        """The outlook every decision reads now (a frozen value: safe to keep)."""
        with self._lock:
            return self._current

    def refresh(self) -> Outlook:
        """Ask both providers (blocking: seconds at worst) and publish the result."""
        now = self._utc_now().astimezone(UTC)
        hour = now.replace(minute=0, second=0, microsecond=0)
        w = self.weather.forecast(hours=SOLAR_LEADS + 1)  # +0 .. +47 h
        if w.source != "fallback":  # the hour as forecast: tomorrow's fallback replays it
            self.weather.record_observation(hour, float(w.temperature_c[0]),
                                            float(w.relative_humidity_pct[0]),
                                            float(w.shortwave_radiation_w_m2[0]), float(w.wind_speed_m_s[0]),
                                            float(w.precipitation_mm[0]))
        p = self.prices.outlook()
        outlook = self._merge(hour, w.temperature_c[1:FORECAST_HOURS + 1], w.shortwave_radiation_w_m2[1:],
                              w.source, self.weather.age_s if w.source != "fallback" else None, p, True)
        with self._lock:
            self._current = outlook
        return outlook

    def _merge(self, hour: datetime, temp: np.ndarray, solar: np.ndarray, weather_source: str,
               weather_age: float | None, p: PriceOutlook, fetched: bool) -> Outlook:
        alarms = []
        if self.weather.configured and (weather_source == "fallback" or (weather_age or 0.0) > self.stale_s):
            alarms.append(f"outlook_weather:{'fallback' if weather_source == 'fallback' else 'stale'}")
        if self.prices.configured and (p.source == "fallback" or (p.age_s or 0.0) > self.stale_s):
            alarms.append(f"outlook_prices:{'fallback' if p.source == 'fallback' else 'stale'}")
        if not fetched:
            alarms = []  # nothing asked yet: the first refresh decides
        return Outlook(hour, temp, solar, p.eur_mwh, p.published, weather_source, weather_age, p.source,
                       p.age_s, tuple(alarms))

    async def run(self) -> None:
        """Refresh now and every ``refresh_s`` in a worker thread until cancelled; never raises."""
        while True:
            try:
                outlook = await asyncio.to_thread(self.refresh)
                if outlook.alarms:
                    log.warning("outlook degraded: %s", ", ".join(outlook.alarms))
            except Exception:  # noqa: BLE001 - a bug here must not end the refreshes; decisions keep the last
                log.exception("outlook refresh failed")
            await asyncio.sleep(self.refresh_s)

    def close(self) -> None:
        self.weather.close()
        self.prices.close()


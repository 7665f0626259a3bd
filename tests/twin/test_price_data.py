"""The twin's price outlook without a network: which slots come from the known prices, which from
the naive forecast, which from the tariff, and what the outlook says about its source."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np

from twin.price_data import SLOTS, outlook_from_known

START = datetime(2026, 12, 2, 10, tzinfo=UTC)
TARIFF = np.full(SLOTS, 50.0)


def _hour(k: int) -> int:
    return int((START + timedelta(hours=k)).timestamp())


def test_published_hours_are_read_unpublished_ones_are_yesterdays_and_the_rest_the_tariff() -> None:
    mask = np.array([1.0] * 14 + [0.0] * 10)
    known = {_hour(k): 100.0 + k for k in range(-24, 20)}
    out = outlook_from_known(START, known, mask, TARIFF, live=True, age_s=0.0, reason="")
    assert out.source == "live" and out.start == START
    np.testing.assert_array_equal(out.published, mask)
    assert out.eur_mwh[0] == 100.0 and out.eur_mwh[13] == 113.0
    assert out.eur_mwh[14] == 100.0 + 14 - 24  # unpublished though known: the same hour yesterday
    assert (out.eur_mwh[:14] != TARIFF[:14]).all()


def test_nothing_known_is_the_tariff_unpublished_and_a_failure_is_named() -> None:
    out = outlook_from_known(START, {}, np.ones(SLOTS), TARIFF, live=False, age_s=None, reason="timeout: x")
    assert (out.source, out.reason) == ("fallback", "timeout: x") and not out.published.any()
    np.testing.assert_array_equal(out.eur_mwh, TARIFF)
    known = {_hour(0): 80.0}
    stale = outlook_from_known(START, known, np.ones(SLOTS), TARIFF, live=False, age_s=5.0,
                               reason="timeout: x")
    assert (stale.source, stale.age_s, stale.eur_mwh[0], stale.eur_mwh[1]) == ("cache", 5.0, 80.0, 50.0)

"""Ensemble voting: majority valves, median pump/lights, disagreement and odd input."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from safety import VoteReason, safe_state, vote
from safety.voting import weighted_median

Z = 6


def member(valves: list[float], pump: float, lights: float) -> list[float]:
    return [*valves, pump, lights]


def test_valve_majority_and_median() -> None:
    d = vote(
        np.array(
            [
                member([1, 1, 0, 0, 1, 0], 10, 0),
                member([1, 0, 1, 0, 1, 0], 50, 40),
                member([0, 1, 0, 0, 1, 1], 90, 60),
            ]
        )
    )
    np.testing.assert_array_equal(d.action, member([1, 1, 0, 0, 1, 0], 50, 40))
    # valves: four of six split 2:1 -> (4 * 2/3) / 6; pump: |10-50| + |90-50| over 3, / 50 % -> 8/15
    assert d.disagreement == pytest.approx(8 / 15) and d.low_confidence
    assert d.reasons == (VoteReason.LOW_CONFIDENCE,)
    assert d.used_members == (0, 1, 2) and d.dropped_members == ()


def test_even_count_median_matches_numpy() -> None:
    pumps = [10.0, 20.0, 30.0, 40.0]
    d = vote(np.array([member([0] * Z, p, p) for p in pumps]))
    assert d.action[Z] == np.median(pumps) == 25.0


def test_ties_close_the_valve() -> None:
    d = vote(np.array([member([1] * Z, 0, 0), member([0] * Z, 0, 0)]), quorum=2)
    np.testing.assert_array_equal(d.action[:Z], np.zeros(Z))
    # 0.1 + 0.2 != 0.3 in floats; a tie must still be a tie
    weighted = vote(
        np.array([member([1] * Z, 0, 0), member([1] * Z, 0, 0), member([0] * Z, 0, 0)]),
        weights=np.array([0.1, 0.2, 0.3]),
    )
    np.testing.assert_array_equal(weighted.action[:Z], np.zeros(Z))


def test_weighted_vote_follows_heavy_member() -> None:
    heavy = member([1, 0, 1, 0, 1, 0], 80, 70)
    light_a = member([0, 1, 0, 1, 0, 1], 20, 10)
    d = vote(np.array([heavy, light_a, light_a]), weights=np.array([3.0, 1.0, 1.0]))
    np.testing.assert_array_equal(d.action, heavy)


def test_weighted_median_definition() -> None:
    values = np.array([0.0, 50.0, 100.0])
    assert weighted_median(values, np.array([3.0, 1.0, 1.0])) == 0.0
    assert weighted_median(values, np.array([1.0, 1.0, 2.0])) == 75.0  # exactly half below: average


def test_zero_weight_members_abstain() -> None:
    d = vote(
        np.array([member([1] * Z, 50, 50), member([1] * Z, 50, 50), member([0] * Z, 0, 0)]),
        weights=np.array([1.0, 1.0, 0.0]),
    )
    assert d.used_members == (0, 1) and d.disagreement == 0.0 and d.action[0] == 1.0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0, 100.5])
def test_invalid_member_is_dropped(bad: float) -> None:
    good = member([1, 0, 0, 0, 0, 0], 40, 20)
    broken = member([0, 1, 1, 1, 1, 1], bad, 100)
    d = vote(np.array([good, good, broken]))
    assert d.dropped_members == (2,) and d.used_members == (0, 1)
    assert d.has(VoteReason.MEMBER_INVALID) and d.has(VoteReason.OK)
    np.testing.assert_array_equal(d.action, good)


def test_non_binary_valve_in_range_is_thresholded_not_dropped() -> None:
    d = vote(np.array([member([0.7] * Z, 0, 0)] * 3))
    assert d.dropped_members == () and (d.action[:Z] == 1.0).all()
    assert vote(np.array([member([1.5] * Z, 0, 0)] * 3)).has(VoteReason.NO_QUORUM)


def test_no_quorum_gives_safe_state() -> None:
    good = member([1] * Z, 60, 60)
    nan = member([np.nan] * Z, 60, 60)
    d = vote(np.array([good, nan, nan]))
    np.testing.assert_array_equal(d.action, safe_state(Z))
    assert d.low_confidence and d.disagreement == 1.0 and d.confidence == 0.0
    assert d.has(VoteReason.NO_QUORUM) and d.has(VoteReason.MEMBER_INVALID)
    assert vote(np.array([good, nan, nan]), quorum=1).has(VoteReason.OK)
    assert vote(np.array([good] * 3), weights=np.zeros(3)).has(VoteReason.NO_QUORUM)


@pytest.mark.parametrize(
    ("proposals", "zones", "size"),
    [
        (np.zeros((0, Z + 2)), None, Z + 2),
        ([], None, Z + 2),
        (np.ones(Z + 2), None, Z + 2),
        (np.ones((2, 3, 4)), None, Z + 2),
        (np.ones((3, 2)), None, Z + 2),
        (np.ones((3, 5)), 6, 8),
        ([["a", "b", "c"]], None, Z + 2),
        ("nonsense", 3, 5),
        (None, None, Z + 2),
    ],
)
def test_odd_input_never_raises(proposals: Any, zones: int | None, size: int) -> None:
    d = vote(proposals, zones=zones)
    assert d.has(VoteReason.NO_QUORUM) and d.low_confidence
    np.testing.assert_array_equal(d.action, np.zeros(size))


def test_bad_arguments_fall_back_to_defaults() -> None:
    same = np.array([member([1] * Z, 50, 50)] * 3)
    for kwargs in (
        {"weights": [1.0, -1.0, 1.0]},
        {"weights": [1.0]},
        {"weights": "x"},
        {"quorum": 0},
        {"zones": "six"},
    ):
        d = vote(same, **kwargs)
        assert d.has(VoteReason.BAD_ARGUMENT) and d.has(VoteReason.OK) and d.used_members == (0, 1, 2)
    nan_threshold = vote(same, disagreement_threshold=float("nan"))
    assert nan_threshold.has(VoteReason.BAD_ARGUMENT) and not nan_threshold.low_confidence


def test_disagreement_zero_for_identical_members_and_one_for_an_even_split() -> None:
    same = vote(np.array([member([1, 0, 1, 0, 1, 0], 40, 30)] * 5))
    assert same.disagreement == 0.0 and same.confidence == 1.0 and not same.low_confidence
    assert same.reasons == (VoteReason.OK,)

    split = vote(np.array([member([1] * Z, 100, 100)] * 2 + [member([0] * Z, 0, 0)] * 2))
    assert split.disagreement == pytest.approx(1.0) and split.low_confidence
    assert split.has(VoteReason.LOW_CONFIDENCE)


def test_low_confidence_follows_threshold() -> None:
    # one member of three differs on one valve of six: valve score (2 * 1/3) / 6 = 1/9
    base = member([1, 0, 1, 0, 1, 0], 40, 30)
    odd = member([0, 0, 1, 0, 1, 0], 40, 30)
    proposals = np.array([base, base, odd])
    assert vote(proposals).disagreement == pytest.approx(1 / 9)
    assert vote(proposals, disagreement_threshold=0.1).low_confidence
    assert not vote(proposals, disagreement_threshold=0.2).low_confidence


def test_pump_spread_counts_towards_disagreement() -> None:
    proposals = np.array([member([1] * Z, p, 0) for p in (20.0, 40.0, 60.0)])
    # median 40, mean absolute deviation 40/3 %, scaled by 50 %
    assert vote(proposals).disagreement == pytest.approx((40 / 3) / 50)


def test_decision_action_is_read_only() -> None:
    d = vote(np.array([member([1] * Z, 50, 50)] * 3))
    with pytest.raises(ValueError):
        d.action[0] = 0.0


values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, 1.0, 0.5, 100.0]),
    st.floats(0.0, 100.0),
)


@settings(max_examples=200, deadline=None)
@given(
    proposals=st.integers(1, 6).flatmap(
        lambda z: arrays(float, st.tuples(st.integers(0, 7), st.just(z + 2)), elements=values)
    ),
    weights=st.none() | st.lists(st.floats(0.0, 5.0) | st.floats(0.0, 1e308), max_size=7).map(np.array),
    threshold=st.floats(0.0, 1.0),
)
def test_output_is_always_a_valid_action(proposals: np.ndarray, weights: Any, threshold: float) -> None:
    d = vote(proposals, weights=weights, disagreement_threshold=threshold)
    z = proposals.shape[1] - 2
    a = d.action
    assert a.shape == (z + 2,) and np.isfinite(a).all()
    assert set(np.unique(a[:z])) <= {0.0, 1.0}
    assert 0.0 <= a[z] <= 100.0 and 0.0 <= a[z + 1] <= 100.0
    assert 0.0 <= d.disagreement <= 1.0 and d.confidence == pytest.approx(1.0 - d.disagreement)
    assert d.low_confidence == (d.disagreement > threshold or d.has(VoteReason.NO_QUORUM))
    assert d.has(VoteReason.OK) != d.low_confidence
    if d.has(VoteReason.NO_QUORUM):
        np.testing.assert_array_equal(a, safe_state(z))
    assert set(d.used_members).isdisjoint(d.dropped_members)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0.0, 100.0), min_size=1, max_size=9))
def test_weighted_median_with_equal_weights_is_the_median(xs: list[float]) -> None:
    arr = np.array(xs)
    assert weighted_median(arr, np.ones(arr.size)) == pytest.approx(float(np.median(arr)))

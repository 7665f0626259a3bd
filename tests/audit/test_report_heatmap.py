"""Saliency heat maps in the PDF report: drawn for low-confidence decisions that carry their lead-up, else
said so."""

from __future__ import annotations

import io
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

import numpy as np
import pypdf
import pytest
from sqlalchemy import insert

from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision
from app.reports import collect_report_data
from app.reports.describe import feature_names, saliency_map
from app.services.greenhouses import add_greenhouse
from audit.report import render_report
from audit.report.heatmap import SECTION_TITLE
from audit.wording import feature_name
from twin.spec import ObservationSpec

T0 = datetime(2026, 7, 1, tzinfo=UTC)
ZONES = 3
DIM = ObservationSpec(ZONES).dim
STEPS = 10
_SL = ObservationSpec(ZONES).slices
STRONG = {_SL["moisture"].start + 1: "moisture[1]", _SL["irrigation_24h"].start + 2: "irrigation_24h[2]",
          _SL["forecast_solar"].start + 1: "forecast_solar[+2h]"}
WEAK = {_SL["air_temp"].start: "air_temp"}
ABSENT = ("co2", "leaf_temp", "growth_stage")  # zero attribution: never a heat-map row
LOW_AT = (30, 40, 41, 50, 55)  # minutes at which a decision is low-confidence with a saliency history


def _saliency(rng: np.random.Generator) -> list[list[float]]:
    s = np.zeros((STEPS, DIM))
    for i in STRONG:
        s[:, i] = rng.uniform(0.05, 0.2, STEPS) * rng.choice([-1.0, 1.0], STEPS)
    s[:, _SL["moisture"].start + 1] *= 3.0  # moisture[1] dominates every step
    s[-1, _SL["air_temp"].start] = 0.004
    return s.tolist()


def _decision(minute: int, rng: np.random.Generator) -> dict:
    low = minute in LOW_AT
    explanation = None
    if low:
        explanation = {
            "confidence": 0.35, "top": [{"feature": "moisture[1]", "share_pct": 61.0}], "score": 1.2,
            "baseline_score": 0.4, "attributed": 0.8, "members": 5, "steps": 32,
            "history": {"observations": rng.uniform(0, 1, (STEPS, DIM)).tolist(),
                        "actions": rng.uniform(0, 1, (STEPS, ZONES + 2)).tolist(),
                        "saliency": _saliency(rng)},
            "alarms": [], "low_confidence": True,
        }
    return {"greenhouse_id": "gh1", "seq": minute + 1, "ts": T0 + timedelta(minutes=minute),
            "actor": "expert:low_confidence" if low else "policy:v1", "mode": "auto",
            "telemetry": {"flow_l_min": 0.0, "valve_open": [0] * ZONES, "light_pct": 0.0, "pump_pct": 0.0},
            "estimate": {"theta": [0.22] * ZONES}, "member_actions": [], "voted": {},
            "clipped": {"valves": [0] * ZONES, "pump_pct": 0.0, "light_pct": 0.0}, "rules_fired": [],
            "reward_terms": None, "confidence": 0.35 if low else 0.95, "explanation": explanation,
            "cmd_id": None, "ack_status": None}


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('heatmap') / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=ZONES)
    rng = np.random.default_rng(7)
    engine = make_engine(url)
    with make_session_factory(engine).begin() as s:
        s.execute(insert(Decision), [_decision(m, rng) for m in range(60)])
    engine.dispose()
    return url


def _report(url: str, end: datetime, **kwargs) -> tuple[object, str]:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as s:
            data = collect_report_data(s, "gh1", T0, end, verification="not performed", **kwargs)
    finally:
        engine.dispose()
    pdf = render_report(data, generated_by="t", generated_at=T0, report_id="hm")
    text = "\n".join(page.extract_text() for page in pypdf.PdfReader(io.BytesIO(pdf)).pages)
    return data, text


def _section(text: str) -> str:
    """The heat-map section's text: from its heading to the next section."""
    start = text.index(SECTION_TITLE)
    return text[start : text.index("Audit trail verification", start)]


def test_low_confidence_decisions_get_a_heat_map(url: str) -> None:
    data, text = _report(url, T0 + timedelta(hours=1), max_heatmaps=12)
    assert data.saliency_total == len(LOW_AT) and len(data.saliency_maps) == len(LOW_AT)
    first = data.saliency_maps[0]
    assert first.seq == LOW_AT[0] + 1 and first.steps == STEPS and first.total_features == DIM
    assert first.features[0] == "moisture[1]"
    assert set(first.features) == {*STRONG.values(), *WEAK.values()}
    section = _section(text)
    for name in (*STRONG.values(), *WEAK.values()):  # rows named as the dashboard numbers zones
        assert feature_name(name) in section, name
    assert "Zone 2 soil moisture" in section and "Zone 3 irrigation over 24 h" in section
    assert "moisture[1]" not in section
    for name in ABSENT:
        assert feature_name(name) not in section, name
    assert "t-9" in section and "attribution" in section
    assert section.count("confidence 0.35") == len(LOW_AT)
    # cells wrap
    assert '"saliency"' not in text and "saliency of its lead-up recorded" in " ".join(text.split())


def test_many_heat_maps_are_condensed(url: str) -> None:
    """By default a report draws as many maps as its period's length allows (three a day), so an hour's
    five low-confidence decisions get three."""
    data, text = _report(url, T0 + timedelta(hours=1))
    assert data.saliency_total == len(LOW_AT) and [m.seq for m in data.saliency_maps] == [31, 41, 42]
    section = _section(text)
    assert f"The first 3 are drawn; {len(LOW_AT) - 3} more are in the audit trail" in \
        " ".join(section.split())
    assert section.count("confidence 0.35") == 3


def test_report_without_low_confidence_decisions_says_so(url: str) -> None:
    data, text = _report(url, T0 + timedelta(minutes=30))  # before the first low-confidence decision
    assert data.decisions_low_confidence == 0 and not data.saliency_maps
    section = _section(text)
    assert "No low-confidence decisions in this period, so there are no saliency heat maps." in section
    assert "Zone 2 soil moisture" not in section


def test_feature_names_follow_the_recorded_layout() -> None:
    assert feature_names(DIM, ZONES)[:4] == ("moisture[0]", "moisture[1]", "moisture[2]", "target_low[0]")
    assert feature_names(DIM, 6) == feature_names(DIM, ZONES)  # re-zoned since: the map's own size decides
    assert feature_names(7, ZONES) == tuple(f"feature {i}" for i in range(7))


@pytest.mark.parametrize("saliency", [None, [], [[]], [[0.1, 0.2], [0.3]], "x", [[0.1], "x"]])
def test_unusable_saliency_draws_nothing(saliency: object) -> None:
    row = SimpleNamespace(explanation={"history": {"saliency": saliency}}, seq=1, actor="a", confidence=0.2)
    assert saliency_map(row, T0, ZONES, 16) is None


def test_missing_values_stay_missing() -> None:
    steps = [[0.5, float("nan"), 0.0], [0.25, 0.1, "bad"]]
    m = saliency_map(SimpleNamespace(explanation={"history": {"saliency": steps}}, seq=3, actor="a",
                                     confidence=0.2), T0, ZONES, 16)
    assert m is not None and m.features == ("feature 0", "feature 1") \
        and m.values == ((0.5, 0.25), (None, 0.1))
    assert m.total_features == 3 and m.shown_share_pct == pytest.approx(100.0)

"""PDF reports: the printed numbers match the database, every page is stamped, the signature holds."""

from __future__ import annotations

import argparse
import io
import re
import resource
import shlex
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pypdf
import pytest
from sqlalchemy import insert

from app.cli import db as db_cli
from app.cli import main as cli_main
from app.cli import report as report_cli
from app.core.config import Settings
from app.core.db import make_engine, make_session_factory
from app.models import Decision, ModeChange
from app.reports import collect_report_data, site_energy_model
from app.services.greenhouses import add_greenhouse
from app.services.report_signing import CERT_ENV, KEY_ENV, verify_command
from audit.report import render_report, watermark_text
from audit.signing import generate_identity, sign_pdf, verify_pdf

T0 = datetime(2026, 6, 1, tzinfo=UTC)
STEP_S = 576  # 300 decisions x 576 s = exactly 2 days
N = 300
END = T0 + timedelta(days=2)
HOSTILE = '<font name="x">&<script>'
GH_NAME = 'North <b>&amp; "House"'
REPORT_ID = "rpt-0001"


def _actor_mode(i: int) -> tuple[str, str, float, dict | None]:
    if 50 <= i < 70:
        return "operator:manual", "manual", 1.0, {"alarms": [], "low_confidence": False}
    if 120 <= i < 130:
        return "estop", "estop", 1.0, {"alarms": [], "low_confidence": False}
    if i % 25 == 3:
        return "expert:low_confidence", "auto", 0.4, {"alarms": ["held:co2_ppm"], "low_confidence": True}
    if i % 25 == 8:  # an ensemble decision's explanation as the writer stores it (policy.explain's record)
        return "policy:v1" if i < 150 else "policy:v2", "auto", 0.9, EXPLAINED
    return ("policy:v1" if i < 150 else "policy:v2"), "auto", 0.9, None


EXPLAINED = {
    "confidence": 0.9, "score": 0.31, "baseline_score": 0.12, "attributed": 0.19, "members": 5, "steps": 32,
    "top": [{"feature": "moisture[2]", "value": 0.1704, "unit": "m3/m3", "delta_vs_baseline": -0.05,
             "share_pct": 61.4, "attribution": 0.12,
             "sentence": "zone 2 moisture 0.17 m3/m3, 0.02 below its target band: 61 %"},
            {"feature": "air_temp", "value": 24.0, "unit": "degC", "delta_vs_baseline": 2.0,
             "share_pct": 20.0, "attribution": 0.04,
             "sentence": "air_temp 24.0 degC, 2.0 above the reference 22.0: 20 %"}],
    "alarms": [], "low_confidence": False}


def _flow(i: int) -> tuple[float, list[int]]:
    """(flow L/min, valve feedback) of decision i: see the water expectations in the tests."""
    if i % 10 == 0:
        return 12.0, [1, 1, 0]  # split over zones 0 and 1
    if i % 10 == 5:
        return 6.0, [0, 0, 0]  # no feedback: the previous command (i % 10 == 4) opened zone 2
    if i == 297:
        return 3.0, [0, 0, 0]  # no valve open anywhere: unattributed
    return 0.0, [0, 0, 0]


def _rules(i: int) -> list[dict]:
    fired = []
    if i % 7 == 0:
        fired.append({"rule": "valve_min_dwell", "actuator": "valve[0]", "before": 1.0, "after": 0.0})
    if i % 11 == 0:
        fired.append({"rule": "zone_daily_water_cap", "actuator": "valve[1]", "before": 1.0, "after": 0.0,
                      "why": "251.9 L used today; cap 250.0 L"})
    return fired


def _price(i: int) -> float:
    """All-in price of decision i's hour: the lamps (on at odd i) always run in the dear hours."""
    return 300.0 if i % 2 else 100.0


def _decision(seq: int, i: int, ts: datetime) -> dict:
    actor, mode, conf, expl = _actor_mode(i)
    flow, feedback = _flow(i)
    valves = [0, 0, 1] if i % 10 == 4 else [0, 0, 0]
    theta = [0.15 if i < 100 else 0.22, 0.22, 0.30 if i >= 200 else 0.22]
    return {"greenhouse_id": "gh1", "seq": seq, "ts": ts, "actor": actor, "mode": mode,
            "telemetry": {"flow_l_min": flow, "valve_open": feedback, "light_pct": 50.0 if i % 2 else 0.0,
                          "pump_pct": 40.0 if flow else 0.0},
            "estimate": {"theta": theta, "price_eur_mwh": _price(i),
                         "crop_twin": {"yield_kg_m2": 0.001 * (i + 1)}},
            "member_actions": [], "voted": {},
            "clipped": {"valves": valves, "pump_pct": 40.0, "light_pct": 0.0}, "rules_fired": _rules(i),
            "reward_terms": None, "confidence": conf, "explanation": expl, "cmd_id": None, "ack_status": None}


MODE_CHANGES = [
    # (ts, actor, from, to, reason); the first lies before the period and must not count
    (T0 - timedelta(hours=1), "system:start", None, "auto", "boot"),
    (T0 + timedelta(seconds=50 * STEP_S - 1), "operator:alice", "auto", "manual", "irrigate by hand"),
    (T0 + timedelta(seconds=70 * STEP_S - 1), "operator:alice", "manual", "auto", "done"),
    (T0 + timedelta(seconds=120 * STEP_S - 1), "operator:bob", "auto", "estop", HOSTILE),
    (T0 + timedelta(seconds=130 * STEP_S - 1), "operator:bob", "estop", "auto", "cleared"),
    (T0 + timedelta(seconds=200 * STEP_S - 1), "edge:estop", "auto", "estop",
     "telemetry reports the e-stop pressed"),
    (T0 + timedelta(seconds=200 * STEP_S + 30), "operator:carol", "estop", "auto", "checked pump"),
]


def _seed(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=3, name=GH_NAME)  # loam band 0.195-0.27
    rows = [_decision(0, -1, T0 - timedelta(seconds=STEP_S))]  # before the period: starts the first interval
    rows += [_decision(i + 1, i, T0 + timedelta(seconds=STEP_S * i)) for i in range(N)]
    rows.append(_decision(N + 1, N, END))  # at the exclusive end: outside
    engine = make_engine(url)
    with make_session_factory(engine).begin() as s:
        s.execute(insert(Decision), rows)
        for seq, (ts, actor, frm, to, reason) in enumerate(MODE_CHANGES, start=1):
            s.add(ModeChange(greenhouse_id="gh1", seq=seq, ts=ts, actor=actor, from_mode=frm, to_mode=to,
                             reason=reason))
    engine.dispose()
    return url


def _collect(url: str, **kwargs):
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as s:
            return collect_report_data(s, "gh1", T0, END, verification="passed: 42 records verified",
                                       **kwargs)
    finally:
        engine.dispose()


def _pages(pdf: bytes) -> list[str]:
    return [p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages]


def _row(text: str, *cells: str) -> bool:
    """Whether a table row with these cells (in order, whitespace between) was printed."""
    return re.search(r"\s+".join(re.escape(c) for c in cells), text) is not None


def _expected_water() -> tuple[list[float], float]:
    per_zone, unattributed = [0.0, 0.0, 0.0], 0.0
    for i in range(N):
        litres = _flow(i)[0] * STEP_S / 60.0
        if i % 10 == 0:
            per_zone[0] += litres / 2
            per_zone[1] += litres / 2
        elif i % 10 == 5:
            per_zone[2] += litres
        else:
            unattributed += litres
    return per_zone, unattributed


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _seed(tmp_path_factory.mktemp("report"))


@pytest.fixture(scope="module")
def identity():
    return generate_identity()


@pytest.fixture(scope="module")
def signed_report(seeded: str, identity) -> tuple[bytes, object]:
    data = _collect(seeded)
    pdf = render_report(data, generated_by="agronomist <ann@farm>",
                        generated_at=datetime(2026, 6, 3, 8, tzinfo=UTC), report_id=REPORT_ID)
    return sign_pdf(pdf, identity.key, identity.cert), data


def test_collected_numbers_match_the_rows(seeded: str) -> None:
    data = _collect(seeded)
    zones, unattributed = _expected_water()
    assert data.decision_count == N and sum(h.decisions for h in data.hours) == N and len(data.hours) == 48
    assert [z.water_l for z in data.zones] == pytest.approx(zones)
    assert data.water_unattributed_l == pytest.approx(unattributed) and unattributed > 0
    assert data.estops == 2
    assert data.operator_overrides == {"operator:alice": 2, "operator:bob": 2, "operator:carol": 1}
    expected_rules = Counter(f["rule"] for i in range(N) for f in _rules(i))
    assert data.clips_by_rule == dict(expected_rules)
    assert data.decisions_manual == 20 and data.decisions_estop == 10
    assert data.decisions_low_confidence == sum(1 for i in range(N)
                                                if _actor_mode(i)[0] == "expert:low_confidence")
    assert [(p.version, p.decisions) for p in data.policies] == [
        ("v1", sum(1 for i in range(N) if _actor_mode(i)[0] == "policy:v1")),
        ("v2", sum(1 for i in range(N) if _actor_mode(i)[0] == "policy:v2")),
    ]
    step_h = STEP_S / 3600
    z0, z2 = data.zones[0], data.zones[2]
    assert z0.hours_below == pytest.approx(100 * step_h) and z0.hours_in_band == pytest.approx(200 * step_h)
    assert z2.hours_above == pytest.approx(100 * step_h)
    assert data.zones[1].time_in_band_pct == pytest.approx(100.0)
    assert data.lamp_hours == pytest.approx(N / 2 * 0.5 * step_h)


def test_pdf_prints_the_database_numbers(signed_report) -> None:
    pdf, data = signed_report
    pages = _pages(pdf)
    text = "\n".join(pages)
    zones, unattributed = _expected_water()
    assert _row(text, "Decisions", str(N))
    assert _row(text, "E-stops", "2")
    assert _row(text, "Water total (L)", f"{sum(zones) + unattributed:,.1f}")
    assert _row(text, "Water not attributable to a zone (L)", f"{unattributed:,.1f}")
    for rule, n in Counter(f["rule"] for i in range(N) for f in _rules(i)).items():
        assert _row(text, rule, str(n)), rule
    for z, litres in enumerate(zones):  # numbered from 1, the band in % VWC, as on the dashboard
        assert _row(text, str(z + 1), "19.5–27 %", f"{litres:,.1f}")
    assert _row(text, "1", "19.5–27 %", f"{zones[0]:,.1f}", "66.7", f"{100 * STEP_S / 3600:.1f}")
    assert "0.195" not in text and "0.270" not in text
    for title in ("Zone 1: moisture, band 19.5–27 %", "Zone 3: moisture, band 19.5–27 %"):
        assert title in text, title
    assert _row(text, "Mode changes by operators", "5")
    assert "v1" in text and "v2" in text and "passed: 42 records verified" in text
    assert "2026-06-01T00:00:00+00:00 to 2026-06-03T00:00:00+00:00" in text
    assert "2026-06-03T08:00:00+00:00" in text  # generated at


def _log_section(text: str) -> str:
    """The decision log's text, words joined by single spaces (table cells wrap anywhere)."""
    return " ".join(text[text.index("Decision log, summarised") :].split())


def test_the_decision_log_says_why_in_words(signed_report) -> None:
    pdf, data = signed_report
    log = _log_section("\n".join(_pages(pdf)))
    assert "{" not in log and '"' not in log, "no stored JSON in the log"
    events = {e.event: e for e in data.events}
    # A safety clip: what the rule does, the zone's valve numbered as on the dashboard, the change and its
    # reason.
    capped = events["Safety rule changed the Zone 2 valve: the zone has had its daily water cap"]
    assert capped.count == sum(1 for i in range(N) if i % 11 == 0)
    assert capped.example == ("Zone 2 valve closed instead of open: the zone has had its daily water cap "
                              "(251.9 L used today; cap 250.0 L)")
    assert capped.example in log
    assert events["Safety rule changed the Zone 1 valve: a valve may not switch again before its "
                  "minimum on/off time"].count == sum(1 for i in range(N) if i % 7 == 0)
    # An ensemble decision: its strongest factor in words and % VWC, the rest of the record left out.
    factor = events["The policy's strongest factor was Zone 3 soil moisture"]
    assert factor.count == sum(1 for i in range(N) if _actor_mode(i)[3] is EXPLAINED)
    assert factor.example == ("main factor: Zone 3 soil moisture 17.0 % VWC, below the typical 22.0 % VWC: "
                              "61 % of the decision") and factor.example in log
    assert "baseline_score" not in log and "air temp" not in log
    fallback = events["The ensemble disagreed: the threshold expert decided"]
    assert fallback.count == sum(1 for i in range(N) if _actor_mode(i)[0] == "expert:low_confidence")
    # A recorded alarm code (a reading held at its last value) reads as words, never as the code.
    assert fallback.example == "alarms: CO₂ held at its last reading (the sensor gave none)"
    assert "held:" not in log and "co2_ppm" not in log
    # Operators' commands and e-stops, with the command sent in words.
    assert events["Operator's command in manual mode (manual)"].count == 20
    assert events["E-stop latched: everything off"].count == 10
    assert "All valves closed; pump 40 %; lamps off" in log


def test_every_page_is_stamped(signed_report) -> None:
    pdf, data = signed_report
    pages = _pages(pdf)
    mark = watermark_text(data, REPORT_ID)
    assert "gh1" in mark and REPORT_ID in mark and "2026-06-01T00:00:00+00:00" in mark
    for n, text in enumerate(pages, start=1):
        assert mark in text, f"page {n} lacks the watermark"
        assert f"page {n} of {len(pages)}" in text


def test_user_text_prints_literally(signed_report) -> None:
    text = "\n".join(_pages(signed_report[0]))
    assert HOSTILE in text
    assert GH_NAME in text
    assert "agronomist <ann@farm>" in text


def test_signature_verifies_and_one_byte_breaks_it(signed_report, identity) -> None:
    pdf, _ = signed_report
    ok = verify_pdf(pdf, identity.cert)
    assert ok.ok, ok.reason
    assert ok.signer is not None and "greentwin" in ok.signer

    # Flip one byte inside the first page's content stream, which the ByteRange covers.
    reader = pypdf.PdfReader(io.BytesIO(pdf))
    contents = reader.pages[0].raw_get("/Contents")
    ref = contents[0] if isinstance(contents, pypdf.generic.ArrayObject) else contents
    obj_at = pdf.index(f"\n{ref.idnum} 0 obj".encode()) + 1
    data_at = pdf.index(b"stream", obj_at) + len(b"stream\r\n") + 10
    m = re.search(rb"/ByteRange\s*\[\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s*\]", pdf)
    assert m is not None
    start, length = int(m.group(1)), int(m.group(2))
    assert start <= data_at < start + length
    tampered = bytearray(pdf)
    tampered[data_at] ^= 0x01
    bad = verify_pdf(bytes(tampered), identity.cert)
    assert not bad.ok and "modified" in bad.reason

    appended = verify_pdf(pdf + b"\n% added after signing\n", identity.cert)
    assert not appended.ok and "whole file" in appended.reason

    other = verify_pdf(pdf, generate_identity().cert)
    assert not other.ok and "trusted" in other.reason
    assert not verify_pdf(b"%PDF-1.4 not really", identity.cert).ok


def test_long_periods_are_summarised_by_day_or_week(seeded: str) -> None:
    """Past eight days the log has a row a day, past two months a row a week: the sums of the hours merged."""
    from audit.report.decision_log import buckets

    data = _collect(seeded)
    data.period_to = data.period_from + timedelta(days=9)
    days = buckets(data)
    assert [d.start for d in days] == [T0, T0 + timedelta(days=1)]
    assert sum(d.decisions for d in days) == N and [d.decisions for d in days] == [150, 150]
    assert sum(sum(d.water_l) for d in days) == pytest.approx(sum(sum(h.water_l) for h in data.hours))
    assert days[0].theta_mean(0) == pytest.approx(sum(h.theta_sum[0] for h in data.hours[:24])
                                                  / sum(h.theta_n[0] for h in data.hours[:24]))
    assert sum(d.rules.get("valve_min_dwell", 0) for d in days) == data.clips_by_rule["valve_min_dwell"]
    text = "\n".join(_pages(render_report(data, generated_by="t", generated_at=T0, report_id="c")))
    assert "By day" in text and _row(text, "2026-06-02", "150")
    data.period_from = T0 - timedelta(days=3)  # past two months: weeks counted from the period's first day
    data.period_to = data.period_from + timedelta(days=70)
    assert [(w.start, w.decisions) for w in buckets(data)] == [(T0 - timedelta(days=3), N)]


def test_rejects_naive_or_empty_periods(seeded: str) -> None:
    engine = make_engine(seeded)
    with make_session_factory(engine)() as s:
        with pytest.raises(ValueError, match="timezone-aware"):
            collect_report_data(s, "gh1", T0.replace(tzinfo=None), END, verification="")
        with pytest.raises(ValueError, match="after"):
            collect_report_data(s, "gh1", END, T0, verification="")
        with pytest.raises(LookupError):
            collect_report_data(s, "nope", T0, END, verification="")
    engine.dispose()


def test_cli_writes_and_verifies_a_signed_report(seeded: str, tmp_path: Path, monkeypatch, capsys) -> None:
    for var in (KEY_ENV, CERT_ENV, "GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY",
                "GREENTWIN_AUDIT_SIGNING_KEY", "GREENTWIN_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    out, state = tmp_path / "r.pdf", tmp_path / "state"
    args = argparse.Namespace(report_command=None, greenhouse="gh1",
                              period_from="2026-06-01T02:00:00+02:00", period_to="2026-06-03T00:00:00Z",
                              out=str(out), url=seeded, state_dir=str(state))
    assert report_cli.main(args) == 0
    printed_out = capsys.readouterr()
    assert "generated a self-signed report signing key" in printed_out.err
    assert (state / "report-signing" / "report-cert.pem").is_file()
    text = "\n".join(_pages(out.read_bytes()))
    assert _row(text, "Decisions", str(N)) and "not performed: audit keys not configured" in text
    # The first page names the line that checks it, with the state directory that holds the certificate.
    printed = verify_command(None, state.resolve())
    assert printed in " ".join(text.split()) and printed in printed_out.out

    verify = argparse.Namespace(report_command="verify", pdf=str(out), cert=None, state_dir=str(state))
    assert report_cli.main(verify) == 0
    # The line the dashboard shows, run as written from another folder: it finds the certificate.
    monkeypatch.delenv(report_cli.STATE_DIR_ENV, raising=False)
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    line = verify_command(None, state).replace("FILE.pdf", shlex.quote(str(out)))
    argv = shlex.split(line)
    assert argv[:3] == ["greentwin", "report", "verify"]
    assert cli_main(argv[1:]) == 0 and capsys.readouterr().out.startswith("ok")
    assert cli_main(["report", "verify", str(out)]) == 2, "without it, ./state holds no certificate"
    capsys.readouterr()
    tampered = bytearray(out.read_bytes())
    tampered[len(tampered) // 3] ^= 0x01  # the signature's /Contents sits near the end
    out.write_bytes(bytes(tampered))
    assert report_cli.main(verify) == 1
    assert "FAIL" in capsys.readouterr().out

    naive = argparse.Namespace(**{**vars(args), "period_from": "2026-06-01"})
    assert report_cli.main(naive) == 2


@pytest.mark.soak
def test_thirty_days_of_minute_decisions(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'big.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=6)
    engine = make_engine(url)
    n = 30 * 24 * 60
    with make_session_factory(engine).begin() as s:
        batch = []
        for i in range(n):
            row = _decision(i + 1, i % N, T0 + timedelta(minutes=i))
            row["telemetry"]["valve_open"] = row["telemetry"]["valve_open"] + [0, 0, 0]
            row["estimate"]["theta"] = row["estimate"]["theta"] * 2
            batch.append(row)
            if len(batch) == 5000:
                s.execute(insert(Decision), batch)
                batch = []
        s.execute(insert(Decision), batch)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t = time.perf_counter()
    with make_session_factory(engine)() as s:
        data = collect_report_data(s, "gh1", T0, T0 + timedelta(days=30), verification="not performed")
    collected = time.perf_counter() - t
    pdf = render_report(data, generated_by="t", generated_at=T0, report_id="big")
    ident = generate_identity()
    signed = sign_pdf(pdf, ident.key, ident.cert)
    elapsed = time.perf_counter() - t
    rss_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    engine.dispose()
    pages = len(pypdf.PdfReader(io.BytesIO(signed)).pages)
    print(f"\n43,200 decisions: collect {collected:.1f} s, collect+render+sign {elapsed:.1f} s, "
          f"{pages} pages, {len(signed) / 1e6:.2f} MB; max RSS {rss_after / 1024:.0f} MiB "
          f"(+{(rss_after - rss_before) / 1024:.0f})")
    assert data.decision_count == n and len(data.hours) == 720
    assert elapsed < 30
    assert verify_pdf(signed, ident.cert).ok


def test_economics_follow_the_recorded_prices_and_the_crop_twins_harvest(signed_report) -> None:
    pdf, data = signed_report
    e = data.economics
    step_h, floor = STEP_S / 3600, 3 * 50.0
    lamp_kwh = sum(100.0 * floor * 0.5 * step_h / 1000 for i in range(N) if i % 2)
    pump_cost = sum(0.75 * 0.4 * step_h * _price(i) / 1000 for i in range(N) if _flow(i)[0])
    zones, unattributed = _expected_water()
    assert e.yield_kg == pytest.approx(0.001 * (N - 1) * floor)  # harvest between the period's decisions
    assert e.revenue_eur == pytest.approx(e.yield_kg * 1.0)
    assert e.energy_cost_eur == pytest.approx(lamp_kwh * 300.0 / 1000 + pump_cost)
    assert e.water_cost_eur == pytest.approx((sum(zones) + unattributed) / 1000 * 0.75)
    assert e.profit_eur == pytest.approx(e.revenue_eur - e.energy_cost_eur - e.water_cost_eur)
    assert e.lamp_price_eur_mwh == pytest.approx(300.0) and e.mean_price_eur_mwh == pytest.approx(200.0)
    assert e.price_capture == pytest.approx(1.5) and e.unpriced_hours == 0.0
    text = "\n".join(_pages(pdf))
    assert _row(text, "Profit (EUR)", f"{e.profit_eur:,.2f}")
    assert _row(text, "Price the lamps paid / period average (EUR/MWh)", "300.0 / 200.0")
    assert _row(text, "Lamp price capture (paid / average)", "1.50")


def test_economics_at_the_sites_configured_prices(seeded: str, tmp_path: Path, monkeypatch) -> None:
    """The fruit and water prices come from the settings (the observation's fruit price), in the
    collected numbers and in what the CLI prints."""
    settings = Settings(fruit_price_eur_kg=2.5, water_price_eur_m3=1.2)
    e = _collect(seeded, energy=site_energy_model(settings)).economics
    zones, unattributed = _expected_water()
    assert e.fruit_price_eur_kg == 2.5 and e.water_price_eur_m3 == 1.2
    assert e.revenue_eur == pytest.approx(e.yield_kg * 2.5) and e.yield_kg > 0
    assert e.water_cost_eur == pytest.approx((sum(zones) + unattributed) / 1000 * 1.2)
    for var in (KEY_ENV, CERT_ENV, "GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY",
                "GREENTWIN_AUDIT_SIGNING_KEY", "GREENTWIN_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GREENTWIN_FRUIT_PRICE_EUR_KG", "2.5")
    monkeypatch.setenv("GREENTWIN_WATER_PRICE_EUR_M3", "1.2")
    out = tmp_path / "r.pdf"
    args = argparse.Namespace(report_command=None, greenhouse="gh1", period_from=T0.isoformat(),
                              period_to=END.isoformat(), out=str(out), url=seeded,
                              state_dir=str(tmp_path / "state"))
    assert report_cli.main(args) == 0
    text = " ".join(" ".join(_pages(out.read_bytes())).split())
    assert "2.50 EUR/kg" in text and "1.20 EUR/m3" in text
    monkeypatch.setenv("GREENTWIN_FRUIT_PRICE_EUR_KG", "-1")
    assert report_cli.main(args) == 2


def test_cli_writes_a_chinese_report_that_signs_and_verifies(seeded: str, tmp_path: Path, monkeypatch,
                                                             capsys) -> None:
    """``--language zh-Hans``: every section in Chinese (in reportlab's built-in CJK font), recorded codes
    such as a held reading in words, and the signature checks as any other report's."""
    for var in (KEY_ENV, CERT_ENV, "GREENTWIN_AUDIT_KEYS", "GREENTWIN_AUDIT_KEY",
                "GREENTWIN_AUDIT_SIGNING_KEY", "GREENTWIN_ENVIRONMENT"):
        monkeypatch.delenv(var, raising=False)
    out, state = tmp_path / "zh.pdf", tmp_path / "state"
    assert cli_main(["report", "--greenhouse", "gh1", "--from", T0.isoformat(), "--to", END.isoformat(),
                     "--out", str(out), "--url", seeded, "--state-dir", str(state),
                     "--language", "zh-Hans"]) == 0
    capsys.readouterr()
    pdf = out.read_bytes()
    text = "".join("".join(_pages(pdf)).split())  # Chinese wraps anywhere: compare without whitespace
    for words in ("温室报告：", "决策日志摘要", "按规则统计的安全限幅", "图表", "低置信度决策：输入显著性",
                  "审计记录校验：未执行：未配置审计密钥", "室内CO₂浓度沿用上次读数（传感器无读数）",
                  "集成策略意见分歧：由阈值专家规则决策"):
        assert words in text, words
    assert "held:" not in text and "co2_ppm" not in text and "Decisionlog" not in text
    assert b"STSong-Light" in pdf
    assert cli_main(["report", "verify", str(out), "--state-dir", str(state)]) == 0
    assert capsys.readouterr().out.startswith("ok")
    with pytest.raises(SystemExit):
        cli_main(["report", "--greenhouse", "gh1", "--out", str(out), "--language", "fr"])


def test_the_clis_languages_are_the_catalogues() -> None:
    from audit.wording import LANGUAGES

    assert report_cli.REPORT_LANGUAGES == LANGUAGES

"""The report an agronomist reads: its first page answers the period with the numbers the rows give,
the decision log is summarised by event and hour, the length follows the period, and the CSV holds
the same numbers.

The first page is read back with poppler's ``pdftotext`` (as a viewer shows it); every expected
number is computed here from the rows this test writes, not from the collected data.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pypdf
import pytest
from sqlalchemy import insert, update

from app.alarm_models import AlarmAction, AlarmEpisode
from app.alarms.catalogue import describe
from app.cli import db as db_cli
from app.core.db import make_engine, make_session_factory
from app.models import Decision, ModeChange, Zone
from app.reports import collect_report_data
from app.services.greenhouses import add_greenhouse
from audit.report import render_report, report_csv

T0 = datetime(2026, 9, 1, tzinfo=UTC)
ZONES = 6
NAMES = ["North bed", None, "Cherry row", None, None, "Trial"]
STEP_S = 10  # a decision every 10 s: the demo's pace, far denser than a real edge box's minute
SIX_H = 6 * 3600 // STEP_S
FLOOR_M2 = ZONES * 50.0
CHANGE = {"version": 2, "actor": "agronomist:anna", "reason": "wetter band for fruit set",
          "changed": {"zones[1].target_low_vwc": [0.195, 0.21]}}


def _actor(i: int, n: int) -> tuple[str, str, float]:
    if n // 6 <= i < n // 6 + 30:
        return "operator:olga", "manual", 1.0
    if n // 3 <= i < n // 3 + 10:
        return "estop", "estop", 1.0
    if i % 50 == 7:
        return "expert:low_confidence", "auto", 0.4
    return "policy:v3", "auto", 0.9


def _flow(i: int) -> tuple[float, list[int]]:
    """10 L/min on every fourth decision, into the zones in turn, with the valve's feedback."""
    if i % 4:
        return 0.0, [0] * ZONES
    return 10.0, [1 if z == (i // 4) % ZONES else 0 for z in range(ZONES)]


def _theta(i: int, n: int) -> list[float]:
    theta = [0.22] * ZONES
    if i < n // 4:
        theta[0] = 0.15  # zone 1 dry for the first quarter
    if i >= 3 * n // 4:
        theta[5] = 0.30  # zone 6 wet for the last quarter
    return theta


def _rules(i: int) -> list[dict]:
    fired = []
    if i % 9 == 0:
        fired.append({"rule": "zone_daily_water_cap", "actuator": f"valve[{i % ZONES}]", "before": 1.0,
                      "after": 0.0, "why": "251.9 L used today; cap 250.0 L"})
    if i % 13 == 0:
        fired.append({"rule": "valve_min_dwell", "actuator": "valve[0]", "before": 1.0, "after": 0.0})
    return fired


def _price(i: int) -> float:
    return 300.0 if i % 2 else 100.0


def _row(i: int, n: int, ts: datetime) -> dict:
    actor, mode, conf = _actor(i, n)
    flow, feedback = _flow(i)
    estimate: dict = {"theta": _theta(i, n), "price_eur_mwh": _price(i),
                      "crop_twin": {"yield_kg_m2": 1e-5 * (i + 1)}}
    if i == n // 2:
        estimate["settings_change"] = CHANGE
    explanation = None
    if i % 25 == 3 and actor.startswith("policy:"):
        explanation = {"top": [{"feature": "moisture[2]", "value": 0.1704, "unit": "m3/m3",
                                "share_pct": 61.4}],
                       "alarms": [], "low_confidence": False}
    return {"greenhouse_id": "gh1", "seq": i + 2, "ts": ts, "actor": actor, "mode": mode,
            "telemetry": {"flow_l_min": flow, "valve_open": feedback, "light_pct": 50.0 if i % 2 else 0.0,
                          "pump_pct": 40.0 if flow else 0.0},
            "estimate": estimate, "member_actions": [], "voted": {},
            "clipped": {"valves": feedback, "pump_pct": 40.0 if flow else 0.0, "light_pct": 0.0},
            "rules_fired": _rules(i), "reward_terms": None, "confidence": conf, "explanation": explanation,
            "cmd_id": None, "ack_status": None}


def _episode(kind: str, severity: str, raised: datetime, cleared: datetime | None,
             acked: datetime | None) -> dict:
    return {"group_id": kind[:16], "greenhouse_id": "gh1", "kind": kind, "severity": severity,
            "raised_at": raised, "last_at": raised, "count": 1, "cleared_at": cleared,
            "acknowledged_by": "operator:olga" if acked else None, "acknowledged_at": acked,
            "ack_comment": "seen" if acked else None}


def _action(kind: str, action: str, at: datetime, comment: str) -> dict:
    return {"group_id": kind[:16], "greenhouse_id": "gh1", "kind": kind, "action": action,
            "actor": "operator:olga", "at": at, "comment": comment,
            "shelved_until": at + timedelta(hours=1) if action == "shelve" else None}


def _seed(root: Path, n: int, step_s: int) -> str:
    url = f"sqlite:///{root / 'gt.sqlite3'}"
    db_cli.upgrade(url)
    add_greenhouse(url, "gh1", zones=ZONES, name="Glasshouse 4")  # loam: band 19.5-27 %
    rows = [_row(-1, n, T0 - timedelta(seconds=step_s))]  # before the period: opens the first interval
    rows += [_row(i, n, T0 + timedelta(seconds=step_s * i)) for i in range(n)]
    h = timedelta(hours=1)
    engine = make_engine(url)
    with make_session_factory(engine).begin() as s:
        for z, name in enumerate(NAMES):
            s.execute(update(Zone).where(Zone.greenhouse_id == "gh1", Zone.index == z).values(name=name))
        for k in range(0, len(rows), 5000):
            s.execute(insert(Decision), rows[k : k + 5000])
        s.execute(insert(AlarmEpisode), [
            _episode("zone_dry:0", "critical", T0 - h, T0 - h / 2, None),  # before the period: not counted
            _episode("zone_dry:0", "critical", T0 + h, T0 + 2 * h, T0 + 1.1 * h),
            _episode("zone_dry:0", "critical", T0 + 3 * h, None, None),
            _episode("probe_fault:2", "warning", T0 + 2 * h, T0 + 2.5 * h, T0 + 2.1 * h)])
        s.execute(insert(AlarmAction), [
            _action("zone_dry:0", "ack", T0 + 1.1 * h, "watering by hand"),
            _action("probe_fault:2", "ack", T0 + 2.1 * h, "cable loose"),
            _action("probe_fault:2", "shelve", T0 + 2.2 * h, "technician on the way"),
            _action("zone_dry:0", "ack", T0 + 100 * 24 * h, "after the period")])
        for seq, (i, actor, frm, to) in enumerate(
                [(n // 6, "operator:olga", "auto", "manual"),
                 (n // 6 + 30, "operator:olga", "manual", "auto"),
                 (n // 3, "operator:olga", "auto", "estop"),
                 (n // 3 + 10, "operator:olga", "estop", "auto")], 1):
            s.add(ModeChange(greenhouse_id="gh1", seq=seq, ts=T0 + timedelta(seconds=step_s * i - 1),
                             actor=actor, from_mode=frm, to_mode=to, reason="by hand"))
    engine.dispose()
    return url


def _report(url: str, hours: float, language: str = "en") -> tuple[object, bytes]:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as s:
            data = collect_report_data(s, "gh1", T0, T0 + timedelta(hours=hours),
                                       verification="passed: 7 records",
                                       verify_command="greentwin report verify FILE.pdf "
                                                      "--state-dir /srv/gt/state",
                                       language=language)
    finally:
        engine.dispose()
    return data, render_report(data, generated_by="anna", generated_at=T0 + timedelta(days=30),
                               report_id="r6")


@pytest.fixture(scope="module")
def six_hours_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return _seed(tmp_path_factory.mktemp("six"), SIX_H, STEP_S)


@pytest.fixture(scope="module")
def six_hours(six_hours_url: str) -> tuple[object, bytes]:
    return _report(six_hours_url, 6)


@pytest.fixture(scope="module")
def six_hours_zh(six_hours_url: str) -> tuple[object, bytes]:
    return _report(six_hours_url, 6, "zh-Hans")


def _page_one(pdftotext: str, pdf: bytes) -> list[str]:
    """Page one's lines as pdftotext reads them in drawing order (the watermark, drawn last, trails)."""
    out = subprocess.run([pdftotext, "-raw", "-f", "1", "-l", "1", "-", "-"], input=pdf, capture_output=True,
                         check=True, timeout=60).stdout.decode()
    return [" ".join(line.split()) for line in out.splitlines()]


def _expected(n: int, step_s: int) -> dict[str, float]:
    dt_h = step_s / 3600.0
    water = [0.0] * ZONES
    lamp_kwh = pump_kwh = energy_cost = 0.0
    for i in range(n):
        flow, feedback = _flow(i)
        if flow:
            water[feedback.index(1)] += flow * step_s / 60.0
            pump_kwh += 0.75 * 0.4 * dt_h
            energy_cost += 0.75 * 0.4 * dt_h * _price(i) / 1000.0
        if i % 2:
            kwh = 100.0 * FLOOR_M2 * 0.5 * dt_h / 1000.0
            lamp_kwh += kwh
            energy_cost += kwh * _price(i) / 1000.0
    yield_kg = 1e-5 * (n - 1) * FLOOR_M2
    water_cost = sum(water) / 1000.0 * 0.75
    return {"yield": yield_kg, "revenue": yield_kg * 1.0, "energy": lamp_kwh + pump_kwh,
            "energy_cost": energy_cost, "water": sum(water), "water_cost": water_cost,
            "profit": yield_kg - energy_cost - water_cost,
            **{f"water{z}": w for z, w in enumerate(water)}}


def test_the_first_page_answers_the_period_with_the_rows_numbers(six_hours, pdftotext: str) -> None:
    _, pdf = six_hours
    lines = _page_one(pdftotext, pdf)
    text = "\n".join(lines)
    e = _expected(SIX_H, STEP_S)
    for label, key, digits in (("Yield, fresh fruit (kg)", "yield", 2), ("Revenue (EUR)", "revenue", 2),
                               ("Energy (kWh)", "energy", 1), ("Energy cost (EUR)", "energy_cost", 2),
                               ("Water (L)", "water", 1), ("Water cost (EUR)", "water_cost", 2),
                               ("Profit (EUR)", "profit", 2)):
        [printed] = [line.removeprefix(label + " ") for line in lines if line.startswith(label + " ")]
        # As printed (to the digit; a value on a rounding boundary may round either way).
        assert printed.count(".") == 1 and len(printed.split(".")[1]) == digits, printed
        assert float(printed.replace(",", "")) == pytest.approx(e[key], abs=0.51 * 10**-digits), \
            (label, printed)
    for label, value in (("Mode changes by operators", 4), ("E-stops", 1),
                         ("Operators' commands (manual mode)", 30),
                         ("Alarm acknowledgements", 2), ("Alarm shelvings", 1), ("Settings changes", 1),
                         ("Expert fallbacks (ensemble disagreed)",
                          sum(1 for i in range(SIX_H) if _actor(i, SIX_H)[0] == "expert:low_confidence")),
                         ("Decisions clipped by safety", sum(1 for i in range(SIX_H) if _rules(i)))):
        assert f"{label} {value}" in lines, (label, text)
    # Zones numbered from 1 and named, bands in % VWC, time in band from the rows' moisture.
    quarter_h = SIX_H // 4 * STEP_S / 3600
    for z in range(ZONES):
        in_band = 75.0 if z in (0, 5) else 100.0
        below, above = (quarter_h if z == 0 else 0.0), (quarter_h if z == 5 else 0.0)
        cells = [str(z + 1), *([NAMES[z]] if NAMES[z] else []), "19.5–27 %", f"{e[f'water{z}']:,.1f}",
                 f"{in_band:.1f}", f"{below:.1f}", f"{above:.1f}"]
        assert " ".join(cells) in lines, (cells, text)
    assert "0.195" not in text and "0.27" not in text
    # Alarms raised in the period by kind (the one before it left out), with what operators did.
    assert f"{describe('zone_dry:0').title}: zone 1 critical 2 1 0 1" in lines, text
    assert f"{describe('probe_fault:2').title}: zone 3 warning 1 1 1 0" in lines, text
    # The settings change, in the dashboard's words and units; the policy version in force; the checks.
    assert "Zone 2 band low 19.5 % -> 21.0 %" in text and "wetter band for fruit set" in text
    assert any(line.startswith(f"v3 {sum(1 for i in range(SIX_H) if _actor(i, SIX_H)[0] == 'policy:v3')} ")
               for line in lines), text
    assert "Audit trail verification: passed: 7 records" in text
    assert "greentwin report verify FILE.pdf --state-dir /srv/gt/state" in text
    assert "Glasshouse 4 (gh1)" in text and "(6 h; UTC, end exclusive)" in text


def test_the_decision_log_is_summarised_by_event_and_hour_in_words(six_hours) -> None:
    data, pdf = six_hours
    pages = [p.extract_text() for p in pypdf.PdfReader(io.BytesIO(pdf)).pages]
    log = " ".join("\n".join(pages).split())
    log = log[log.index("Decision log, summarised") :]
    assert "{" not in log and '"' not in log, "no stored JSON in the log"
    events = {e.event: e.count for e in data.events}
    capped_z4 = sum(1 for i in range(SIX_H) if i % 9 == 0 and i % ZONES == 3)
    assert events["Safety rule changed the Zone 4 valve: the zone has had its daily water cap"] \
        == capped_z4 > 0
    assert events["Safety rule changed the Zone 1 valve: a valve may not switch again before its "
                  "minimum on/off time"] == sum(1 for i in range(SIX_H) if i % 13 == 0)
    assert events["Operator's command in manual mode (olga)"] == 30
    assert events["E-stop latched: everything off"] == 10
    assert events["The policy's strongest factor was Zone 3 soil moisture"] == \
        sum(1 for i in range(SIX_H) if i % 25 == 3 and _actor(i, SIX_H)[0] == "policy:v3")
    assert ("Zone 4 valve closed instead of open: the zone has had its daily water cap "
            "(251.9 L used today; cap 250.0 L)") in log
    assert "main factor: Zone 3 soil moisture 17.0 % VWC: 61 % of the decision" in log
    assert len(data.hours) == 6 and sum(h.decisions for h in data.hours) == SIX_H
    assert sum(h.operator for h in data.hours) == 30 \
        and sum(h.fallback for h in data.hours) == data.decisions_fallback
    assert sum(sum(h.rules.values()) for h in data.hours) == sum(len(_rules(i)) for i in range(SIX_H))
    for h in data.hours:  # each hour's row: its time, decision count, and its clips by rule
        assert f"{h.start:%Y-%m-%d %H:%M} {h.decisions} " in log


def test_the_csv_holds_the_first_pages_numbers(six_hours) -> None:
    data, _ = six_hours
    rows = list(csv.DictReader(io.StringIO(report_csv(data))))
    e = _expected(SIX_H, STEP_S)

    def value(section: str, item: str, zone: str = "") -> float:
        [row] = [r for r in rows if r["section"] == section and r["item"] == item and r["zone"] == zone]
        return float(row["value"])

    for key in ("yield", "revenue", "energy", "energy_cost", "water", "water_cost", "profit"):
        assert value("money", key) == pytest.approx(e[key], abs=1e-3), key
    assert value("interventions", "alarm_acks") == 2 and value("interventions", "operator_commands") == 30
    dry = f"{describe('zone_dry:0').title}: zone 1 (critical)"
    assert (value("alarm", f"{dry}: raised"), value("alarm", f"{dry}: acknowledged")) == (2, 1)
    assert value("alarm", f"{dry}: open_at_end") == 1
    [change] = [r for r in rows if r["section"] == "settings_change"]
    assert change["item"] == "agronomist:anna: Zone 2 band low 19.5 % -> 21.0 %"
    assert change["value"] == "wetter band for fruit set" \
        and change["start"] == (T0 + timedelta(hours=3)).isoformat()
    for z in range(ZONES):
        assert value("zone", "water", str(z + 1)) == pytest.approx(e[f"water{z}"], abs=1e-3)
        assert value("zone", "band_low", str(z + 1)) == pytest.approx(19.5)
    assert value("zone", "time_in_band", "1") == pytest.approx(75.0)
    assert {r["zone_name"] for r in rows if r["section"] == "zone" and r["zone"] == "3"} == {"Cherry row"}
    hours = [r for r in rows if r["section"] == "hour" and r["item"] == "decisions"]
    assert [r["start"] for r in hours] == [(T0 + timedelta(hours=k)).isoformat() for k in range(6)]
    assert sum(int(r["value"]) for r in hours) == SIX_H
    first_hour_z1 = [r for r in rows
                     if r["section"] == "hour" and r["item"] == "moisture" and r["zone"] == "1"][0]
    assert float(first_hour_z1["value"]) == pytest.approx(15.0) and first_hour_z1["unit"] == "% VWC"


def _pages(pdf: bytes) -> int:
    return len(pypdf.PdfReader(io.BytesIO(pdf)).pages)


def test_the_length_follows_the_period_not_the_decision_rate(six_hours, tmp_path: Path) -> None:
    """Six hours at the demo's pace are a few pages; a day and a week (a decision every 5 min) add pages
    for their hourly rows only: 28 times the period is not 28 times the pages."""
    six = _pages(six_hours[1])
    week_url = _seed(tmp_path, 7 * 24 * 12, 300)
    _, day_pdf = _report(week_url, 24)
    _, week_pdf = _report(week_url, 7 * 24)
    day, week = _pages(day_pdf), _pages(week_pdf)
    print(f"\npages: 6 h {six}, 1 day {day}, 1 week {week}")
    assert six <= 6
    assert six <= day <= six + 3
    assert week <= 3 * six


def test_people_text_in_the_csv_never_runs_as_a_formula(six_hours) -> None:
    data, _ = six_hours
    hostile = dataclasses.replace(data, greenhouse_name='=HYPERLINK("http://x","y")')
    rows = list(csv.DictReader(io.StringIO(report_csv(hostile))))
    [name] = [r["value"] for r in rows if r["item"] == "greenhouse_name"]
    assert name == "'" + hostile.greenhouse_name
    assert any(r["value"].startswith("-") for r in rows if r["item"] == "profit"), \
        "a negative number stays a number"


def test_a_chinese_report_reads_in_chinese_with_the_same_numbers(six_hours, six_hours_zh,
                                                                 pdftotext: str) -> None:
    """The same period in zh-Hans: page one read back as a viewer shows it has the Chinese headings, labels
    and alarm titles beside the English report's numbers, and no code a reader would have to decode."""
    lines = _page_one(pdftotext, six_hours_zh[1])
    text = "\n".join(lines)
    for heading in ("温室报告：Glasshouse 4", "收支，以及人员和安全层的操作", "分区：灌溉水量与达标时间",
                    "报警", "设置变更", "使用中的策略版本", "审计记录与签名"):
        assert heading in lines, (heading, text)
    english = _page_one(pdftotext, six_hours[1])
    for en_label, zh_label in (("Profit (EUR)", "利润（欧元）"), ("Water (L)", "灌溉用水（升）"),
                               ("E-stops", "急停次数"), ("Alarm acknowledgements", "报警确认次数")):
        [value] = [line.removeprefix(en_label + " ") for line in english if line.startswith(en_label + " ")]
        assert f"{zh_label} {value}" in lines, (zh_label, text)
    assert "1 North bed 19.5–27 % 150.0 75.0 1.5 0.0" in lines, text
    assert f"{describe('zone_dry:0', 'zh-Hans').title}：1号区 严重 2 1 0 1" in lines, text
    assert "2号区目标区间下限 19.5 % -> 21.0 %" in text
    assert "（6 小时；UTC，不含结束时刻）" in text and "审计记录校验：passed: 7 records" in text
    assert "第 1 页，共" in text
    for english_word in ("Profit", "Zone", "Alarm", "critical", "Settings", "Period"):
        assert english_word not in text, english_word
    # Every page: the decision log's events in words, no stored code (a held reading, a rule id as an event).
    # Chinese wraps anywhere in a cell, so the text is compared with every space and line break taken out.
    pdf_pages = pypdf.PdfReader(io.BytesIO(six_hours_zh[1])).pages
    pages = "".join("".join(p.extract_text() for p in pdf_pages).split())
    log = pages[pages.index("决策日志摘要") :]
    assert "安全规则调整了4号区阀门：该区已达到每日灌溉用水上限" in log
    assert "4号区阀门关闭（原为开启）：该区已达到每日灌溉用水上限" in log
    assert "策略最主要的影响因素：3号区土壤体积含水量" in log
    assert "held:" not in pages and "Safetyrule" not in pages and "mainfactor" not in pages
    assert "土壤体积含水量" in pages and "灌溉" in pages
    data = six_hours_zh[0]
    assert data.language == "zh-Hans" and data.decision_count == six_hours[0].decision_count
    assert data.economics.profit_eur == pytest.approx(six_hours[0].economics.profit_eur)


def test_the_csv_keeps_machine_names_in_every_language(six_hours, six_hours_zh) -> None:
    """The CSV's header, sections and items are the same machine names whatever the report's language, so a
    spreadsheet or a script reads every user's export alike (the API's CSV is always collected in English)."""
    en = list(csv.reader(io.StringIO(report_csv(six_hours[0]))))
    zh = list(csv.reader(io.StringIO(report_csv(six_hours_zh[0]))))
    assert en[0] == zh[0] == ["section", "item", "zone", "zone_name", "start", "value", "unit"]
    machine = [(r[0], r[1]) for r in en if r[0] in ("money", "interventions", "zone", "hour", "period")]
    assert machine == [(r[0], r[1]) for r in zh
                       if r[0] in ("money", "interventions", "zone", "hour", "period")]

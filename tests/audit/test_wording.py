"""The catalogue of words: complete in both languages, covering every feature, unit and clip rule the code
has, and renderers that turn any stored decision JSON into sentences without raising."""

from __future__ import annotations

import json
import math
import re
import string
from typing import Any

import pytest

from audit import wording
from audit.decision_words import (
    clip_text,
    clips_text,
    command_text,
    decision_words,
    explanation_text,
    factor_text,
)
from safety.clipper import CLIP_ORDER
from safety.rules import RuleId
from twin.spec import FEATURES, ObservationSpec

CJK = re.compile(r"[\u4e00-\u9fff]")


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def test_every_key_has_both_languages_with_the_same_placeholders() -> None:
    entries = wording.catalogue()
    assert len(entries) > 200
    for key, entry in entries.items():
        assert set(entry) == set(wording.LANGUAGES), key
        assert all(entry[lang].strip() or key.startswith("unit.1") for lang in wording.LANGUAGES), key
        assert _fields(entry["en"]) == _fields(entry["zh-Hans"]) or key == "clip.detail", key
    # Chinese where a reader needs it: every sentence and label with words in it has Chinese in it.
    for key, entry in entries.items():
        words = re.sub(r"\{\w+\}", "", entry["en"])
        if key.startswith(("explain.", "rule.", "alarm.", "command.", "feature.", "gh.", "kv.", "col.")) \
                and re.search(r"[a-z]{3}", words) and key != "feature.co2":
            assert CJK.search(entry["zh-Hans"]), key


def test_every_clip_rule_observation_feature_and_unit_has_words() -> None:
    rules = {str(r) for r in RuleId} | {str(r) for r in CLIP_ORDER}
    assert len(rules) >= 17
    for rule in rules:
        assert wording.has(f"rule.{rule}"), rule
    for feature in FEATURES:
        assert wording.has(f"feature.{feature.name}"), feature.name
        assert wording.has(f"unit.{feature.unit}"), feature.unit
    for name in ObservationSpec(6).names:  # every indexed name reads as words, not as code
        label = wording.feature_name(name, "en")
        assert "[" not in label and "_" not in label, (name, label)
        assert CJK.search(wording.feature_name(name, "zh-Hans")) or name == "co2", name


def test_labels_and_units_read_as_people_count() -> None:
    assert wording.feature_name("moisture[3]", "en") == "Zone 4 soil moisture"
    assert wording.feature_name("moisture[1]", "zh-Hans", ["", "north bed"]) == \
        "2号区（north bed）土壤体积含水量"
    assert wording.feature_name("price[+0h]", "en") == "all-in electricity price this hour"
    assert wording.feature_name("forecast_temp[+3h]", "zh-Hans") == "3 小时后室外气温预报"
    assert wording.feature_value("moisture[0]", 0.1704, "m3/m3", "en") == "17.0 % VWC"
    assert wording.feature_value("price[+0h]", 42, "EUR/MWh", "zh-Hans") == "42.0 欧元/兆瓦时"
    assert wording.feature_value("valve_open[2]", 1.0, "1", "zh-Hans") == "开启"
    assert wording.feature_value("air_temp", math.nan, "degC", "en") == "–"
    assert wording.actuator_name("valve[1]", "en", [None, "north bed"]) == "Zone 2 (north bed) valve"
    assert wording.zone_list([0, 3], "en") == "zones 1, 4" and wording.zone_list([2], "zh-Hans") == "3号区"
    assert wording.language("zh") == "zh-Hans" and wording.language("fr") == "en" \
        and wording.language(None) == "en"
    assert wording.text("no.such.key", "zh-Hans") == "no.such.key"
    # a template missing its value stays unfilled, no error
    assert wording.text("zone", "zh-Hans") == "{n}号区"


def test_a_decision_in_both_languages() -> None:
    clipped = {"valves": [0, 1, 0], "pump_pct": 40.0, "light_pct": 100.0}
    names = [None, "north bed", None]
    assert command_text(clipped, "en", names) == "Zone 2 (north bed) open, others closed; pump 40 %; lamps on"
    assert command_text(clipped, "zh-Hans", names) == "2号区（north bed）开启，其余关闭；水泵 40%；补光灯开启"
    assert command_text({"valves": [0, 0], "pump_pct": 0, "light_pct": 0}, "en") == \
        "All valves closed; pump off; lamps off"
    firing = {"rule": "zone.daily_water_cap", "actuator": "valve[1]", "before": 1.0, "after": 0.0,
              "why": "251.9 L used today; cap 250.0 L"}
    assert clip_text(firing, "en") == ("Zone 2 valve closed instead of open: the zone has had its daily "
                                       "water cap (251.9 L used today; cap 250.0 L)")
    assert clip_text(firing, "zh-Hans") == "2号区阀门关闭（原为开启）：该区已达到每日灌溉用水上限"
    dark = {"rule": "lights.dark_period", "actuator": "lights", "before": 100.0, "after": 0.0}
    assert clip_text(dark, "en") == "Lamps off instead of 100 %: it is the crop's daily dark period"
    # A row stored before rule ids were dotted still reads as its rule.
    assert "daily water cap" in clip_text({"rule": "zone_daily_water_cap", "actuator": "valve[0]"}, "en")
    estimate = {"price_eur_mwh": 42.0, "lamp_break_even_eur_mwh": 61.4}
    words = explanation_text({"alarms": []}, "en", actor="policy:expert", estimate=estimate, clipped=clipped)
    assert words[-1] == "Lamps on: all-in price 42 EUR/MWh is below this crop's break-even of 61 EUR/MWh"
    zh = explanation_text({"alarms": []}, "zh-Hans", actor="policy:expert", estimate=estimate,
                          clipped=clipped)
    assert zh[-1] == "补光灯开启：综合电价 42 欧元/兆瓦时，低于该作物的盈亏平衡电价 61 欧元/兆瓦时"
    factor = {"feature": "moisture[3]", "value": 0.17, "unit": "m3/m3", "delta_vs_baseline": -0.06,
              "share_pct": 41.2, "band_low": 0.195, "band_high": 0.27}
    assert factor_text(factor, "en") == ("Zone 4 soil moisture 17.0 % VWC, below its band 19.5–27 %: "
                                         "41 % of the decision")
    old = {"feature": "pump_current", "value": 0.12, "unit": "1", "delta_vs_baseline": 0.115, "share_pct": 8}
    assert factor_text(old, "en") == \
        "pump current 12.0 % of rating, above the typical 0.50 % of rating: 8 % of the decision"
    assert explanation_text(None, "en", actor="expert:low_confidence", confidence=0.45) == \
        ["The ensemble's members disagreed (confidence 45 %), so the threshold expert decided"]


HOSTILE: list[Any] = [
    None, "", "text", 3, math.nan, math.inf, True, [], {}, [None], [1, "x"], {"top": None}, {"top": "x"},
    {"top": [None, 3, "x", {}, {"feature": None}, {"feature": 5}, {"feature": "moisture[x]"},
             {"feature": "moisture[2]", "value": "0.2", "band_low": math.nan, "band_high": None},
             {"feature": "price[+99999999999999999999h]", "value": math.inf, "share_pct": math.nan,
              "delta_vs_baseline": -math.inf, "unit": 7},
             {"feature": "zz[3]", "value": 1e308, "unit": "{unit}", "share_pct": 1e308,
              "delta_vs_baseline": 1e-308}]},
    {"error": "explanation failed: ValueError"}, {"valves": "101", "pump_pct": "40", "light_pct": None},
    {"valves": [math.nan, None, "1", {}, 2, -1], "pump_pct": math.nan, "light_pct": -math.inf},
    [{"rule": None, "actuator": None}, {"rule": "x{0}", "actuator": "valve[-1]", "before": "a", "after": []},
     {"actuator": "valve[999999999999999999999]", "before": 1, "after": 0, "why": 12}, "pump.range", 7,
     {"rule": "lights.dark_period", "actuator": "{zone}", "before": math.nan}],
]


@pytest.mark.parametrize("lang", [*wording.LANGUAGES, "xx", None])
@pytest.mark.parametrize("value", HOSTILE)
def test_renderers_never_raise_on_any_stored_shape(value: Any, lang: Any) -> None:
    words = decision_words(explanation=value, clipped=value, rules_fired=value, actor=value, confidence=value,
                           estimate=value, lang=lang, zone_names=value if isinstance(value, list) else ())
    assert isinstance(words.command, str) and all(isinstance(s, str) for s in words.clips)
    assert words.explanation and all(isinstance(s, str) and s for s in words.explanation)
    assert isinstance(factor_text(value, lang), str) and isinstance(clip_text(value, lang), str)
    assert isinstance(clips_text(value, lang), list) and isinstance(command_text(value, lang), str)
    json.dumps([words.explanation, words.command, words.clips])  # what the API sends


def test_page_labels_used_by_templates_and_scripts_are_in_the_catalogue() -> None:
    from pathlib import Path

    web = Path(__file__).resolve().parents[2] / "app" / "web"
    used: set[str] = set()
    for path in (web / "templates").glob("*.html"):
        used |= set(re.findall(r"""\bt\("([a-z_.-]+)"\)""", path.read_text()))
    for path in (web / "static").glob("*.js"):
        used |= set(re.findall(r"""\bt\("([a-z_.-]+)"[,)]""", path.read_text()))
    assert {"gh.decisions", "col.why", "kv.pump_commanded", "nav.logout"} <= used
    missing = sorted(k for k in used if not wording.has(k))
    assert missing == []


def test_the_first_decision_under_new_settings_says_who_changed_what_and_why() -> None:
    change = {"version": 3, "actor": "agronomist:pia", "reason": "zone 2 drains into the path",
              "changed": {"zones[1].target_high_vwc": [0.27, 0.3]}}
    [en] = [s for s in explanation_text(None, "en", actor="policy:x", estimate={"settings_change": change})
            if "settings" in s]
    assert en == ("First decision under settings version 3, changed by agronomist:pia (zone 2 drains into "
                  "the path): Zone 2 band high 27 % → 30 %")
    zh = explanation_text(None, "zh-Hans", actor="policy:x", estimate={"settings_change": change})
    assert any("设置版本 3" in s and "agronomist:pia" in s and "2号区 目标区间上限 27 % → 30 %" in s
               for s in zh)
    later = explanation_text(None, "en", actor="policy:x", estimate={"settings_version": 3})
    assert not any("settings" in s for s in later)

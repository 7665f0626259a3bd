"""One catalogue of the words people read: labels, units and message templates in English and
Simplified Chinese.

The dashboard, the API and the signed report must name a feature, a zone, a safety rule or an alarm the
same way, in the reader's language, so every label and sentence template lives in ``wording.json`` beside
this module (one entry per key, one text per language) and is looked up here. It sits at the bottom of
the layering with :mod:`audit.labels` (the report's layout may not import the service), and no lookup
raises: a missing key or a template that does not fill falls back to English, then to the key itself,
because a label is never worth failing a page or a signed report for.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Sequence
from functools import cache
from pathlib import Path

LANGUAGES: tuple[str, ...] = ("en", "zh-Hans")
"""The languages every key has: English and Simplified Chinese (the source articles' readers)."""
DEFAULT_LANGUAGE = "en"
_DATA = Path(__file__).with_name("wording.json")
_INDEXED = re.compile(r"^([a-z][a-z0-9_]*)\[(\+?)(\d+)(h?)\]$")
_SCALED: dict[str, tuple[float, str]] = {"m3/m3": (100.0, "m3/m3")}
"""Stored unit -> (factor, display unit): moisture is kept as a fraction and read in percent."""
_FEATURE_UNITS: dict[str, tuple[float, str]] = {"pump_current": (100.0, "rating"),
                                                 "growth_stage": (100.0, "season")}
"""Features whose stored unit is a bare ratio ("1") but which read as a percentage of something."""
_YES_NO = frozenset({"valve_failed", "price_published", "lamps_ours"})


@cache
def catalogue() -> dict[str, dict[str, str]]:
    """Every key with its text per language, as the data file holds them (read once)."""
    data = json.loads(_DATA.read_text(encoding="utf-8"))
    return {str(k): {str(lang): str(t) for lang, t in v.items()} for k, v in data.items()}


def language(value: object) -> str:
    """A supported language for any input: itself when supported (``zh`` and ``zh-CN`` read as
    ``zh-Hans``), else English, so a stale or odd preference still renders."""
    if isinstance(value, str):
        if value in LANGUAGES:
            return value
        if value.lower().replace("_", "-") in ("zh", "zh-cn", "zh-hans", "zh-sg"):
            return "zh-Hans"
    return DEFAULT_LANGUAGE


def severity_words(severity: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """An alarm severity code as the alarm list says it ('critical', '严重'); an unknown one as it is."""
    key = f"severity.{severity}"
    return text(key, lang) if has(key) else severity


def text(key: str, lang: str = DEFAULT_LANGUAGE, **values: object) -> str:
    """The text of ``key`` in ``lang`` with ``values`` filled in; English, then the key, when it is missing
    or does not fill."""
    entry = catalogue().get(key)
    if entry is None:
        return key
    for candidate in (entry.get(language(lang)), entry.get(DEFAULT_LANGUAGE)):
        if candidate is None:
            continue
        try:
            return candidate.format(**values) if values else candidate
        except (KeyError, IndexError, ValueError, AttributeError):
            continue
    return key


def has(key: str) -> bool:
    """Whether the catalogue knows ``key`` (callers choose a generic text otherwise)."""
    return key in catalogue()


def texts(prefixes: Iterable[str], lang: str) -> dict[str, str]:
    """Every key under ``prefixes`` in ``lang`` with its placeholders unfilled: what a page's script needs
    to label itself (it fills ``{n}`` and the like as it renders)."""
    chosen, lang = tuple(prefixes), language(lang)
    return {k: v.get(lang) or v.get(DEFAULT_LANGUAGE) or k for k, v in catalogue().items()
            if k.startswith(chosen)}


def number(value: float) -> str:
    """A reading with as many digits as it deserves: 251.9 -> '252', 17.04 -> '17.0', 0.123 -> '0.12'."""
    a = abs(value)
    if a >= 100:
        return f"{value:.0f}"
    if a >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}" if a >= 0.01 or a == 0 else f"{value:.1g}"


def finite(value: object) -> float | None:
    """A JSON number as a float when it is a finite number (not a bool, NaN or a string), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def with_unit(value: str, unit: str, lang: str) -> str:
    """``value`` and its display unit: '42 EUR/MWh', '17.0 % VWC'; Chinese writes a percent sign close."""
    if not unit:
        return value
    return f"{value}{unit}" if language(lang) == "zh-Hans" and unit.startswith("%") else f"{value} {unit}"


def unit_label(unit: str, lang: str) -> str:
    """A stored unit as people read it (``m3/m3`` -> '% VWC', ``degC`` -> '°C'); an unknown unit as it is."""
    return text(f"unit.{unit}", lang) if has(f"unit.{unit}") else unit


def zone_name(index: int, lang: str = DEFAULT_LANGUAGE, name: str | None = None) -> str:
    """A zone as people count it, with its name when it has one: 'Zone 2 (north bed)', '2号区（北床）'."""
    n = index + 1
    return text("zone.named", lang, n=n, name=name) if name else text("zone", lang, n=n)


def zone_list(indices: Iterable[int], lang: str = DEFAULT_LANGUAGE) -> str:
    """Several zones in one phrase ('zones 1, 3'; 'zone 2'; 'no zone'), as an alarm or a clip names them."""
    numbers = [str(i + 1) for i in indices]
    if not numbers:
        return text("zones.none", lang)
    if len(numbers) == 1:
        return text("zones.one", lang, n=numbers[0])
    return text("zones.many", lang, list=text("list.sep", lang).join(numbers))


def zone_title(index: int, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """:func:`zone_name` with the name ``zone_names`` gives the zone, if any (settings may name some
    zones)."""
    name: object = None
    try:
        name = zone_names[index] if index >= 0 else None
    except (IndexError, TypeError, KeyError):
        pass
    return zone_name(index, lang, name if isinstance(name, str) and name.strip() else None)


def feature_name(feature: str, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """An observation feature as people name it: ``moisture[3]`` -> 'Zone 4 soil moisture',
    ``price[+0h]`` -> 'all-in electricity price this hour', ``forecast_temp[+3h]`` -> '... in 3 h'."""
    match = _INDEXED.match(feature)
    base = match.group(1) if match else feature
    label = text(f"feature.{base}", lang) if has(f"feature.{base}") else base.replace("_", " ")
    if match is None:
        return label
    count = int(match.group(3))
    if match.group(2) or match.group(4):  # a time ahead: forecast hours and price slots
        when = text("when.now", lang) if count == 0 else text("when.ahead", lang, h=count)
        return text("feature.at_time", lang, feature=label, when=when)
    return text("feature.at_zone", lang, zone=zone_title(count, lang, zone_names), feature=label)


def feature_value(feature: str, value: object, unit: str, lang: str = DEFAULT_LANGUAGE) -> str:
    """A feature's value with its unit as people read it ('17.0 % VWC', '42 EUR/MWh', 'open'); '–' when
    the stored value is no finite number."""
    v = finite(value)
    if v is None:
        return "–"
    match = _INDEXED.match(feature)
    base = match.group(1) if match else feature
    if base == "valve_open":
        return text("value.open" if v >= 0.5 else "value.closed", lang)
    if base in _YES_NO:
        return text("value.yes" if v >= 0.5 else "value.no", lang)
    factor, shown = _FEATURE_UNITS.get(base) or _SCALED.get(unit) or (1.0, unit)
    digits = f"{v * factor:.1f}" if unit == "m3/m3" else number(v * factor)
    return with_unit(digits, unit_label(shown, lang), lang)


def actuator_name(actuator: str, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """A safety report's actuator as people read it: ``valve[3]`` -> 'Zone 4 valve', ``lights`` -> 'lamps'."""
    match = _INDEXED.match(actuator)
    if match is not None and match.group(1) == "valve" and not match.group(2):
        return text("actuator.valve", lang, zone=zone_title(int(match.group(3)), lang, zone_names))
    return text(f"actuator.{actuator}", lang) if has(f"actuator.{actuator}") else actuator

"""A stored decision in sentences: why it was made, what it commanded and what the safety layer changed.

The decision record keeps JSON written by many versions of the service (rows from before explanations,
before clip reasons, hand-edited test rows, NaN where a sensor gave nothing). These functions read any
shape of it and never raise: what cannot be read is left out of the sentence, since the page, the API
and the signed report must show the rest of a decision even when one field is odd. Words come from
:mod:`audit.wording`, so all three say the same thing in the reader's language.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, TypeVar, cast

from audit.labels import band_label
from audit.wording import (
    DEFAULT_LANGUAGE,
    actuator_name,
    feature_name,
    feature_value,
    finite,
    has,
    text,
    with_unit,
    zone_title,
)

F = TypeVar("F", bound=Callable[..., Any])
TOP_FACTORS = 3
_NO_VALUE_FEATURES = frozenset({"hour_sin", "hour_cos"})
"""Features whose value means nothing to a reader (a clock on a circle): named, not quoted."""


def _never_raise(default: Callable[[], Any]) -> Callable[[F], F]:
    """A renderer that answers ``default()`` rather than raising on a record nobody foresaw (it keeps
    the renderer's signature, so callers are checked against the real one)."""
    def wrap(fn: F) -> F:
        @wraps(fn)
        def safe(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except Exception:  # a sentence is never worth failing a page or a signed report for
                return default()
        return cast(F, safe)
    return wrap


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _pct(value: float) -> str:
    return f"{value:.0f}"


def _capital(sentence: str) -> str:
    """A sentence starts with a capital (a no-op on Chinese): 'lamps off ...' -> 'Lamps off ...'."""
    return sentence[:1].upper() + sentence[1:]


@_never_raise(str)
def factor_text(factor: Any, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """One explanation factor as a sentence: 'Zone 4 soil moisture 17.0 % VWC, below its band 19.5–27 %:
    41 % of the decision'; '' for an entry that is no factor."""
    if not isinstance(factor, Mapping) or not isinstance(factor.get("feature"), str):
        return ""
    feature, unit = factor["feature"], _str(factor.get("unit"))
    base = feature.split("[", 1)[0]
    share = finite(factor.get("share_pct"))
    words = {"feature": feature_name(feature, lang, zone_names),
             "share": "–" if share is None else _pct(share),
             "value": feature_value(feature, factor.get("value"), unit, lang)}
    value = finite(factor.get("value"))
    low, high = finite(factor.get("band_low")), finite(factor.get("band_high"))
    if base in _NO_VALUE_FEATURES:
        return text("explain.factor_share", lang, **words)
    if base == "moisture" and value is not None and low is not None and high is not None:
        where = "below" if value < low else "above" if value > high else "in"
        return text(f"explain.moisture_{where}", lang, band=band_label(low, high), **words)
    delta = finite(factor.get("delta_vs_baseline"))
    if value is None or delta is None or delta == 0:
        return text("explain.factor_plain", lang, **words)
    reference = feature_value(feature, value - delta, unit, lang)
    direction = text("explain.above" if delta > 0 else "explain.below", lang)
    return text("explain.factor", lang, direction=direction, reference=reference, **words)


def _actor_sentence(actor: str, confidence: float | None, lang: str) -> str:
    """Who decided, when it was not the served policy's vote: the operator, the e-stop, the watchdog..."""
    if actor.startswith("operator:"):
        return text("explain.manual", lang, who=actor.removeprefix("operator:"))
    fixed = {"estop": "explain.estop", "watchdog": "explain.watchdog", "reconnect": "explain.reconnect",
             "policy:expert": "explain.expert"}
    if actor in fixed:
        return text(fixed[actor], lang)
    if actor == "expert:low_confidence":
        return text("explain.low_confidence", lang,
                    confidence="–" if confidence is None else _pct(100 * confidence))
    return ""


def _lamp_sentence(estimate: Any, clipped: Any, lang: str) -> str:
    """The lamps against the crop's break-even price, when the decision recorded both prices."""
    if not isinstance(estimate, Mapping) or not isinstance(clipped, Mapping):
        return ""
    price, even = finite(estimate.get("price_eur_mwh")), finite(estimate.get("lamp_break_even_eur_mwh"))
    light = finite(clipped.get("light_pct"))
    if price is None or even is None or light is None:
        return ""
    on = light > 0
    words = {"price": _pct(price), "break_even": _pct(even)}
    if on and price < even:
        return text("explain.lamps_on", lang, **words)
    if not on and price >= even:
        return text("explain.lamps_off", lang, **words)
    # Lamps against the price's verdict: a safety rule, the dark period or the lamp budget decided it.
    return text("explain.lamps_price", lang, state=text("value.on" if on else "value.off", lang),
                price=words["price"])


_SETTING_FIELD = re.compile(r"zones\[(\d+)\]\.(\w+)")


def _setting_value(field: str, value: object, lang: str) -> str:
    """One side of a settings change as the dashboard shows it: bands in % VWC, caps in L, switches on/off."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return text("value.on" if value else "value.off", lang)
    number = finite(value)
    if number is None:
        return _str(value) or "–"
    if field.endswith("_vwc"):
        return f"{_pct(100.0 * number)} %"
    unit = {"_l": " L", "per_day": " h"}
    return _pct(number) + next((u for end, u in unit.items() if field.endswith(end)), "")


def _setting_change(key: str, sides: object, lang: str, zone_names: Sequence[object]) -> str:
    """'Zone 2 band high 27 % -> 29 %' for one ``changed`` entry of a settings change."""
    zone = _SETTING_FIELD.fullmatch(key)
    field = zone.group(2) if zone else key
    label = text(f"setting.{field}", lang) if has(f"setting.{field}") else field
    if zone:
        label = f"{zone_title(int(zone.group(1)), lang, zone_names)} {label}"
    if isinstance(sides, list) and len(sides) == 2:
        return f"{label} {_setting_value(field, sides[0], lang)} → {_setting_value(field, sides[1], lang)}"
    return label


def _settings_sentence(estimate: Any, lang: str, zone_names: Sequence[object] = ()) -> str:
    """The first decision under changed settings says so: which version, who, why and what changed."""
    change = estimate.get("settings_change") if isinstance(estimate, Mapping) else None
    if not isinstance(change, Mapping):
        return ""
    changed = change.get("changed")
    fields = text("list.sep", lang).join(_setting_change(_str(k), v, lang, zone_names)
                                         for k, v in changed.items()) \
        if isinstance(changed, Mapping) else ""
    version = change.get("version")
    return text("explain.settings_change", lang, version=str(version) if type(version) is int else "?",
                actor=_str(change.get("actor", "?")), reason=_str(change.get("reason", "")),
                fields=fields or "–")


@_never_raise(list)
def explanation_text(explanation: Any, lang: str = DEFAULT_LANGUAGE, *, actor: object = "",
                     confidence: object = None, estimate: Any = None, clipped: Any = None,
                     zone_names: Sequence[object] = ()) -> list[str]:
    """Why a decision was made, as sentences: who decided (when not the policy's vote), its top factors and
    the lamps against the break-even price; one sentence saying nothing was recorded rather than none."""
    out = [_actor_sentence(_str(actor), finite(confidence), lang)]
    if isinstance(explanation, Mapping):
        top = explanation.get("top")
        if isinstance(top, list):
            out += [factor_text(f, lang, zone_names) for f in top[:TOP_FACTORS]]
        if explanation.get("error") and not (isinstance(top, list) and top):
            out.append(text("explain.failed", lang))
    out.append(_lamp_sentence(estimate, clipped, lang))
    out.append(_settings_sentence(estimate, lang, zone_names))
    out = [s for s in out if s]
    return out or [text("explain.none", lang)]


@_never_raise(str)
def command_text(clipped: Any, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """The command sent, in words: 'Zone 2 (north bed) open, others closed; pump 40 %; lamps on'."""
    if not isinstance(clipped, Mapping):
        return ""
    parts: list[str] = []
    valves = clipped.get("valves")
    if isinstance(valves, list):
        opened = [i for i, v in enumerate(valves) if (finite(v) or 0.0) >= 0.5]
        if opened:
            names = text("list.sep", lang).join(zone_title(i, lang, zone_names) for i in opened)
            head = text("command.zones_open", lang, zones=names)
            if len(opened) < len(valves):
                head += text("clause.sep", lang) + text("command.others_closed", lang)
            parts.append(head)
        else:
            parts.append(text("command.all_closed", lang))
    pump = finite(clipped.get("pump_pct"))
    if pump is not None:
        parts.append(text("command.pump_off", lang) if pump <= 0
                     else text("command.pump", lang, pct=_pct(pump)))
    light = finite(clipped.get("light_pct"))
    if light is not None:
        parts.append(text("command.lamps_off", lang) if light <= 0 else text("command.lamps_on", lang)
                     if light >= 100 else text("command.lamps_pct", lang, pct=_pct(light)))
    return _capital(text("sentence.sep", lang).join(parts))


def _setting(actuator: str, value: object, lang: str) -> str:
    """One side of a clip: a valve open or closed, the pump and lamps in percent or off."""
    v = finite(value)
    if v is None:
        return "–"
    if actuator.startswith("valve"):
        return text("value.open" if v >= 0.5 else "value.closed", lang)
    if actuator in ("pump", "lights"):
        return text("value.off", lang) if v <= 0 else with_unit(_pct(v), "%", lang)
    return f"{v:.3g}"


def rule_key(rule: str) -> str | None:
    """The catalogue key of a clip rule id, also for ids recorded before rules were dotted
    (``zone_daily_water_cap`` is ``zone.daily_water_cap``); None for a rule the catalogue does not know."""
    for candidate in (rule, rule.replace("_", ".", 1)):
        if has(f"rule.{candidate}"):
            return f"rule.{candidate}"
    return None


@_never_raise(str)
def clip_text(firing: Any, lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> str:
    """One safety clip as a sentence: 'Zone 2 valve closed instead of open: the zone has had its daily water
    cap (251.9 L used today; cap 250.0 L)'. The clipper's own detail is English and kept in English only."""
    if not isinstance(firing, Mapping):
        return text("rule.unknown", lang, rule=str(firing)[:60]) if firing not in (None, "") else ""
    rule, actuator = _str(firing.get("rule")), _str(firing.get("actuator"))
    key = rule_key(rule)
    reason = text(key, lang) if key else text("rule.unknown", lang, rule=rule or "?")
    why = _str(firing.get("why")).strip()
    if why:
        reason = text("clip.detail", lang, text=reason, detail=why)
    name = actuator_name(actuator, lang, zone_names) if actuator else "–"
    if "before" in firing or "after" in firing:
        return _capital(text("clip", lang, actuator=name,
                             before=_setting(actuator, firing.get("before"), lang),
                             after=_setting(actuator, firing.get("after"), lang), reason=reason))
    return _capital(text("clip.changed", lang, actuator=name, reason=reason))


@_never_raise(list)
def clips_text(rules_fired: Any, lang: str = DEFAULT_LANGUAGE,
               zone_names: Sequence[object] = ()) -> list[str]:
    """Every clip of a decision as a sentence, in the order the clipper applied them."""
    if not isinstance(rules_fired, list):
        return []
    return [s for s in (clip_text(f, lang, zone_names) for f in rules_fired) if s]


@dataclass(frozen=True)
class DecisionWords:
    """A decision as the page, the API and the report print it."""

    explanation: list[str] = field(default_factory=list)
    command: str = ""
    clips: list[str] = field(default_factory=list)


def decision_words(*, explanation: Any = None, clipped: Any = None, rules_fired: Any = None,
                   actor: object = "", confidence: object = None, estimate: Any = None,
                   lang: str = DEFAULT_LANGUAGE, zone_names: Sequence[object] = ()) -> DecisionWords:
    """All of a stored decision in sentences, from its columns as stored."""
    return DecisionWords(
        explanation_text(explanation, lang, actor=actor, confidence=confidence, estimate=estimate,
                         clipped=clipped, zone_names=zone_names),
        command_text(clipped, lang, zone_names), clips_text(rules_fired, lang, zone_names))

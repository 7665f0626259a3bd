"""How a stored decision reads in a report: its rules, explanation, action and saliency map.

Pure functions of the JSON the service stores, kept apart from the database read so each can be
tested on hand-made rows. Words come from the catalogue (:mod:`audit.wording`, the decision wording
of :mod:`audit.decision_words`, alarm kinds from :mod:`app.alarms.catalogue`) in the report's language:
a stored code such as ``held:co2`` reads as words, never as the code.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from datetime import datetime
from functools import cache
from typing import Any

from app.alarms.catalogue import KINDS, describe, split
from audit.decision_words import clip_text, factor_text
from audit.report.data import SaliencyMap
from audit.wording import DEFAULT_LANGUAGE, feature_name, has, text

MAX_ALARMS_NAMED = 3
"""Alarms of one decision named in its summary; the rest are counted."""


def json_floats(value: Any, n: int) -> list[float | None]:
    """``n`` numbers from a JSON list (None where missing or not a number)."""
    out: list[float | None] = [None] * n
    if isinstance(value, list):
        for i, v in enumerate(value[:n]):
            if type(v) is float or type(v) is int:  # not bool; JSON numbers decode to exactly these
                out[i] = float(v) if math.isfinite(v) else None
    return out


def json_number(mapping: Any, key: str) -> float:
    v = mapping.get(key) if isinstance(mapping, dict) else None
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else 0.0


def rule_id(firing: Any) -> str:
    """The rule id of one ``rules_fired`` entry of any shape: what the report counts clips by."""
    if isinstance(firing, Mapping):
        return str(firing.get("rule", "?"))
    return shorten(firing, 60)


def describe_rule(firing: Any, lang: str = DEFAULT_LANGUAGE) -> tuple[str, str]:
    """(rule id, the firing in words) for one ``rules_fired`` entry of any shape, e.g. ``Zone 2 valve closed
    instead of open: the zone has had its daily water cap (251.9 L used today; cap 250.0 L)``."""
    return rule_id(firing), clip_text(firing, lang) or shorten(firing, 60)


def shorten(value: Any, limit: int = 60) -> str:
    if isinstance(value, float):
        words = f"{value:.3g}"
    else:
        words = value if isinstance(value, str) else json.dumps(value, default=str, separators=(",", ":"))
    return words if len(words) <= limit else words[: limit - 3] + "..."


def _held_feature(name: str, lang: str) -> str:
    """A held reading's name as a feature: ``co2`` and ``co2_ppm`` both read 'CO₂' (a unit suffix dropped)."""
    parts = name.split("_")
    for n in range(len(parts), 0, -1):
        base = "_".join(parts[:n])
        if has(f"feature.{base}"):
            return feature_name(base, lang)
    return name.replace("_", " ")


def alarm_code_words(code: Any, lang: str = DEFAULT_LANGUAGE) -> str:
    """An alarm a decision recorded, in words: ``held:co2`` is a reading held at its last value, an alarm kind
    (``outlook_prices:stale``) is the alarm list's title; anything else is shortened as it is."""
    if not isinstance(code, str):
        return shorten(code, 40)
    if code.startswith("held:"):
        return text("report.held_reading", lang, feature=_held_feature(code.removeprefix("held:"), lang))
    if split(code)[0] in KINDS:
        return describe(code, lang).title
    return shorten(code.replace("_", " "), 40)


def describe_explanation(explanation: Any, lang: str = DEFAULT_LANGUAGE) -> str:
    """A decision's explanation in a few words: its strongest factor, its alarms, and whether the saliency
    of its lead-up was kept (the stored record is JSON, which no agronomist should have to read)."""
    if not isinstance(explanation, Mapping):
        return "" if explanation is None else shorten(explanation, 120)
    parts = []
    top = explanation.get("top")
    if isinstance(top, list) and top and isinstance(top[0], Mapping):
        parts.append(text("report.main_factor", lang, factor=factor_text(top[0], lang)))
    alarms = explanation.get("alarms")
    if isinstance(alarms, list) and alarms:
        named = text("list.sep", lang).join(alarm_code_words(a, lang) for a in alarms[:MAX_ALARMS_NAMED])
        if len(alarms) > MAX_ALARMS_NAMED:
            named += text("report.and_more", lang, n=len(alarms) - MAX_ALARMS_NAMED)
        parts.append(text("report.alarms_recorded", lang, alarms=named))
    if isinstance(explanation.get("history"), Mapping):  # the lead-up and its saliency: drawn, not printed
        parts.append(text("report.saliency_recorded", lang))  # heat maps are drawn for the first few only
    return text("sentence.sep", lang).join(part for part in parts if part)


def confidence_words(confidence: float, lang: str = DEFAULT_LANGUAGE) -> str:
    """A decision's confidence, when nothing else explains it."""
    return text("report.confidence", lang, value=f"{confidence:.2f}")


@cache
def feature_names(dim: int, zones: int) -> tuple[str, ...]:
    """Names of an observation's ``dim`` features (``twin.spec`` layout, e.g. 'moisture[3]').

    The layout for ``zones`` zones when its size matches, else the zone count ``dim`` implies
    (the greenhouse may have been re-zoned since), else 'feature i'.
    """
    from twin.spec import ObservationSpec  # here, not at import: the twin package loads scipy

    fixed = ObservationSpec(0).dim
    per_zone = ObservationSpec(1).dim - fixed
    for z in (zones, (dim - fixed) // per_zone):
        if z >= 1 and ObservationSpec(z).dim == dim:
            return ObservationSpec(z).names
    return tuple(f"feature {i}" for i in range(dim))


def saliency_map(row: Any, ts: datetime, zones: int, top: int) -> SaliencyMap | None:
    """The heat-map data of a decision whose explanation carries ``history.saliency`` (T x D), else None.

    Keeps the ``top`` features with the largest total |attribution| over the steps; values that
    are missing or not finite stay None (drawn as "no value").
    """
    explanation = row.explanation if isinstance(row.explanation, Mapping) else {}
    history = explanation.get("history")
    steps = history.get("saliency") if isinstance(history, Mapping) else None
    if not isinstance(steps, list) or not steps or not isinstance(steps[0], list) or not steps[0]:
        return None
    dim = len(steps[0])
    if any(not isinstance(step, list) or len(step) != dim for step in steps):
        return None
    grid = [json_floats(step, dim) for step in steps]  # [t][feature]
    totals = [sum(abs(step[i] or 0.0) for step in grid) for i in range(dim)]
    ranked = sorted((i for i in range(dim) if totals[i] > 0), key=lambda i: -totals[i])[:top]
    names = feature_names(dim, zones)
    total = sum(totals)
    return SaliencyMap(ts, int(row.seq), str(row.actor), float(row.confidence),
                       tuple(names[i] for i in ranked),
                       tuple(tuple(step[i] for step in grid) for i in ranked),
                       dim, 100.0 * sum(totals[i] for i in ranked) / total if total > 0 else 0.0)

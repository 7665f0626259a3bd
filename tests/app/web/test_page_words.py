"""Every word the dashboard's pages and scripts look up is in the catalogue, in both languages, and fills.

A scan of the templates and scripts for hard-coded English would be guesswork; what can be exact is the other
direction: each key a template or a script names (``t("...")`` in Jinja and JavaScript, ``GT.label(prefix,
code)``, the prefixes of :data:`app.web.pages.PAGE_WORDS`) exists with English and Simplified Chinese, the two
texts take the same ``{placeholders}``, and the values a call hands over are exactly those placeholders. A key
a script uses must also reach the script: it is under a prefix the page hands over in its ``<meta>`` tag.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.web.pages import PAGE_WORDS
from audit import wording

WEB = Path(__file__).resolve().parents[3] / "app" / "web"
SCRIPTS = sorted((WEB / "static").glob("*.js"))
TEMPLATES = sorted((WEB / "templates").glob("*.html"))
CJK = re.compile(r"[\u4e00-\u9fff]")
_JS_CALL = re.compile(r"\b(t|label)\(\s*\"([^\"]+)\"")
_JINJA_CALL = re.compile(r"\bt\(\s*([\"'])([^\"']+)\1\s*(~|,[^)]*)?\)")


@dataclass(frozen=True)
class Lookup:
    """One place a page names a catalogue key: a whole key, or a prefix that code completes at run time."""

    where: str
    key: str
    prefix: bool
    values: frozenset[str] | None  # the names handed over to fill it; None where the call passes none


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _balanced(text: str, start: int) -> str:
    """The text of the bracketed expression opening at ``text[start]`` (braces, brackets, parentheses)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] in "{[(":
            depth += 1
        elif text[i] in "}])":
            depth -= 1
            if depth == 0:
                return text[start + 1:i]
    raise AssertionError(f"unbalanced brackets from {text[start:start + 60]!r}")


def _top_level_names(obj: str) -> frozenset[str]:
    """The property names of a JavaScript object literal's body (``n: 1, leads`` -> n, leads)."""
    parts, depth, current = [], 0, ""
    for ch in obj:
        depth += (ch in "{[(") - (ch in "}])")
        if ch == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return frozenset(m.group(1) for p in parts if (m := re.match(r"\s*(\w+)\s*(?::|$)", p)))


def _script_lookups(path: Path) -> list[Lookup]:
    text = path.read_text(encoding="utf-8")
    found = []
    for m in _JS_CALL.finditer(text):
        rest = text[m.end():].lstrip()
        where = f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"
        if m.group(1) == "label":  # GT.label(prefix, code): a code completes the key
            found.append(Lookup(where, m.group(2), True, None))
            continue
        values = None
        if rest.startswith(","):
            after = rest[1:].lstrip()
            assert after.startswith("{"), f"{where}: values must be an object literal"
            body = _balanced(after, 0)
            values = _top_level_names(body)
        found.append(Lookup(where, m.group(2), rest.startswith("+"), values))
    return found


def _template_lookups(path: Path) -> list[Lookup]:
    text = path.read_text(encoding="utf-8")
    found = []
    for m in _JINJA_CALL.finditer(text):
        where = f"{path.name}:{text.count(chr(10), 0, m.start()) + 1}"
        tail = m.group(3) or ""
        values = frozenset(re.findall(r"(\w+)\s*=", tail)) if tail.startswith(",") else None
        found.append(Lookup(where, m.group(2), tail == "~", values))
    return found


SCRIPT_LOOKUPS = [lookup for path in SCRIPTS for lookup in _script_lookups(path)]
TEMPLATE_LOOKUPS = [lookup for path in TEMPLATES for lookup in _template_lookups(path)]


def _check_entry(key: str) -> None:
    entry = wording.catalogue().get(key)
    assert entry is not None, f"{key}: not in the catalogue"
    assert set(entry) == set(wording.LANGUAGES), key
    assert _fields(entry["en"]) == _fields(entry["zh-Hans"]), key
    if re.search(r"[A-Za-z]{3}", re.sub(r"\{\w+\}", "", entry["en"])) and not key.startswith("language."):
        assert CJK.search(entry["zh-Hans"]), f"{key}: no Chinese in {entry['zh-Hans']!r}"


def test_the_scan_finds_the_lookups_of_every_page() -> None:
    """The regular expressions still see the calls (a rename of ``t`` would otherwise pass vacuously)."""
    per_file = ({p.name for p in SCRIPTS if _script_lookups(p)}
                | {p.name for p in TEMPLATES if _template_lookups(p)})
    for name in ("overview.js", "greenhouse_forecast.js", "greenhouse_settings.js", "users.js", "policy.js",
                 "admin_greenhouses.js", "common.js", "base.html", "overview.html", "greenhouse.html",
                 "users.html", "policy.html", "admin_greenhouses.html", "login.html", "alarms.html"):
        assert name in per_file, name
    assert len(SCRIPT_LOOKUPS) > 100 and len(TEMPLATE_LOOKUPS) > 100


@pytest.mark.parametrize("lookup", SCRIPT_LOOKUPS + TEMPLATE_LOOKUPS, ids=lambda x: f"{x.where}:{x.key}")
def test_every_key_a_page_names_is_in_both_languages_and_fills(lookup: Lookup) -> None:
    catalogue = wording.catalogue()
    if lookup.prefix:
        keys = [k for k in catalogue if k.startswith(lookup.key)]
        assert keys, f"{lookup.where}: no key starts with {lookup.key!r}"
        for key in keys:
            _check_entry(key)
        return
    _check_entry(lookup.key)
    wanted = _fields(catalogue[lookup.key]["en"])
    if lookup.values is not None or wanted:
        assert lookup.values == wanted, f"{lookup.where}: {lookup.key} takes {wanted}, given {lookup.values}"


@pytest.mark.parametrize("lookup", SCRIPT_LOOKUPS, ids=lambda x: f"{x.where}:{x.key}")
def test_every_key_a_script_names_reaches_the_script(lookup: Lookup) -> None:
    """Scripts see only the words the page hands over (``PAGE_WORDS``): a key outside them shows as the
    key."""
    handed = wording.texts(PAGE_WORDS, "zh-Hans")
    if lookup.prefix:
        assert any(k.startswith(lookup.key) for k in handed), lookup
    else:
        assert lookup.key in handed, f"{lookup.where}: {lookup.key} is not under PAGE_WORDS"


def test_every_page_words_prefix_names_keys_in_both_languages() -> None:
    for prefix in PAGE_WORDS:
        keys = [k for k in wording.catalogue() if k.startswith(prefix)]
        assert keys, prefix
        for key in keys:
            _check_entry(key)
    zh = wording.texts(PAGE_WORDS, "zh-Hans")
    assert zh["page.forecast.title"] == "数字孪生视角：未来 24 小时" and zh["soil.loam"] == "壤土"


def test_the_scanner_reads_values_and_prefixes(tmp_path: Path) -> None:
    """The scanner itself, on a made-up script: what it reads decides what the checks above can catch."""
    path = tmp_path / "sample.js"
    path.write_text('x = t("a.b", { n: f({ y: 1 }), leads }) + GT.label("soil.", z) '
                    '+ t("sev." + s) + t("c");',
                    encoding="utf-8")
    got = [(x.key, x.prefix, x.values) for x in _script_lookups(path)]
    assert got == [("a.b", False, frozenset({"n", "leads"})), ("soil.", True, None), ("sev.", True, None),
                   ("c", False, None)]

"""The report's and the notifications' words in the catalogue: every ``report.*`` and ``notify.*`` key in both
languages with the same placeholders and Chinese where there are words, and every key the code names there.

A lookup never raises (:func:`audit.wording.text` prints the key itself when it is missing), so a mistyped
key would print ``report.money.profit`` into a signed report without failing anything; the scan below
catches it before a reader does.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from audit import wording

REPO = Path(__file__).resolve().parents[2]
SOURCES = [*sorted((REPO / "audit" / "report").glob("*.py")),
           *sorted((REPO / "app" / "reports").glob("*.py")),
           REPO / "app" / "alarms" / "notify.py", REPO / "app" / "cli" / "report.py",
           REPO / "app" / "api" / "routes" / "reports.py"]
PREFIXES = ("report.", "notify.")
CJK = re.compile(r"[\u4e00-\u9fff]")
_KEY = re.compile(r"""(f?)["']((?:report|notify)\.[a-z0-9_.{}]*)["']""")


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _ours() -> dict[str, dict[str, str]]:
    return {k: v for k, v in wording.catalogue().items() if k.startswith(PREFIXES)}


def test_every_report_and_notification_key_has_both_languages_alike() -> None:
    ours = _ours()
    assert len(ours) > 150
    for key, entry in ours.items():
        assert set(entry) == set(wording.LANGUAGES), key
        assert entry["en"].strip() and entry["zh-Hans"].strip(), key
        assert _fields(entry["en"]) == _fields(entry["zh-Hans"]), key
        words = re.sub(r"\{\w+\}|greentwin|GREENTWIN_\w+|`[^`]*`|GET /\S+|CSV|UTC|VWC|FAILED", "",
                       entry["en"])
        if re.search(r"[A-Za-z]{3}", words):
            assert CJK.search(entry["zh-Hans"]), key


def test_every_key_the_report_and_the_notifications_name_is_in_the_catalogue() -> None:
    ours = _ours()
    named = 0
    for path in SOURCES:
        for is_f, key in _KEY.findall(path.read_text(encoding="utf-8")):
            named += 1
            if is_f and "{" in key:  # a key built at run time: some key must start with its fixed part
                head = key.split("{", 1)[0]
                assert any(k.startswith(head) for k in ours), (path.name, key)
            else:
                assert key in ours, (path.name, key)
    assert named > 60

"""A stored row and its sealed record compare by what the JSON means, not how a database spells it back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from app.audit_rows import comparable, differing_columns, digest

SEALED = {"greenhouse_id": "ga", "seq": 7, "ts": "2026-06-01T00:07:00.000007+00:00", "actor": "policy:test",
          "mode": "auto", "telemetry": {"big": 1e16, "huge": 1e300, "neg_zero": -0.0,
                                        "x": 0.30000000000000004},
          "confidence": 1.0, "ack_status": "pending"}


def test_spellings_of_one_value_compare_equal() -> None:
    # What JSONB hands back for the sealed JSON, and SQLite's naive UTC timestamps.
    stored = {**SEALED, "ts": datetime(2026, 6, 1, 0, 7, 0, 7), "confidence": 1,
              "telemetry": {"big": 10**16, "huge": 10**300, "neg_zero": 0, "x": 0.30000000000000004},
              "ack_status": "applied"}
    assert differing_columns("decision", stored, SEALED) == []
    assert digest("decision", stored) == digest("decision", SEALED)  # the ack status is compared elsewhere
    elsewhere = datetime(2026, 6, 1, 2, 7, 0, 7, tzinfo=timezone(timedelta(hours=2)))
    assert comparable("decision", "ts", elsewhere) == comparable("decision", "ts", SEALED["ts"])


def test_any_other_value_differs() -> None:
    for column, value in [("telemetry", {**SEALED["telemetry"], "x": 0.3}), ("confidence", 0.999),
                          ("actor", "operator:op1"), ("ts", datetime(2026, 6, 1, 0, 7, 0, 8, tzinfo=UTC)),
                          ("mode", None), ("telemetry", {**SEALED["telemetry"], "flag": True})]:
        stored = {**SEALED, column: value}
        assert differing_columns("decision", stored, SEALED) == [column], column
        assert digest("decision", stored) != digest("decision", SEALED), column
    assert differing_columns("decision", {**SEALED, "explanation": {"top": []}}, SEALED) == ["explanation"]

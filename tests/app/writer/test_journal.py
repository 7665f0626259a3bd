"""The write-ahead journal as a queue between the control loop and the writer process."""

from __future__ import annotations

import struct
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from app.journal import DecisionJournal, JournalCorrupt, JournalReader, segments
from tests.app.disk_full import disk_full_at

T = datetime(2026, 6, 1, 6, 0, tzinfo=UTC)


def _entries(lo: int, hi: int) -> list[dict]:
    return [{"kind": "decision", "row": {"greenhouse_id": "g", "seq": i, "ts": T}, "obs": np.arange(3.0)}
            for i in range(lo, hi)]


def test_reader_follows_appends_across_segments_and_deletes_what_it_finished(tmp_path: Path) -> None:
    journal = DecisionJournal(tmp_path, rotate_every=5)
    reader = JournalReader(tmp_path)
    assert reader.read() == []
    seen: list[int] = []
    for lo in range(0, 15, 3):  # batches of 3; a segment takes batches until it holds 5 entries or more
        assert journal.append(_entries(lo, lo + 3)) == 3
        got = reader.read()
        seen += [e["row"]["seq"] for e in got]
        reader.delete_consumed()
        assert all(e["row"]["ts"] == T and e["obs"].tolist() == [0.0, 1.0, 2.0] for e in got)
    assert seen == list(range(15)) and journal.appended == 15
    assert segments(tmp_path) == [3]  # 1 and 2 (six entries each) were read to the end and the loop moved on
    journal.close()
    reader.delete_consumed(including_current=True)
    assert segments(tmp_path) == []


def test_a_frame_being_written_waits_and_a_torn_tail_is_only_skipped_in_recovery(tmp_path: Path) -> None:
    journal = DecisionJournal(tmp_path)
    journal.append(_entries(0, 2))
    journal.close()
    [segment] = list(tmp_path.iterdir())
    with segment.open("ab") as fh:
        fh.write(struct.pack("<I", 500) + b"\x80\x05partial")  # mid-write: not a complete frame yet
    reader = JournalReader(tmp_path)
    assert [e["row"]["seq"] for e in reader.read()] == [0, 1] and reader.read() == []
    restarted = DecisionJournal(tmp_path)  # a crash left the torn frame: recovery skips it
    assert [e["row"]["seq"] for e in restarted.recover()] == [0, 1]
    restarted.discard_recovered()
    assert segments(tmp_path) == []
    segment.write_bytes(struct.pack("<I", 3) + b"bad"
                        + struct.pack("<I", 3) + b"bad")  # damage, not a torn append
    with pytest.raises(JournalCorrupt):
        DecisionJournal(tmp_path).recover()


def test_a_write_that_fails_on_a_full_disk_raises_and_never_corrupts_what_follows(tmp_path: Path) -> None:
    journal = DecisionJournal(tmp_path)
    reader = JournalReader(tmp_path)
    journal.append(_entries(0, 3))
    size = sum(p.stat().st_size for p in tmp_path.iterdir())
    with disk_full_at(size + 40), pytest.raises(OSError):  # the batch's first frame partly fits: torn
        journal.append(_entries(3, 6))
    with disk_full_at(10), pytest.raises(OSError):  # a fresh segment, and only 10 bytes fit in it
        journal.append(_entries(6, 9))
    assert journal.appended == 3
    journal.append(_entries(9, 12))  # room again: the journal goes on, in a new segment
    journal.close()
    assert len(segments(tmp_path)) == 3
    assert [e["row"]["seq"] for e in reader.read()] == [0, 1, 2, 9, 10, 11], "the torn tail is skipped"
    restarted = DecisionJournal(tmp_path)
    assert [e["row"]["seq"] for e in restarted.recover()] == [0, 1, 2, 9, 10, 11]

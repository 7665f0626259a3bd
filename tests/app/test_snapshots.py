"""Controller snapshots: a mode change's own file and the periodic shared file, the newer one wins."""

from __future__ import annotations

from pathlib import Path

from app.snapshots import SnapshotStore


def test_the_newer_of_the_own_and_the_periodic_snapshot_is_restored(tmp_path: Path) -> None:
    store = SnapshotStore(tmp_path)
    store.save_all_later({"ga": {"seq": 3, "mode": "auto"}, "gb": {"seq": 9, "mode": "auto"}}).result(10)
    store.save("ga", {"seq": 5, "mode": "estop"})  # an e-stop after that round: written at once
    assert SnapshotStore(tmp_path).load("ga") == {"seq": 5, "mode": "estop"}
    assert SnapshotStore(tmp_path).load("gb") == {"seq": 9, "mode": "auto"}
    store.save_all_later({"ga": {"seq": 7, "mode": "estop"}}).result(10)  # a later round takes over
    store.close()
    fresh = SnapshotStore(tmp_path)
    assert fresh.load("ga") == {"seq": 7, "mode": "estop"} and fresh.load("gc") is None

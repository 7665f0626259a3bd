"""Hot-swap: the service follows the registry's promoted ensemble without a restart, seals each
switch in every greenhouse's chain, and keeps the old ensemble (with an alarm) when a new one fails."""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path

from app import registry
from app.audit_sink import AuditSink
from app.core.config import DEFAULT_POLICY_DIR, Settings
from app.core.db import make_engine, make_session_factory
from app.runtime import Runtime
from audit import Keyring, Signer, open_record
from audit.store import AuditStore
from tests.app.test_runtime_batch import _database, _runtime, _telemetry


def _ensemble_copy(tmp_path: Path, version: str, *, corrupt: bool = False) -> Path:
    """The shipped ensemble under another version name (or with a damaged member)."""
    out = tmp_path / version
    shutil.copytree(DEFAULT_POLICY_DIR, out)
    manifest = json.loads((out / "ensemble.json").read_text())
    manifest["policy_version"] = version
    (out / "ensemble.json").write_text(json.dumps(manifest))
    if corrupt:
        (out / "member_1" / "weights.pt").write_bytes(b"not a checkpoint")
    return out


def _service(url: str, state: Path, policy_dir: Path, store: AuditStore) -> Runtime:
    settings = Settings(database_url=url, mqtt_url="mqtt://127.0.0.1:1883", policy_dir=policy_dir,
                        max_age_s=3600.0, ack_timeout_s=300.0)  # as _runtime's, with this ensemble configured
    rt = Runtime(settings, make_session_factory(make_engine(url)), state_dir=state, audit=AuditSink(store))
    rt.load_greenhouses()
    return rt


def test_promotion_is_picked_up_sealed_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    ghs = ["ga", "gb"]
    url = _database(tmp_path, ghs)
    state = tmp_path / "state"
    store = AuditStore(make_engine(url), Keyring.generate(), Signer.generate())
    shipped = registry.manifest_version(DEFAULT_POLICY_DIR)
    rt = _service(url, state, DEFAULT_POLICY_DIR, store)
    assert {c.proposer.policy_version for c in rt.controllers.values()} == {shipped}
    assert registry.promoted(rt.sessions).version == shipped  # type: ignore[union-attr]

    registry.add_candidate(rt.sessions, "ppo-test-v2", _ensemble_copy(tmp_path, "ppo-test-v2"),
                           parent=shipped)
    registry.add_candidate(rt.sessions, "ppo-test-bad",
                           _ensemble_copy(tmp_path, "ppo-test-bad", corrupt=True), parent=shipped)

    async def run() -> tuple[bool, bool, bool]:
        unchanged = await rt.policy_watch.check()
        registry.promote(rt.sessions, "ppo-test-v2", "cli:alice", "nightly candidate")
        swapped = await rt.policy_watch.check()
        items = [rt.controllers[gh].pending(_telemetry(1)) for gh in ghs]
        await rt.intake.decide(items, [time.perf_counter()] * len(items))
        registry.promote(rt.sessions, "ppo-test-bad", "cli:bob")
        bad = await rt.policy_watch.check()
        return unchanged, swapped, bad

    unchanged, swapped, bad = asyncio.run(run())
    assert (unchanged, swapped, bad) == (False, True, False)
    # The damaged version changed nothing: both greenhouses still run v2, with an alarm each.
    assert {c.proposer.policy_version for c in rt.controllers.values()} == {"ppo-test-v2"}
    assert sorted(a.greenhouse_id for a in rt.alarms if a.kind == "policy_load_failed:ppo-test-bad") == ghs
    assert rt.proposers.directory == tmp_path / "ppo-test-v2"
    rt.journal.close()  # "crash": the next start stores and seals what the journal holds

    again = _runtime(url, state, audit=AuditSink(store))
    again.load_greenhouses()
    for gh in ghs:
        records = [open_record(store.keyring, r) for r in store.iter_records(gh)]
        swaps = [r for r in records if r.kind == "policy_swap"]
        assert len(swaps) == 1, [r.kind for r in records]
        p = swaps[0].payload
        assert (p["from_version"], p["to_version"], p["promoted_by"]) == (shipped, "ppo-test-v2", "cli:alice")
        assert swaps[0].actor == "registry:cli:alice"
        decisions = [r for r in records if r.kind == "decision"]
        assert decisions and decisions[0].actor in ("policy:ppo-test-v2", "expert:low_confidence")
    assert all(r.ok for r in store.verify())
    # The promoted version is still the damaged one: a restarted service serves the configured one
    # (here none: the threshold expert).
    assert again.policy_watch.version == "ppo-test-bad" and "ppo-test-bad" in again.policy_watch.failed
    assert {c.proposer.policy_version for c in again.controllers.values()} == {"expert"}


def test_the_writer_explains_decisions_after_a_swap_with_the_new_ensemble(  # type: ignore[no-untyped-def]
        monkeypatch) -> None:
    """Journal order decides: decisions before the swap record are explained with the old ensemble,
    those after it with the new one, in the same writer round."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    import app.writer.store as store_mod
    from app.writer import Job
    from app.writer.store import DecisionStore

    explained: list[tuple[str, int]] = []

    def fake_explain(proposer, requests):  # type: ignore[no-untyped-def]
        explained.extend((proposer.policy_version, r) for r in requests)
        return [{"top": proposer.policy_version} for _ in requests]

    monkeypatch.setattr(store_mod, "explain_decisions", fake_explain)
    current = {"v": SimpleNamespace(policy_version="old", ensemble="members")}
    stored: list[tuple[str, dict]] = []
    recorder = SimpleNamespace(record_many=lambda items: stored.extend(items) or True)
    store = DecisionStore(recorder, lambda zones: current["v"],  # type: ignore[arg-type]
                          on_swap=lambda job: current.update(v=SimpleNamespace(
                              policy_version=job.row["to_version"], ensemble="members")))
    ts = datetime(2026, 6, 1, tzinfo=UTC)

    def decision(seq: int) -> Job:
        return Job("decision", {"greenhouse_id": "ga", "seq": seq, "ts": ts, "explanation": {}},
                   "decision", "policy", ts, request=seq, zones=6)  # type: ignore[arg-type]

    swap = Job.policy_swap("ga", ts, {"from_version": "old", "to_version": "new", "directory": "/x"},
                           "registry:t")
    store.store([decision(1), decision(2), swap, decision(3)])
    assert explained == [("old", 1), ("old", 2), ("new", 3)]
    assert [kind for kind, _ in stored] == ["decision", "decision", "decision"]  # the swap has no row

"""SealAhead: chunks come out in chain order with their prepared rows, errors surface in the caller, the
worker never outlives the block."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from audit import GENESIS_HASH, AuditChain, AuditEvent, Keyring, verify_chain
from audit.pipeline import SealAhead

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _events(n: int) -> list[AuditEvent]:
    return [AuditEvent("decision", "loop", {"i": i}, T0 + timedelta(seconds=i)) for i in range(n)]


def _workers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("audit-seal-")]


@pytest.fixture(scope="module")
def keyring() -> Keyring:
    return Keyring.generate()


@pytest.mark.parametrize("n, chunk", [(1, 8), (8, 8), (9, 8), (50, 7)])
def test_chunks_are_the_sequential_chain(keyring: Keyring, n: int, chunk: int) -> None:
    chain = AuditChain("gh", keyring)
    with SealAhead(chain, _events(n), chunk, prepare=lambda rs: [r.seq for r in rs]) as sealed:
        items = list(sealed)
    assert all(prepared == [r.seq for r in c] for c, prepared in items)  # prepared with its own chunk
    chunks = [c for c, _ in items]
    assert [len(c) for c in chunks] == [min(chunk, n - i) for i in range(0, n, chunk)]
    records = [r for c in chunks for r in c]
    assert [r.seq for r in records] == list(range(1, n + 1))
    assert records[0].prev_hash == GENESIS_HASH
    assert (chain.head_seq, chain.head_hash) == (n, records[-1].record_hash)
    assert verify_chain(records, keyring).ok and not _workers()


def test_sealing_error_is_raised_in_order(keyring: Keyring) -> None:
    events = _events(30)
    events[17] = AuditEvent("decision", "", {}, T0)  # empty actor: refused when sealed
    chain = AuditChain("gh", keyring)
    got = []
    with pytest.raises(ValueError, match="actor"), SealAhead(chain, events, 5) as sealed:
        for c, _ in sealed:
            got.append(c)
    assert [len(c) for c in got] == [5, 5, 5]  # the chunks before the bad one, then the error
    assert chain.head_seq == 15 and not _workers()


def test_consumer_failure_stops_the_worker(keyring: Keyring) -> None:
    chain = AuditChain("gh", keyring)
    with pytest.raises(RuntimeError, match="write failed"), SealAhead(chain, _events(100), 4) as sealed:
        for _ in sealed:
            raise RuntimeError("write failed")
    assert not _workers()
    # One chunk handed out, at most one queued and one being sealed when the flag was seen.
    assert 4 <= chain.head_seq <= 12


def test_chunk_must_be_positive(keyring: Keyring) -> None:
    with pytest.raises(ValueError, match="chunk"):
        SealAhead(AuditChain("gh", keyring), _events(3), 0)

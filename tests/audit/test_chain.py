"""Hash chain: sealing, verification, and that every kind of tampering names the first bad record."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import re
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from audit import (
    GENESIS_HASH,
    Anchor,
    AuditChain,
    AuditEntry,
    AuditEvent,
    AuditKeyError,
    AuditTamperError,
    Keyring,
    SealedRecord,
    Signer,
    VerifyResult,
    canonical_json,
    compute_record_hash,
    iso_utc,
    iso_utc_now,
    iter_verified,
    parse_iso_utc,
    sign_anchor,
    sign_checkpoint,
    verify_anchor,
    verify_chain,
    verify_checkpoint,
)
from audit.chain import record_aad

GH = "gh-north-1"
T0 = datetime(2026, 11, 30, 10, 15, tzinfo=UTC)
KINDS = ("decision", "mode_change", "estop", "override", "policy_promotion", "login")
TS_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}\+00:00")


def _ts(i: int) -> str:
    return iso_utc(T0 + timedelta(seconds=i, microseconds=i))


def _payload(i: int) -> dict[str, object]:
    return {"i": i, "valve": round(i / 7, 4), "zones": [i, i + 1], "note": "Düse ✓"}


def _build(keyring: Keyring, n: int, greenhouse_id: str = GH) -> tuple[SealedRecord, ...]:
    chain = AuditChain(greenhouse_id, keyring)
    return tuple(
        chain.append(KINDS[i % len(KINDS)], f"user-{i % 3}", _payload(i), ts=_ts(i)) for i in range(1, n + 1)
    )


def _rehash(record: SealedRecord, **changes: object) -> SealedRecord:
    """What a key-less attacker can do: edit the envelope and fix up the record's own hash."""
    edited = dataclasses.replace(record, **changes)  # type: ignore[arg-type]
    return dataclasses.replace(edited, record_hash=compute_record_hash(edited))


def _relink(records: Sequence[SealedRecord], start: int) -> list[SealedRecord]:
    """Rebuild every link from index ``start`` on, as someone rewriting the chain's tail would."""
    out = list(records[:start])
    prev = out[-1].record_hash if out else GENESIS_HASH
    for record in records[start:]:
        record = _rehash(record, prev_hash=prev)
        out.append(record)
        prev = record.record_hash
    return out


def _flip_ct(record: SealedRecord, index: int = 5, mask: int = 0x01) -> SealedRecord:
    ct = bytearray(record.ciphertext)
    ct[index] ^= mask
    return dataclasses.replace(record, ciphertext=bytes(ct))


@pytest.fixture(scope="module")
def keyring() -> Keyring:
    return Keyring.generate()


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate()


@pytest.fixture(scope="module")
def records(keyring: Keyring) -> tuple[SealedRecord, ...]:
    return _build(keyring, 50)


def _bad(result: VerifyResult, seq: int, reason: str) -> None:
    assert not result.ok
    assert result.first_bad_seq == seq, result
    assert result.reason is not None and reason in result.reason, result


# -- writing ----------------------------------------------------------------------------


def test_fifty_records_verify(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    assert [r.seq for r in records] == list(range(1, 51))
    assert records[0].prev_hash == GENESIS_HASH
    for prev, rec in zip(records, records[1:], strict=False):
        assert rec.prev_hash == prev.record_hash
    assert all(compute_record_hash(r) == r.record_hash for r in records)
    expected = VerifyResult(True, 50, None, None, 50, records[-1].record_hash)
    assert verify_chain(records, keyring) == expected
    assert verify_chain(records, None) == expected


def test_verify_streams_lazily(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    pulled: list[int] = []

    def stream(items: Sequence[SealedRecord]) -> Iterator[SealedRecord]:
        for record in items:
            pulled.append(record.seq)
            yield record

    assert verify_chain(stream(records), keyring).ok
    assert pulled == list(range(1, 51))  # one pass
    pulled.clear()
    bad = list(records)
    bad[10] = _flip_ct(bad[10])
    assert verify_chain(stream(bad), keyring).first_bad_seq == 11
    assert pulled == list(range(1, 12))  # nothing read (or held) beyond the first bad record


def test_iter_verified_returns_the_entries(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    entries = list(iter_verified(iter(records), keyring))
    assert [e.seq for e in entries] == list(range(1, 51))
    assert entries[6] == AuditEntry(GH, 7, _ts(7), KINDS[7 % len(KINDS)], "user-1", _payload(7))


def test_empty_chain_is_ok(keyring: Keyring) -> None:
    assert verify_chain([], keyring) == VerifyResult(True, 0)


def test_append_many_matches_append(keyring: Keyring) -> None:
    chain = AuditChain(GH, keyring)
    batch = chain.append_many(AuditEvent("decision", "policy", {"k": i}, ts=_ts(i)) for i in range(5))
    single = chain.append("estop", "operator:anna", {"reason": "leak"})
    assert [r.seq for r in batch + [single]] == [1, 2, 3, 4, 5, 6]
    assert chain.head_seq == 6 and chain.head_hash == single.record_hash
    assert verify_chain(batch + [single], keyring).ok
    assert TS_RE.fullmatch(single.ts)


def test_append_many_is_all_or_nothing(keyring: Keyring) -> None:
    chain = AuditChain(GH, keyring)
    chain.append("login", "anna", {})
    events = [AuditEvent("decision", "p", {"x": 1}), AuditEvent("decision", "p", {"x": math.nan})]
    with pytest.raises(ValueError):
        chain.append_many(events)
    assert chain.head_seq == 1
    with pytest.raises(ValueError):
        chain.append("decision", "p", {"x": math.inf})
    assert chain.head_seq == 1
    assert chain.append("decision", "p", {"x": 2}).seq == 2


@pytest.mark.parametrize(
    "kwargs",
    [{"kind": ""}, {"actor": ""}, {"payload": ["not", "a", "dict"]}, {"ts": "2026-11-30T10:15:00Z"}],
)
def test_append_validates_fields(keyring: Keyring, kwargs: dict[str, object]) -> None:
    fields: dict[str, object] = {"kind": "decision", "actor": "a", "payload": {}, **kwargs}
    with pytest.raises((ValueError, TypeError)):
        AuditChain(GH, keyring).append(**fields)  # type: ignore[arg-type]


def test_resume_continues_the_chain(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    chain = AuditChain.resume(GH, keyring, records[-1])
    more = [chain.append("override", "anna", {"n": n}) for n in range(3)]
    assert more[0].seq == 51 and more[0].prev_hash == records[-1].record_hash
    assert verify_chain([*records, *more], keyring).ok
    assert AuditChain.resume(GH, keyring, None).head_hash == GENESIS_HASH
    with pytest.raises(ValueError):
        AuditChain.resume("other", keyring, records[-1])
    with pytest.raises(ValueError):
        AuditChain(GH, keyring, head_seq=0, head_hash="a" * 64)


def test_rotation_mid_chain(keyring: Keyring) -> None:
    chain = AuditChain(GH, keyring)
    before = [chain.append("decision", "p", {"n": n}) for n in range(3)]
    rotated = keyring.rotate()
    chain.keyring = rotated
    after = [chain.append("key_rotation", "ops", {"new": rotated.current_key_id})]
    assert {r.key_id for r in before} == {keyring.current_key_id}
    assert after[0].key_id == rotated.current_key_id
    assert verify_chain(before + after, rotated).ok
    _bad(verify_chain(before + after, keyring), 4, "unknown key id")


def test_driver_buffers_are_normalised(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    rows = [dataclasses.asdict(r) for r in records]
    for row in rows:  # psycopg2 returns bytea columns as memoryview
        row["nonce"], row["ciphertext"] = memoryview(row["nonce"]), bytearray(row["ciphertext"])
    again = [SealedRecord(**row) for row in rows]
    assert again == list(records)
    assert verify_chain(again, keyring).ok


# -- tampering ----------------------------------------------------------------------


def test_changed_ciphertext_byte(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[16] = _flip_ct(bad[16])
    _bad(verify_chain(bad, keyring), 17, "record_hash")
    _bad(verify_chain(bad, None), 17, "record_hash")


def test_rehashed_ciphertext_needs_keys_or_checkpoints(
    records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer
) -> None:
    bad = list(records)
    bad[16] = _flip_ct(bad[16])
    bad = _relink(bad, 16)
    _bad(verify_chain(bad, keyring), 17, "decryption failed")
    assert verify_chain(bad, None).ok  # links alone cannot catch a full rewrite...
    cp = sign_checkpoint(signer, GH, 40, records[39].record_hash, _ts(100))
    result = verify_chain(bad, None, checkpoints=[cp], public_key=signer.public_key)
    _bad(result, 40, "checkpoint")  # ...a signed checkpoint can
    assert result.records_checked == 39


def test_deleted_record(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = records[:19] + records[20:]
    _bad(verify_chain(bad, keyring), 20, "missing")
    _bad(verify_chain(bad, None), 20, "missing")
    # deleting and renumbering/relinking the tail still fails, on decryption (AAD binds seq and prev_hash)
    renumbered = _relink([dataclasses.replace(r, seq=r.seq - 1) if r.seq > 20 else r for r in bad], 19)
    _bad(verify_chain(renumbered, keyring), 20, "decryption failed")


def test_swapped_records(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[9], bad[10] = bad[10], bad[9]
    _bad(verify_chain(bad, keyring), 10, "missing")
    bad = list(records)
    bad[9], bad[10] = _rehash(bad[10], seq=10), _rehash(bad[9], seq=11)  # renumbered too
    _bad(verify_chain(bad, keyring), 10, "prev_hash")


def test_inserted_record(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    # A forger continues the chain after record 20 with their own key and a valid-looking link.
    forger = AuditChain(GH, Keyring.generate(), head_seq=20, head_hash=records[19].record_hash)
    forged = forger.append("override", "intruder", {"valve": 1.0}, ts=_ts(20))
    bad = [*records[:20], forged, *records[20:]]
    _bad(verify_chain(bad, keyring), 21, "unknown key id")
    _bad(verify_chain(bad, None), 22, "reordered or duplicated")
    # A replayed copy of an older genuine record
    bad = [*records[:30], records[4], *records[30:]]
    _bad(verify_chain(bad, keyring), 31, "expected seq 31, found seq 5")


def test_edited_record_hash(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[32] = dataclasses.replace(bad[32], record_hash="f" * 64)
    _bad(verify_chain(bad, keyring), 33, "record_hash")


def test_edited_prev_hash(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[7] = dataclasses.replace(bad[7], prev_hash="0" * 64)
    _bad(verify_chain(bad, keyring), 8, "prev_hash")
    bad[7] = _rehash(records[7], prev_hash="1" * 64)
    _bad(verify_chain(bad, keyring), 8, "prev_hash")


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("kind", "login", "envelope kind differs"),
        ("actor", "someone-else", "envelope actor differs"),
        ("ts", "2027-01-01T00:00:00.000000+00:00", "decryption failed"),
        ("key_id", "00000000", "unknown key id"),
    ],
)
def test_rehashed_envelope_edit(
    records: tuple[SealedRecord, ...], keyring: Keyring, field: str, value: str, reason: str
) -> None:
    bad = list(records)
    bad[11] = _rehash(bad[11], **{field: value})
    bad = _relink(bad, 12)
    _bad(verify_chain(bad, keyring), 12, reason)


def test_wrong_keyring(records: tuple[SealedRecord, ...]) -> None:
    _bad(verify_chain(records, Keyring.generate()), 1, "unknown key id")


def test_record_of_another_greenhouse(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    other = _build(keyring, 5, greenhouse_id="gh-south-2")
    bad = [*records[:4], other[4], *records[5:]]
    _bad(verify_chain(bad, keyring), 5, "greenhouse")


def test_malformed_record_is_reported_not_raised(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[2] = dataclasses.replace(bad[2], seq="3")  # type: ignore[arg-type]
    _bad(verify_chain(bad, keyring), 3, "malformed")
    bad[2] = object()  # type: ignore[call-overload]
    _bad(verify_chain(bad, keyring), 3, "malformed")


def test_iter_verified_raises_at_first_bad(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    bad = list(records)
    bad[25] = _flip_ct(bad[25])
    seen: list[int] = []
    with pytest.raises(AuditTamperError) as info:
        for entry in iter_verified(bad, keyring):
            seen.append(entry.seq)
    assert seen == list(range(1, 26))
    assert (info.value.greenhouse_id, info.value.seq) == (GH, 26)
    assert "seq=26" in str(info.value)
    with pytest.raises(AuditKeyError, match="seq=1"):
        list(iter_verified(records, Keyring.generate()))


# -- checkpoints and anchors ------------------------------------------------------------


def test_a_walk_goes_on_from_a_head_verified_before(
    records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer
) -> None:
    """What `audit verify` does while it waits for the newest rows: only the records after the head it
    checked, each handed over with its entry, and they must link to that head."""
    cps = [sign_checkpoint(signer, GH, r.seq, r.record_hash) for r in records if r.seq % 10 == 0]
    first = verify_chain(records[:20], keyring, checkpoints=cps[:2], public_key=signer.public_key)
    seen: list[int] = []
    rest = verify_chain(records[20:], keyring, checkpoints=cps, public_key=signer.public_key,
                        after=(first.head_seq, first.head_hash), on_entry=lambda r, e: seen.append(e.seq))
    assert rest.ok and rest.records_checked == 30 and rest.head_seq == 50 and seen == list(range(21, 51))
    skipped = verify_chain(records[21:], keyring, after=(first.head_seq, first.head_hash))
    assert (skipped.ok, skipped.first_bad_seq) == (False, 21) and "missing" in (skipped.reason or "")
    elsewhere = verify_chain(records[20:], keyring, after=(20, records[5].record_hash))
    assert (elsewhere.ok, elsewhere.first_bad_seq) == (False, 21) and "prev_hash" in (elsewhere.reason or "")
    cut = verify_chain(records[20:40], keyring, checkpoints=cps, public_key=signer.public_key,
                       after=(first.head_seq, first.head_hash))
    assert not cut.ok and "truncated" in (cut.reason or "")


def test_checkpoints_verify(records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer) -> None:
    cps = [sign_checkpoint(signer, GH, s, records[s - 1].record_hash, _ts(200 + s)) for s in (50, 10, 25)]
    for cp in cps:
        verify_checkpoint(signer.public_key, cp)
    assert verify_chain(records, keyring, checkpoints=cps, public_key=signer.public_key).ok
    with pytest.raises(ValueError, match="public_key"):
        verify_chain(records, keyring, checkpoints=cps)


def test_forged_checkpoint(records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer) -> None:
    good = sign_checkpoint(signer, GH, 30, records[29].record_hash, _ts(300))
    by_stranger = sign_checkpoint(Signer.generate(), GH, 30, records[29].record_hash, _ts(300))
    moved = dataclasses.replace(good, seq=31, head_hash=records[30].record_hash)
    for cp in (by_stranger, moved):
        with pytest.raises(AuditTamperError, match="signature"):
            verify_checkpoint(signer.public_key, cp)
        result = verify_chain(records, keyring, checkpoints=[cp], public_key=signer.public_key)
        _bad(result, cp.seq, "checkpoint signature invalid")
    # A real record failing earlier is still the first one named.
    bad = list(records)
    bad[3] = _flip_ct(bad[3])
    _bad(
        verify_chain(bad, keyring, checkpoints=[by_stranger], public_key=signer.public_key), 4, "record_hash"
    )


def test_checkpoint_head_hash_mismatch(
    records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer
) -> None:
    cp = sign_checkpoint(signer, GH, 30, records[28].record_hash, _ts(300))
    _bad(verify_chain(records, keyring, checkpoints=[cp], public_key=signer.public_key), 30, "checkpoint")
    other = sign_checkpoint(signer, "gh-south-2", 30, records[29].record_hash, _ts(300))
    _bad(verify_chain(records, keyring, checkpoints=[other], public_key=signer.public_key), 30, "greenhouse")


def test_truncated_tail_is_caught_by_checkpoint(
    records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer
) -> None:
    cp = sign_checkpoint(signer, GH, 50, records[49].record_hash, _ts(300))
    _bad(verify_chain(records[:45], keyring, checkpoints=[cp], public_key=signer.public_key), 46, "truncated")
    _bad(verify_chain([], None, checkpoints=[cp], public_key=signer.public_key), 1, "truncated")
    with pytest.raises(AuditTamperError, match="truncated"):
        list(iter_verified(records[:45], keyring, checkpoints=[cp], public_key=signer.public_key))


def test_anchor_after_purge(records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer) -> None:
    anchor = sign_anchor(signer, GH, 20, records[19].record_hash, _ts(400))
    verify_anchor(signer.public_key, anchor)
    remaining = records[20:]
    result = verify_chain(remaining, keyring, anchor=anchor, public_key=signer.public_key)
    assert result == VerifyResult(True, 30, None, None, 50, records[-1].record_hash)
    _bad(verify_chain(remaining, keyring), 1, "missing")  # no anchor: looks like deletion
    entries = list(iter_verified(remaining, keyring, anchor=anchor, public_key=signer.public_key))
    assert [e.seq for e in entries] == list(range(21, 51))
    # Checkpoints from before the purge are skipped; one at the anchor must agree with it.
    cps = [sign_checkpoint(signer, GH, s, records[s - 1].record_hash, _ts(300 + s)) for s in (5, 20, 40)]
    assert verify_chain(remaining, keyring, checkpoints=cps, anchor=anchor, public_key=signer.public_key).ok
    # A purge must leave the chain continuing exactly after the anchor.
    _bad(verify_chain(records[21:], keyring, anchor=anchor, public_key=signer.public_key), 21, "missing")
    # A writer can continue after the anchor even if nothing survived the purge.
    chain = AuditChain.resume(GH, keyring, anchor)
    fresh = chain.append("purge", "retention-job", {"up_to_seq": 20})
    assert verify_chain([fresh], keyring, anchor=anchor, public_key=signer.public_key).ok


def test_forged_anchor(records: tuple[SealedRecord, ...], keyring: Keyring, signer: Signer) -> None:
    remaining = records[20:]
    stranger = sign_anchor(Signer.generate(), GH, 20, records[19].record_hash, _ts(400))
    _bad(verify_chain(remaining, keyring, anchor=stranger, public_key=signer.public_key), 20, "anchor")
    with pytest.raises(AuditTamperError, match="anchor"):
        verify_anchor(signer.public_key, stranger)
    # A checkpoint must not double as a purge licence.
    cp = sign_checkpoint(signer, GH, 20, records[19].record_hash, _ts(400))
    replayed = Anchor(cp.greenhouse_id, cp.seq, cp.head_hash, cp.ts, cp.signature)
    _bad(verify_chain(remaining, keyring, anchor=replayed, public_key=signer.public_key), 20, "anchor")
    with pytest.raises(ValueError, match="public_key"):
        verify_chain(remaining, keyring, anchor=stranger)


def test_sign_validates_fields(signer: Signer) -> None:
    with pytest.raises(ValueError):
        sign_checkpoint(signer, GH, 0, GENESIS_HASH, _ts(1))
    with pytest.raises(ValueError):
        sign_anchor(signer, GH, 3, "XYZ", _ts(1))
    with pytest.raises(ValueError):
        sign_checkpoint(signer, GH, 3, GENESIS_HASH, datetime(2026, 1, 1))  # naive


# -- canonical JSON and timestamps ----------------------------------------------------


def test_canonical_json_is_deterministic() -> None:
    a = {"b": 1, "a": [1.5, {"z": None, "y": True}], "ü": "Gewächshaus"}
    b = {"ü": "Gewächshaus", "a": [1.5, {"y": True, "z": None}], "b": 1}
    assert canonical_json(a) == canonical_json(b)
    assert canonical_json(a) == '{"a":[1.5,{"y":true,"z":null}],"b":1,"ü":"Gewächshaus"}'.encode()


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_non_finite(value: float) -> None:
    with pytest.raises(ValueError):
        canonical_json({"deep": [{"x": value}]})


def test_canonical_json_refuses_unknown_types() -> None:
    with pytest.raises(TypeError):
        canonical_json({"when": datetime.now(UTC)})


def test_iso_formats() -> None:
    cest = timezone(timedelta(hours=2))
    assert (
        iso_utc(datetime(2026, 11, 30, 12, 15, 0, 123456, tzinfo=cest)) == "2026-11-30T10:15:00.123456+00:00"
    )
    assert iso_utc(datetime(2026, 11, 30, 10, 15, tzinfo=UTC)) == "2026-11-30T10:15:00.000000+00:00"
    assert TS_RE.fullmatch(iso_utc_now())
    with pytest.raises(ValueError, match="naive"):
        iso_utc(datetime(2026, 11, 30, 10, 15))
    ts = "2026-11-30T10:15:00.123456+00:00"
    assert parse_iso_utc(ts) == datetime(2026, 11, 30, 10, 15, 0, 123456, tzinfo=UTC)
    for bad in (
        "2026-11-30T10:15:00+00:00",
        "2026-11-30T10:15:00.123456Z",
        "2026-11-30T12:15:00.123456+02:00",
        "2026-11-30 10:15:00.123456+00:00",
        "2026-13-30T10:15:00.123456+00:00",
    ):
        with pytest.raises(ValueError):
            parse_iso_utc(bad)


def test_append_accepts_aware_datetimes_only(keyring: Keyring) -> None:
    chain = AuditChain(GH, keyring)
    rec = chain.append(
        "login", "anna", {}, ts=datetime(2026, 11, 30, 11, 0, tzinfo=timezone(timedelta(hours=1)))
    )
    assert rec.ts == "2026-11-30T10:00:00.000000+00:00"
    with pytest.raises(ValueError, match="naive"):
        chain.append("login", "anna", {}, ts=datetime(2026, 11, 30, 11, 0))


def test_sealed_plaintext_is_canonical_entry(records: tuple[SealedRecord, ...], keyring: Keyring) -> None:
    entry = next(iter_verified(records[:1], keyring))
    doc = json.loads(canonical_json(entry.to_json_dict()))
    assert doc == {
        "greenhouse_id": GH,
        "seq": 1,
        "ts": _ts(1),
        "kind": KINDS[1],
        "actor": "user-1",
        "payload": _payload(1),
    }


# -- properties ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_chain(keyring: Keyring) -> tuple[SealedRecord, ...]:
    return _build(keyring, 8)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_ciphertext_byte_change_is_detected(
    short_chain: tuple[SealedRecord, ...], keyring: Keyring, data: st.DataObject
) -> None:
    index = data.draw(st.integers(0, len(short_chain) - 1), label="record")
    target = short_chain[index]
    pos = data.draw(st.integers(0, len(target.ciphertext) - 1), label="byte")
    mask = data.draw(st.integers(1, 255), label="xor")
    bad = list(short_chain)
    bad[index] = _flip_ct(target, pos, mask)
    for ring in (keyring, None):
        result = verify_chain(bad, ring)
        assert not result.ok and result.first_bad_seq == target.seq
        assert result.records_checked == index
    relinked = _relink(bad, index)  # even with every hash fixed up, the keys catch it
    assert verify_chain(relinked, keyring).first_bad_seq == target.seq


_text = st.text(max_size=12)


@settings(max_examples=150, deadline=None)
@given(
    gid=_text,
    ts=_text,
    kind=_text,
    actor=_text,
    key_id=_text,
    prev=_text,
    seq=st.integers(-5, 2**63),
    nonce=st.binary(max_size=16),
    ct=st.binary(max_size=64),
)
def test_record_hash_is_sha256_of_canonical_json(
    gid: str, ts: str, kind: str, actor: str, key_id: str, prev: str, seq: int, nonce: bytes, ct: bytes
) -> None:
    record = SealedRecord(gid, seq, ts, kind, actor, key_id, nonce, ct, prev, "")
    reference = {
        "greenhouse_id": gid,
        "seq": seq,
        "ts": ts,
        "kind": kind,
        "actor": actor,
        "key_id": key_id,
        "nonce": base64.b64encode(nonce).decode(),
        "ciphertext": base64.b64encode(ct).decode(),
        "prev_hash": prev,
    }
    assert compute_record_hash(record) == hashlib.sha256(canonical_json(reference)).hexdigest()


@settings(max_examples=150, deadline=None)
@given(gid=_text, ts=_text, prev=_text, seq=st.integers(-5, 2**63))
def test_record_aad_is_canonical_json(gid: str, ts: str, prev: str, seq: int) -> None:
    reference = canonical_json({"greenhouse_id": gid, "seq": seq, "ts": ts, "prev_hash": prev})
    assert record_aad(gid, seq, ts, prev) == reference

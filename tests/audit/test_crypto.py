"""Keyring, AES-GCM sealing and Ed25519 signer: round trips, tamper detection, key hygiene."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from audit import (
    DEFAULT_KEYS_ENV,
    AuditError,
    AuditKeyError,
    AuditTamperError,
    Keyring,
    SealedBox,
    Signer,
    key_id_for,
    load_public_key,
    open_box,
    seal,
    verify_signature,
)

VECTOR = Path(__file__).parent / "vectors" / "aesgcm_seal.json"
AAD = b'{"greenhouse_id":"gh-1","seq":1}'


def _flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes([data[index] ^ 0x01]) + data[index + 1 :]


def _all_key_bytes(keyring: Keyring) -> list[bytes]:
    return [base64.b64decode(e["key"]) for e in json.loads(keyring.to_json())["keys"]]


# -- seal / open -------------------------------------------------------------------


def test_round_trip() -> None:
    keyring = Keyring.generate()
    box = seal(keyring, b"valve 3 -> 40%", AAD)
    assert box.key_id == keyring.current_key_id
    assert len(box.nonce) == 12
    assert len(box.ciphertext) == len(b"valve 3 -> 40%") + 16
    assert open_box(keyring, box, AAD) == b"valve 3 -> 40%"


def test_nonces_are_fresh() -> None:
    keyring = Keyring.generate()
    boxes = [seal(keyring, b"same", AAD) for _ in range(200)]
    assert len({b.nonce for b in boxes}) == 200
    assert len({b.ciphertext for b in boxes}) == 200


def test_rotation_keeps_old_records_readable() -> None:
    old = Keyring.generate()
    old_box = seal(old, b"before rotation", AAD)
    new = old.rotate()
    assert new.current_key_id != old.current_key_id
    assert new.key_ids == (new.current_key_id, old.current_key_id)
    new_box = seal(new, b"after rotation", AAD)
    assert new_box.key_id == new.current_key_id
    assert open_box(new, old_box, AAD) == b"before rotation"
    assert open_box(new, new_box, AAD) == b"after rotation"
    with pytest.raises(AuditKeyError, match="unknown key id"):
        open_box(old, new_box, AAD)  # the old keyring never learns the new key


@pytest.mark.parametrize(
    "what", ["wrong_key", "ciphertext", "tag", "aad", "nonce", "short_nonce", "truncated"]
)
def test_tampering_raises(what: str) -> None:
    keyring = Keyring.generate()
    box = seal(keyring, b"estop released by operator", AAD)
    aad = AAD
    if what == "wrong_key":
        # Ids are fingerprints, so a wrong key cannot hide under the right id: point the
        # box at another key of the keyring instead.
        keyring = keyring.rotate()
        box = SealedBox(keyring.current_key_id, box.nonce, box.ciphertext)
    elif what == "ciphertext":
        box = SealedBox(box.key_id, box.nonce, _flip(box.ciphertext, 3))
    elif what == "tag":
        box = SealedBox(box.key_id, box.nonce, _flip(box.ciphertext, len(box.ciphertext) - 1))
    elif what == "aad":
        aad = AAD.replace(b"gh-1", b"gh-2")
    elif what == "nonce":
        box = SealedBox(box.key_id, _flip(box.nonce, 0), box.ciphertext)
    elif what == "short_nonce":
        box = SealedBox(box.key_id, box.nonce[:8], box.ciphertext)
    elif what == "truncated":
        box = SealedBox(box.key_id, box.nonce, box.ciphertext[:10])
    with pytest.raises(AuditTamperError) as info:
        open_box(keyring, box, aad)
    assert info.value.seq is None and info.value.greenhouse_id is None
    assert isinstance(info.value, AuditError)


def test_unknown_key_id_is_a_key_error() -> None:
    keyring = Keyring.generate()
    box = seal(keyring, b"x", AAD)
    with pytest.raises(AuditKeyError, match="unknown key id 'deadbeef'"):
        open_box(keyring, SealedBox("deadbeef", box.nonce, box.ciphertext), AAD)


def test_known_answer_vector() -> None:
    vec = json.loads(VECTOR.read_text(encoding="utf-8"))
    key = bytes.fromhex(vec["key_hex"])
    keyring = Keyring({vec["key_id"]: key})
    nonce = bytes.fromhex(vec["nonce_hex"])
    aad = vec["aad_utf8"].encode()
    plaintext = vec["plaintext_utf8"].encode()
    ciphertext = bytes.fromhex(vec["ciphertext_hex"])
    assert open_box(keyring, SealedBox(vec["key_id"], nonce, ciphertext), aad) == plaintext
    assert seal(keyring, plaintext, aad, _nonce=nonce) == SealedBox(vec["key_id"], nonce, ciphertext)


# -- keyring -------------------------------------------------------------------------


def test_key_id_is_a_fingerprint() -> None:
    keyring = Keyring.generate()
    (key,) = _all_key_bytes(keyring)
    assert keyring.current_key_id == key_id_for(key)
    assert len(keyring.current_key_id) == 8
    int(keyring.current_key_id, 16)
    with pytest.raises(AuditKeyError, match="does not match"):
        Keyring({"00000000": key})


def test_repr_and_errors_hide_keys() -> None:
    keyring = Keyring.generate().rotate()
    text = repr(keyring) + str(keyring.key_ids)
    for key in _all_key_bytes(keyring):
        for spelling in (key.hex(), base64.b64encode(key).decode(), repr(key)):
            assert spelling not in text
    assert keyring.current_key_id in repr(keyring)


def test_json_round_trip_keeps_order() -> None:
    keyring = Keyring.generate().rotate().rotate()
    again = Keyring.from_json(keyring.to_json())
    assert again == keyring
    assert again.key_ids == keyring.key_ids
    box = seal(again, b"x", AAD)
    assert box.key_id == keyring.current_key_id
    assert open_box(keyring, box, AAD) == b"x"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("not json {", "not valid JSON"),
        ("[]", "version"),
        ('{"version": 1, "keys": []}', "non-empty"),
        ('{"version": 1, "keys": [{"key": "AAAA"}]}', "string 'id'"),
        ('{"version": 1, "keys": [{"id": "abc", "key": "%%%"}]}', "base64"),
        ('{"version": 1, "keys": [{"id": "abc", "key": "AAAA"}]}', "32 bytes"),
    ],
)
def test_bad_keyring_json(text: str, match: str) -> None:
    with pytest.raises(AuditKeyError, match=match) as info:
        Keyring.from_json(text)
    err = info.value
    assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)  # nothing chained


def test_bad_json_error_does_not_carry_keys() -> None:
    keyring = Keyring.generate()
    broken = keyring.to_json()[:-3]  # cut the closing braces
    with pytest.raises(AuditKeyError) as info:
        Keyring.from_json(broken)
    (key,) = _all_key_bytes(keyring)
    assert base64.b64encode(key).decode() not in str(info.value)
    assert info.value.__cause__ is None


def test_duplicate_key_id_refused() -> None:
    doc = json.loads(Keyring.generate().to_json())
    doc["keys"].append(doc["keys"][0])
    with pytest.raises(AuditKeyError, match="twice"):
        Keyring.from_json(json.dumps(doc))


def test_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    keyring = Keyring.generate()
    monkeypatch.setenv(DEFAULT_KEYS_ENV, keyring.to_json())
    assert Keyring.from_env() == keyring
    monkeypatch.setenv("OTHER_KEYS", keyring.rotate().to_json())
    assert Keyring.from_env("OTHER_KEYS") != keyring
    monkeypatch.delenv(DEFAULT_KEYS_ENV)
    with pytest.raises(AuditKeyError, match=DEFAULT_KEYS_ENV):
        Keyring.from_env()


def test_from_file(tmp_path: Path) -> None:
    keyring = Keyring.generate().rotate()
    path = tmp_path / "audit-keys.json"
    path.write_text(keyring.to_json(), encoding="utf-8")
    assert Keyring.from_file(path) == keyring
    assert Keyring.from_file(str(path)) == keyring
    with pytest.raises(AuditKeyError, match="cannot read"):
        Keyring.from_file(tmp_path / "missing.json")


def test_empty_keyring_refused() -> None:
    with pytest.raises(AuditKeyError):
        Keyring({})


# -- errors ----------------------------------------------------------------------------


def test_tamper_error_names_the_record_and_pickles() -> None:
    err = AuditTamperError("prev_hash broken", greenhouse_id="gh-7", seq=12)
    assert "gh-7" in str(err) and "seq=12" in str(err) and "prev_hash broken" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert (again.greenhouse_id, again.seq, again.reason, str(again)) == (
        "gh-7",
        12,
        "prev_hash broken",
        str(err),
    )


# -- signer ----------------------------------------------------------------------------


def test_signer_pem_round_trip_and_verify() -> None:
    signer = Signer.generate()
    signature = signer.sign(b"checkpoint")
    again = Signer.from_pem(signer.to_pem())
    public = load_public_key(signer.public_key_pem())
    assert verify_signature(public, again.sign(b"checkpoint"), b"checkpoint")
    assert verify_signature(public, signature, b"checkpoint")
    assert not verify_signature(public, signature, b"checkpoinT")
    assert not verify_signature(public, _flip(signature, 5), b"checkpoint")
    assert not verify_signature(Signer.generate().public_key, signature, b"checkpoint")
    assert not verify_signature(public, b"short", b"checkpoint")


def test_signer_encrypted_pem() -> None:
    signer = Signer.generate()
    pem = signer.to_pem(password=b"correct horse")
    assert b"ENCRYPTED" in pem
    loaded = Signer.from_pem(pem, password=b"correct horse")
    assert verify_signature(signer.public_key, loaded.sign(b"m"), b"m")
    with pytest.raises(AuditKeyError):
        Signer.from_pem(pem, password=b"wrong")
    with pytest.raises(AuditKeyError, match="empty password"):
        signer.to_pem(password=b"")


def test_signer_repr_hides_private_key() -> None:
    signer = Signer.generate()
    pem = signer.to_pem().decode()
    body = "".join(line for line in pem.splitlines() if "-----" not in line)
    assert body not in repr(signer)
    assert repr(signer).startswith("Signer(public_key=")


def test_bad_pem_is_a_key_error() -> None:
    with pytest.raises(AuditKeyError):
        Signer.from_pem(b"-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    with pytest.raises(AuditKeyError):
        load_public_key(b"garbage")
    ec_pem = (
        ec.generate_private_key(ec.SECP256R1())
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    with pytest.raises(AuditKeyError, match="not an Ed25519 public key"):
        load_public_key(ec_pem)

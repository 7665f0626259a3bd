"""Key handling and the two primitives the audit trail needs: AES-256-GCM sealing and Ed25519 signing.

This module is the only place that touches ``cryptography``; the chain code above it
sees :class:`Keyring`, :func:`seal`, :func:`open_box` and :class:`Signer` only, so the
recipe (algorithm, nonce size, key-id rule) is fixed in one place.

Decisions worth knowing:

* **Key ids** are a fingerprint, not a random label: the first 8 hex characters of
  ``SHA-256(b"greentwin.audit.key-id.v1\\x00" + key)`` (see :func:`key_id_for`). The
  same key therefore always has the same id, and a keyring file that pairs an id with
  the wrong key is refused at load time (:class:`AuditKeyError`) instead of making
  every old record look tampered. 32 bits of a hash of a 256-bit random key reveal
  nothing usable about the key.
* **Nonces** are 96 random bits from ``os.urandom`` per record. Random nonces are safe
  for up to 2**32 records per key (NIST SP 800-38D); rotate long before that.
* The keyring JSON is ``{"version": 1, "keys": [{"id": ..., "key": <base64>}, ...]}``
  with the current (encrypting) key first. It is secret material: keep it out of logs.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, InvalidTag, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from audit.errors import AuditKeyError, AuditTamperError

KEY_LEN = 32
"""AES-256: 32-byte keys."""
NONCE_LEN = 12
"""96-bit GCM nonces, the size GCM is specified for."""
DEFAULT_KEYS_ENV = "GREENTWIN_AUDIT_KEYS"
"""Environment variable :meth:`Keyring.from_env` reads by default."""

_KEY_ID_DOMAIN = b"greentwin.audit.key-id.v1\x00"
_SIGNING_KEY_ID_DOMAIN = b"greentwin.audit.signing-key-id.v1\x00"
_KEYRING_VERSION = 1


def key_id_for(key: bytes) -> str:
    """Return the key id of ``key``: a fingerprint, so ids can be checked against their keys."""
    return hashlib.sha256(_KEY_ID_DOMAIN + bytes(key)).hexdigest()[:8]


class Keyring:
    """Ordered AES-256 keys: the first (current) one encrypts, every one decrypts.

    Immutable: :meth:`rotate` returns a new keyring, so a writer never sees a keyring
    change under it half-way through a batch.
    """

    __slots__ = ("_ids", "_keys", "_ciphers")

    def __init__(self, keys: Mapping[str, bytes]) -> None:
        if not keys:
            raise AuditKeyError("a keyring needs at least one key")
        for key_id, key in keys.items():
            if not isinstance(key, bytes | bytearray) or len(key) != KEY_LEN:
                raise AuditKeyError(f"key {key_id!r} must be {KEY_LEN} bytes")
            if key_id != key_id_for(key):
                raise AuditKeyError(f"key id {key_id!r} does not match its key (ids are key fingerprints)")
        self._ids: tuple[str, ...] = tuple(keys)
        self._keys: dict[str, bytes] = {kid: bytes(k) for kid, k in keys.items()}
        self._ciphers: dict[str, AESGCM] = {kid: AESGCM(k) for kid, k in self._keys.items()}

    @classmethod
    def generate(cls) -> Keyring:
        """A keyring with one fresh random key."""
        key = AESGCM.generate_key(bit_length=KEY_LEN * 8)
        return cls({key_id_for(key): key})

    @classmethod
    def from_keys(cls, *keys: bytes) -> Keyring:
        """Build from raw keys (current first), deriving their ids."""
        return cls({key_id_for(k): k for k in keys})

    def rotate(self) -> Keyring:
        """A new keyring whose current key is fresh; the old keys stay for decryption."""
        key = AESGCM.generate_key(bit_length=KEY_LEN * 8)
        return Keyring({key_id_for(key): key, **self._keys})

    @property
    def current_key_id(self) -> str:
        """The id of the key new records are sealed with."""
        return self._ids[0]

    @property
    def key_ids(self) -> tuple[str, ...]:
        """All key ids, current first."""
        return self._ids

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __len__(self) -> int:
        return len(self._ids)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Keyring):
            return NotImplemented
        return self._ids == other._ids and all(
            hmac.compare_digest(self._keys[k], other._keys[k]) for k in self._ids
        )

    __hash__ = None  # type: ignore[assignment]  # keys are secret; never usable as dict keys

    def __repr__(self) -> str:
        return f"Keyring(current={self.current_key_id!r}, key_ids={self._ids!r})"

    def _cipher(self, key_id: str) -> AESGCM:
        try:
            return self._ciphers[key_id]
        except (KeyError, TypeError):
            raise AuditKeyError(f"unknown key id {key_id!r}") from None

    # -- serialisation -------------------------------------------------------------

    def to_json(self) -> str:
        """Serialise ids and base64 keys (current first). The result is secret."""
        keys = [{"id": kid, "key": base64.b64encode(self._keys[kid]).decode("ascii")} for kid in self._ids]
        return json.dumps({"version": _KEYRING_VERSION, "keys": keys}, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Keyring:
        """Parse :meth:`to_json` output; every problem is an :class:`AuditKeyError` without key bytes."""
        try:
            doc = json.loads(text)
        except (ValueError, TypeError):
            # ``from None``: the decode error keeps the whole document (the keys) in ``.doc``.
            raise AuditKeyError("keyring is not valid JSON") from None
        if not isinstance(doc, dict) or doc.get("version") != _KEYRING_VERSION:
            raise AuditKeyError(f"keyring must be an object with version {_KEYRING_VERSION}")
        entries = doc.get("keys")
        if not isinstance(entries, list) or not entries:
            raise AuditKeyError("keyring needs a non-empty 'keys' list")
        keys: dict[str, bytes] = {}
        for n, entry in enumerate(entries):
            if not isinstance(entry, dict) or not isinstance(entry.get("id"), str):
                raise AuditKeyError(f"keyring entry {n} needs a string 'id'")
            key_id = entry["id"]
            if key_id in keys:
                raise AuditKeyError(f"key id {key_id!r} appears twice")
            try:
                keys[key_id] = base64.b64decode(entry.get("key", ""), validate=True)
            except (binascii.Error, ValueError, TypeError):
                raise AuditKeyError(f"key {key_id!r} is not valid base64") from None
        return cls(keys)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Keyring:
        """Load a keyring JSON file (e.g. a mounted secret)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise AuditKeyError(f"cannot read keyring file {os.fspath(path)!r}: {exc.strerror}") from None
        return cls.from_json(text)

    @classmethod
    def from_env(cls, var: str = DEFAULT_KEYS_ENV) -> Keyring:
        """Load a keyring JSON from an environment variable."""
        text = os.environ.get(var)
        if not text:
            raise AuditKeyError(f"environment variable {var} is not set")
        return cls.from_json(text)


@dataclass(frozen=True, slots=True)
class SealedBox:
    """An AES-GCM ciphertext (tag appended) with the key id and nonce needed to open it."""

    key_id: str
    nonce: bytes
    ciphertext: bytes


def seal(keyring: Keyring, plaintext: bytes, aad: bytes, *, _nonce: bytes | None = None) -> SealedBox:
    """Encrypt under the current key with a fresh random nonce.

    ``_nonce`` exists for known-answer tests only: reusing a nonce under one key
    destroys GCM's confidentiality and authenticity.
    """
    nonce = os.urandom(NONCE_LEN) if _nonce is None else bytes(_nonce)
    key_id = keyring.current_key_id
    return SealedBox(key_id, nonce, keyring._cipher(key_id).encrypt(nonce, plaintext, aad))


def open_box(keyring: Keyring, box: SealedBox, aad: bytes) -> bytes:
    """Decrypt and authenticate; any change to key, nonce, ciphertext or ``aad`` raises.

    Raises :class:`AuditKeyError` for a key id the keyring lacks (a configuration
    problem) and :class:`AuditTamperError` for everything else.
    """
    cipher = keyring._cipher(box.key_id)
    if len(box.nonce) != NONCE_LEN:
        raise AuditTamperError(f"nonce must be {NONCE_LEN} bytes")
    try:
        return cipher.decrypt(box.nonce, box.ciphertext, aad)
    except (InvalidTag, ValueError):
        raise AuditTamperError("authentication failed (wrong key, or data, nonce or aad changed)") from None


class Signer:
    """An Ed25519 private key for signing checkpoints and anchors; its repr hides the key."""

    __slots__ = ("_private",)

    def __init__(self, private_key: Ed25519PrivateKey) -> None:
        if not isinstance(private_key, Ed25519PrivateKey):
            raise AuditKeyError("Signer needs an Ed25519 private key")
        self._private = private_key

    @classmethod
    def generate(cls) -> Signer:
        """A signer with a fresh key."""
        return cls(Ed25519PrivateKey.generate())

    @classmethod
    def from_pem(cls, data: bytes, password: bytes | None = None) -> Signer:
        """Load a PKCS#8 PEM private key (optionally password-protected)."""
        try:
            key = serialization.load_pem_private_key(data, password=password)
        except (ValueError, TypeError, UnsupportedAlgorithm):
            raise AuditKeyError("not a readable PEM private key (or wrong password)") from None
        if not isinstance(key, Ed25519PrivateKey):
            raise AuditKeyError("PEM key is not an Ed25519 private key")
        return cls(key)

    def to_pem(self, password: bytes | None = None) -> bytes:
        """PKCS#8 PEM; encrypted with ``password`` when one is given. The result is secret."""
        if password == b"":
            raise AuditKeyError("an empty password would not protect the key; pass None for plain PEM")
        encryption: serialization.KeySerializationEncryption = (
            serialization.NoEncryption()
            if password is None
            else serialization.BestAvailableEncryption(password)
        )
        return self._private.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption
        )

    @property
    def public_key(self) -> Ed25519PublicKey:
        """The key verifiers need."""
        return self._private.public_key()

    def public_key_pem(self) -> bytes:
        """SubjectPublicKeyInfo PEM of :attr:`public_key`, for distribution to auditors."""
        return self.public_key.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    @property
    def key_id(self) -> str:
        """The fingerprint of :attr:`public_key` (:func:`signing_key_id`), named by each exported anchor."""
        return signing_key_id(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """A 64-byte Ed25519 signature."""
        return self._private.sign(message)

    def __repr__(self) -> str:
        raw = self.public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        return f"Signer(public_key={raw.hex()[:16]}...)"


def load_public_key(pem: bytes) -> Ed25519PublicKey:
    """Parse a public key exported with :meth:`Signer.public_key_pem`."""
    try:
        key = serialization.load_pem_public_key(pem)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise AuditKeyError("not a readable PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise AuditKeyError("PEM key is not an Ed25519 public key")
    return key


def signing_key_id(public_key: Ed25519PublicKey) -> str:
    """A signing key's id: a fingerprint of its public key, so a statement can name the key it was
    signed with and still be checked after the signing key was rotated."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(_SIGNING_KEY_ID_DOMAIN + raw).hexdigest()[:8]


_PEM_END = b"-----END PUBLIC KEY-----"


def load_public_keys(pem: bytes) -> list[Ed25519PublicKey]:
    """Every public key in a file of concatenated PEM blocks (the retired signing keys)."""
    blocks = [b + _PEM_END for b in pem.split(_PEM_END) if b.strip()]
    return [load_public_key(b.strip() + b"\n") for b in blocks]


PublicKeys = Ed25519PublicKey | Sequence[Ed25519PublicKey]
"""One verifying key, or several: the current signing key and the retired ones."""


def verify_signature(public_key: PublicKeys, signature: bytes, message: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message`` by the key (or by any of the
    keys, old statements being signed by a retired key); never raises for bad input."""
    keys = (public_key,) if isinstance(public_key, Ed25519PublicKey) else tuple(public_key)
    for key in keys:
        try:
            key.verify(bytes(signature), message)
        except (InvalidSignature, ValueError, TypeError):
            continue
        return True
    return False

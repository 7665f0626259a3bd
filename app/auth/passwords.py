"""Password hashing with Argon2id (argon2-cffi): memory-hard, salted per hash, constant-time checks.

Parameters are OWASP's Argon2id baseline (19 MiB, 2 passes, 1 lane): about 50 ms a hash on one
core, so a login stays cheap for the service and expensive for someone guessing offline. The
PHC string keeps algorithm, parameters and salt with the hash, so raising the parameters later
only needs :func:`needs_rehash` at the next login.
"""

from __future__ import annotations

import functools
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

MIN_PASSWORD_LEN = 12
MAX_PASSWORD_LEN = 1024  # hashing cost must not grow with whatever a client sends
GENERATED_PASSWORD_BYTES = 15  # 20 URL-safe characters, 120 bits

_HASHER = PasswordHasher(time_cost=2, memory_cost=19 * 1024, parallelism=1)


def check_password_policy(password: str) -> None:
    """Raise ``ValueError`` saying what is wrong with a new password (never echoing it)."""
    if len(password) < MIN_PASSWORD_LEN:
        raise ValueError(f"password must be at least {MIN_PASSWORD_LEN} characters")
    if len(password) > MAX_PASSWORD_LEN:
        raise ValueError(f"password must be at most {MAX_PASSWORD_LEN} characters")
    if password != password.strip():
        raise ValueError("password must not start or end with whitespace")


def hash_password(password: str) -> str:
    """Argon2id PHC string of ``password`` with a fresh random salt."""
    check_password_policy(password)
    return _HASHER.hash(password)


def verify_password(password_hash: str, password: str) -> bool:
    """True when ``password`` matches; argon2 compares in constant time. A malformed hash never matches."""
    if len(password) > MAX_PASSWORD_LEN:
        return False
    try:
        return _HASHER.verify(password_hash, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False


def needs_rehash(password_hash: str) -> bool:
    """True when the hash was made with other parameters than today's."""
    try:
        return _HASHER.check_needs_rehash(password_hash)
    except InvalidHashError:
        return True


@functools.cache
def dummy_hash() -> str:
    """A hash to verify against for unknown usernames, so their answer takes as long as a known one's."""
    return _HASHER.hash(secrets.token_urlsafe(GENERATED_PASSWORD_BYTES))


def generate_password() -> str:
    """A random password from the operating system's CSPRNG (a seeded generator would make it guessable)."""
    return secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)

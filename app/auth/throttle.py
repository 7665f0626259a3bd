"""Failed-login throttling that an attacker cannot turn into a lock-out of the account's owner.

Three counts, each a sliding window of ``window_s``:

* per (account, address): ``per_pair`` attempts, so one address guesses one password slowly;
* per address, over every account and unknown names alike: ``per_address`` failures, so one
  address cannot spray guesses across many accounts;
* per account, over every address: ``per_account`` failures. Reaching it is the last resort, a
  lock of the account (kept in the database by :mod:`app.auth.lockout`, so every replica, the
  admin page and ``greentwin user unlock`` see it). While it holds, an address that has failed
  on the account is refused outright and any other gets one try; so distributed guessing slows
  to one guess per address and window, and the owner, from an address with no failures, still
  logs in with the right password.

A success clears its (account, address) count and takes back its own attempt from the other
two (a success must not reset an address's count of failures on other accounts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from app.auth.ratelimit import SlidingWindowLimiter


@dataclass(frozen=True)
class Admission:
    """The answer to one login attempt before its password is checked."""

    wait_s: float
    """0: go ahead (the attempt is counted); otherwise the seconds until this address may try again."""
    locked_out: bool = False
    """Refused because the account is locked and this address already failed on it."""


class LoginThrottle:
    """The counts of failed logins in one process; thread-safe."""

    def __init__(self, *, per_pair: int, per_address: int, per_account: int, window_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.pairs = SlidingWindowLimiter(per_pair, window_s, clock=clock)
        self.addresses = SlidingWindowLimiter(per_address, window_s, clock=clock)
        self.accounts = SlidingWindowLimiter(per_account, window_s, clock=clock)

    def admit(self, name: str, client: str, *, locked: bool) -> Admission:
        """Count an attempt of ``client`` on account ``name`` or say how long it must wait."""
        wait = self.addresses.attempt(client)
        if wait > 0:
            return Admission(wait)
        wait = self.pairs.attempt((name, client), limit=1 if locked else None)
        if wait > 0:
            self.addresses.forgive(client)  # not made, so not counted
            return Admission(wait, locked_out=locked)
        return Admission(0.0)

    def failed(self, name: str) -> bool:
        """Count a failure against an existing account; True when it has reached the lock threshold."""
        return self.accounts.record(name) >= self.accounts.max_failures

    def succeeded(self, name: str, client: str) -> None:
        self.pairs.reset((name, client))
        self.addresses.forgive(client)

    def addresses_failing(self, name: str) -> int:
        """How many addresses have failures on ``name`` in the window (for the lock's log line)."""
        return len(self._pairs_of(name))

    def lift(self, name: str) -> None:
        """Forget the account's failures (an admin lifted its lock): its addresses may try again."""
        self.accounts.reset(name)
        for key in self._pairs_of(name):
            self.pairs.reset(key)

    def _pairs_of(self, name: str) -> list[Hashable]:
        """The (account, address) keys of ``name`` with failures in the window."""
        return self.pairs.keys_where(lambda k: isinstance(k, tuple) and k[0] == name)

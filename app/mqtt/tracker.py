"""Commands published and not yet acknowledged, with their re-send budget."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from wire.topics import Command

# Commands whose greenhouse is remembered after their ack: at one command a minute per greenhouse,
# hours of history for hundreds of greenhouses, in a few MB.
MAX_OWNERS = 65536

AckMatch = Literal["first", "repeat", "unknown", "foreign"]
"""What an ack is to the commands sent: the first answer of its kind to one of the greenhouse's own
commands (the one worth recording), a repeat of an answer already heard, a command this service never
sent (or forgot long ago), or another greenhouse's command."""


@dataclass
class PendingCommand:
    """One published command awaiting its ack; ``attempts`` counts publications of this cmd_id."""

    gh: str
    command: Command
    sent_at: float
    attempts: int = 1

    @property
    def cmd_id(self) -> UUID:
        return self.command.cmd_id


class CommandTracker:
    """Commands published but not yet acknowledged.

    ``expired`` hands each overdue command back exactly once per publication (no repeated alarms);
    the caller alarms and may re-publish the same cmd_id (the edge box applies it at most once)
    until ``max_attempts`` publications have been made. Thread-safe: acks arrive on paho's thread.
    """

    def __init__(self, ack_timeout_s: float = 10.0, max_attempts: int = 3,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ack_timeout_s <= 0 or max_attempts < 1:
            raise ValueError("ack_timeout_s must be > 0 and max_attempts >= 1")
        self.ack_timeout_s = ack_timeout_s
        self.max_attempts = max_attempts
        self._clock = clock
        self._pending: dict[UUID, PendingCommand] = {}
        self._attempts: dict[UUID, int] = {}
        self._owners: OrderedDict[UUID, str] = OrderedDict()
        self._answers: dict[UUID, set[str]] = {}
        """Statuses already heard per remembered command (forgotten with its owner)."""
        self._lock = threading.Lock()

    def record(self, gh: str, command: Command, now: float | None = None) -> PendingCommand:
        """Note a publication; publishing a cmd_id again (a retry) bumps its attempt count."""
        sent = self._clock() if now is None else now
        with self._lock:
            attempts = self._attempts.get(command.cmd_id, 0) + 1
            self._attempts[command.cmd_id] = attempts
            self._owners[command.cmd_id] = gh
            self._owners.move_to_end(command.cmd_id)
            if len(self._owners) > MAX_OWNERS:
                gone, _ = self._owners.popitem(last=False)
                self._answers.pop(gone, None)
            entry = PendingCommand(gh=gh, command=command, sent_at=sent, attempts=attempts)
            self._pending[command.cmd_id] = entry
            return entry

    def resolve(self, gh: str, cmd_id: UUID) -> PendingCommand | None:
        """An ack (of any status) arrived from ``gh``; None if the command was unknown, already given up
        on, or sent to another greenhouse (whose command then stays pending: only its own box answers)."""
        with self._lock:
            entry = self._pending.get(cmd_id)
            if entry is None or entry.gh != gh:
                return None
            self._attempts.pop(cmd_id, None)
            return self._pending.pop(cmd_id)

    def remember(self, gh: str, cmd_id: UUID, answered: str | None = None) -> None:
        """A command sent to ``gh`` before this tracker existed (an earlier run's): its acks match, and
        an answer already recorded for it counts as heard."""
        with self._lock:
            self._owners.setdefault(cmd_id, gh)
            self._owners.move_to_end(cmd_id, last=False)  # older than anything this run sends
            if answered is not None:
                self._answers.setdefault(cmd_id, set()).add(answered)

    def match(self, gh: str, cmd_id: UUID, status: str) -> AckMatch:
        """Classify an ack from ``gh`` (see :data:`AckMatch`) and remember a first answer as heard."""
        with self._lock:
            owner = self._owners.get(cmd_id)
            if owner is None:
                return "unknown"
            if owner != gh:
                return "foreign"
            heard = self._answers.setdefault(cmd_id, set())
            if status in heard:
                return "repeat"
            heard.add(status)
            return "first"

    def owner(self, cmd_id: UUID) -> str | None:
        """The greenhouse a recent command was sent to (acked or not); None if unknown or long gone."""
        with self._lock:
            return self._owners.get(cmd_id)

    def expired(self, now: float | None = None) -> list[PendingCommand]:
        """Remove and return commands with no ack within ``ack_timeout_s`` of their last publication."""
        t = self._clock() if now is None else now
        with self._lock:
            overdue = [p for p in self._pending.values() if t - p.sent_at >= self.ack_timeout_s]
            for p in overdue:
                del self._pending[p.cmd_id]
                if p.attempts >= self.max_attempts:
                    self._attempts.pop(p.cmd_id, None)  # given up: forget it entirely
            return overdue

    def can_retry(self, entry: PendingCommand) -> bool:
        """Whether another publication of this cmd_id is still allowed."""
        return entry.attempts < self.max_attempts

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)

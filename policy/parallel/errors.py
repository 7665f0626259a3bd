"""Worker failures counted per fingerprint: a failure that repeats every step is logged once.

A fingerprint hashes the *normalised* stack trace: exception type plus (module file, function,
line) of every frame, without the message (which often names an instance or a value) and
without directories (the same code installed elsewhere fingerprints the same). Deaths and
hangs get fingerprints of their own ("exit -9", "hang").
"""

from __future__ import annotations

import hashlib
import logging
import traceback
from dataclasses import dataclass
from pathlib import PurePath

logger = logging.getLogger("policy.parallel")


def normalised_trace(exc: BaseException) -> str:
    """Exception type and frames, one per line, with no message, address or directory."""
    lines = [f"{type(exc).__module__}.{type(exc).__qualname__}"]
    for frame in traceback.extract_tb(exc.__traceback__):
        where = "/".join(PurePath(frame.filename).parts[-2:])
        lines.append(f"{where}:{frame.name}:{frame.lineno}")
    return "\n".join(lines)


def fingerprint(text: str) -> str:
    """Short stable hash of a normalised trace (or of a kind of death such as 'exit -9')."""
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def describe(exc: BaseException) -> tuple[str, str, str]:
    """(fingerprint, one-line summary, full formatted traceback) of an exception."""
    summary = f"{type(exc).__name__}: {exc}"
    return fingerprint(normalised_trace(exc)), summary, "".join(traceback.format_exception(exc))


@dataclass
class ErrorKind:
    """One fingerprint: how often it happened and what its first occurrence looked like."""

    fingerprint: str
    summary: str
    detail: str
    count: int = 0


class ErrorLog:
    """Counts failures per fingerprint; logs the first of each kind in full and the rest only as counts."""

    def __init__(self, log: logging.Logger = logger) -> None:
        self._log = log
        self.kinds: dict[str, ErrorKind] = {}

    def record(self, fp: str, summary: str, detail: str, source: str) -> bool:
        """Count one occurrence; True (and one log record, with ``detail`` if any) when ``fp`` is new."""
        kind = self.kinds.get(fp)
        if kind is not None:
            kind.count += 1
            return False
        self.kinds[fp] = ErrorKind(fp, summary, detail, 1)
        self._log.error("%s: %s [fingerprint %s; repeats are counted, not logged]%s", source, summary, fp,
                        "\n" + detail.rstrip() if detail else "")
        return True

    def counts(self) -> dict[str, int]:
        return {fp: k.count for fp, k in self.kinds.items()}

    def log_summary(self) -> None:
        """One line per fingerprint seen more than once (called when the vector twin closes)."""
        for kind in self.kinds.values():
            if kind.count > 1:
                self._log.warning("fingerprint %s happened %d times: %s", kind.fingerprint, kind.count,
                                  kind.summary)

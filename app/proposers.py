"""The proposers in force: one per zone count, loaded from the policy directory the service follows.

The runtime, the policy watcher (:mod:`app.policy_watch`) and the writer process each hold one of
these; the writer runs in its own process, so it has its own, of the same class. Greenhouses of
one zone count share one proposer, so their batch shares one forward. A promoted ensemble replaces
every zone count at once or none: a directory that cannot be loaded leaves the proposers as they are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from pathlib import Path

from control import Proposer, load_proposer

log = logging.getLogger(__name__)

Loader = Callable[[Path, int], Proposer]
"""(policy directory, zone count) -> the proposer for greenhouses of that many zones."""


class ProposerCache:
    """Proposers by zone count, each loaded once, from the directory in force.

    ``fixed`` serves every zone count and follows no directory (a proposer given to the service
    directly: tests, benchmarks). With ``fallback``, a directory that fails to load gives way to
    it for good (the configured ensemble when the registry's cannot be loaded at start), and
    ``on_fallback`` hears which one failed and why.
    """

    def __init__(self, directory: Path, *, loader: Loader = load_proposer, fixed: Proposer | None = None,
                 fallback: Path | None = None,
                 on_fallback: Callable[[Path, Exception], None] | None = None) -> None:
        self._directory = Path(directory)
        self._loader = loader
        self._fixed = fixed
        self._fallback = fallback
        self._on_fallback = on_fallback
        self._loaded: dict[int, Proposer] = {}

    @property
    def directory(self) -> Path:
        """Where the proposers in force come from (and later ones will)."""
        return self._directory

    @property
    def fixed(self) -> Proposer | None:
        """The proposer given directly, if any: it serves every zone count."""
        return self._fixed

    def point_at(self, directory: Path) -> None:
        """Load from ``directory`` from now on (at start: the registry's promoted ensemble); the
        proposers already loaded stay until :meth:`swap`."""
        self._directory = Path(directory)

    def get(self, zones: int) -> Proposer:
        """The proposer for ``zones``, loaded on first use."""
        if self._fixed is not None:
            return self._fixed
        if zones not in self._loaded:
            self._loaded[zones] = self._load_or_fall_back(zones)
        return self._loaded[zones]

    def _load_or_fall_back(self, zones: int) -> Proposer:
        try:
            return self._loader(self._directory, zones)
        except Exception as exc:
            if self._fallback is None or self._directory == self._fallback:
                raise
            failed, self._directory = self._directory, self._fallback
            if self._on_fallback is not None:
                self._on_fallback(failed, exc)
            return self._loader(self._fallback, zones)

    def load(self, directory: Path, zones: Iterable[int]) -> dict[int, Proposer]:
        """Proposers for ``zones`` from ``directory``, not yet in force (loading may take seconds:
        off the event loop; :meth:`swap` puts them in force). Raises whatever a load raises."""
        return {z: self._loader(Path(directory), z) for z in zones}

    def swap(self, directory: Path, loaded: dict[int, Proposer]) -> None:
        """``loaded`` (from :meth:`load`) in force, in place of every proposer held."""
        self._directory, self._loaded = Path(directory), dict(loaded)

    def follow(self, directory: Path) -> bool:
        """Every zone count held, reloaded from ``directory`` and swapped in; True when it was.

        A directory that cannot be loaded leaves the proposers held in force (logged): whoever
        follows a promotion this way (the writer's explanations) goes on with the old ensemble
        rather than stop."""
        if self._fixed is not None or Path(directory) == self._directory:
            return False
        try:
            fresh = self.load(directory, self._loaded)
        except Exception:
            log.exception("cannot load the ensemble at %s: keeping the one from %s", directory,
                          self._directory)
            return False
        self.swap(directory, fresh)
        return True

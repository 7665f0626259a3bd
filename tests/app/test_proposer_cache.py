"""The proposers in force: one load per zone count, a swap replaces them all, a failed load keeps them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from app.proposers import ProposerCache


@dataclass(frozen=True)
class _Fake:
    """A proposer named after where it was loaded from."""

    policy_version: str
    zones: int
    ensemble: None = None

    def propose(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((1, self.zones + 2))

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((1, len(obs), self.zones + 2))


class _Loader:
    """Counts loads; a directory named ``bad*`` fails to load."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def __call__(self, directory: Path, zones: int) -> _Fake:
        self.calls.append((directory.name, zones))
        if directory.name.startswith("bad"):
            raise ValueError(f"{directory} is damaged")
        return _Fake(directory.name, zones)


def test_each_zone_count_is_loaded_once_from_the_directory_in_force() -> None:
    loader = _Loader()
    cache = ProposerCache(Path("v1"), loader=loader)
    first = cache.get(6)
    assert cache.get(6) is first and cache.get(2).zones == 2
    assert loader.calls == [("v1", 6), ("v1", 2)]


def test_a_swap_replaces_every_proposer_held() -> None:
    loader = _Loader()
    cache = ProposerCache(Path("v1"), loader=loader)
    cache.get(6)
    fresh = cache.load(Path("v2"), [6])
    assert cache.get(6).policy_version == "v1", "loading alone puts nothing in force"
    cache.swap(Path("v2"), fresh)
    assert cache.get(6) is fresh[6] and cache.directory == Path("v2")
    assert cache.get(2).policy_version == "v2", \
        "a zone count first asked after the swap comes from the new directory"


def test_following_a_directory_that_fails_to_load_keeps_the_old_proposers() -> None:
    loader = _Loader()
    cache = ProposerCache(Path("v1"), loader=loader)
    old = cache.get(6)
    assert not cache.follow(Path("bad-v2"))
    assert cache.get(6) is old and cache.directory == Path("v1")
    assert cache.follow(Path("v3")) and cache.get(6).policy_version == "v3"
    assert not cache.follow(Path("v3")), "the directory in force already"


def test_a_failed_load_falls_back_to_the_configured_directory_and_says_so() -> None:
    failures: list[tuple[str, str]] = []
    cache = ProposerCache(Path("v1"), loader=_Loader(), fallback=Path("configured"),
                          on_fallback=lambda d, exc: failures.append((d.name, str(exc))))
    cache.point_at(Path("bad-v2"))
    assert cache.get(6).policy_version == "configured" and cache.directory == Path("configured")
    assert failures == [("bad-v2", "bad-v2 is damaged")]
    with pytest.raises(ValueError):  # without a fallback, the failure is the caller's
        ProposerCache(Path("bad-v3"), loader=_Loader()).get(6)


def test_a_fixed_proposer_serves_every_zone_count_and_follows_nothing() -> None:
    loader = _Loader()
    given = _Fake("given", 6)
    cache = ProposerCache(Path("v1"), loader=loader, fixed=given)
    assert cache.get(6) is given and cache.get(2) is given
    assert not cache.follow(Path("v2")) and loader.calls == []

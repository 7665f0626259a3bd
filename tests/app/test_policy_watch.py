"""The policy watcher on plain collaborators: no runtime, no database, no event-loop service."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from app import registry
from app.policy_swap import PolicySwap
from app.policy_watch import PolicyWatcher
from app.proposers import ProposerCache


@dataclass(frozen=True)
class _Fake:
    policy_version: str
    ensemble: None = None

    def propose(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((1, 8))

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        return np.zeros((1, len(obs), 8))


def _load(directory: Path, zones: int) -> _Fake:
    if directory.name.startswith("bad"):
        raise ValueError("damaged")
    return _Fake(directory.name)


class _Fleet:
    def __init__(self) -> None:
        self.alarms: list[str] = []
        self.applied: list[PolicySwap] = []

    def zone_counts(self) -> list[int]:
        return [2, 6]

    def alarm_all(self, kind: str) -> None:
        self.alarms.append(kind)

    async def apply(self, swap: PolicySwap) -> int:
        self.applied.append(swap)
        return 3


def _info(version: str, directory: Path | None = None) -> registry.VersionInfo:
    return registry.VersionInfo(version=version, parent=None, status="promoted",
                                directory=str(directory or version),
                                created_at=datetime(2026, 6, 1, tzinfo=UTC), promoted_at=None,
                                promoted_by="cli:alice", note="", metrics=None, calibration=None,
                                data_from=None, data_to=None, twin_version=None, config_hash=None,
                                git_commit=None)


def test_the_watcher_swaps_through_its_collaborators_and_refuses_a_bad_version_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    promoted = {"now": _info("v1")}
    monkeypatch.setattr(registry, "promoted", lambda sessions: promoted["now"])
    fleet, followed = _Fleet(), []
    cache = ProposerCache(Path("v1"), loader=_load)
    watcher = PolicyWatcher(object(), Path("configured"), cache, fleet, poll_s=60.0,  # type: ignore[arg-type]
                            on_swapped=followed.append)
    watcher.version = "v1"

    async def polls() -> list[bool]:
        results = [await watcher.check()]
        promoted["now"] = _info("v2")
        results.append(await watcher.check())
        promoted["now"] = _info("bad-v3")
        results += [await watcher.check(), await watcher.check()]
        return results

    assert asyncio.run(polls()) == [False, True, False, False]
    [swap] = fleet.applied
    assert (swap.info.version, swap.registry_from, sorted(swap.proposers)) == ("v2", "v1", [2, 6])
    assert cache.directory == Path("v2") and cache.get(6) is swap.proposers[6]
    assert followed == [Path("v2")] and watcher.version == "v2" and watcher.swaps == 1
    assert fleet.alarms == ["policy_load_failed:bad-v3"], "alarmed once per version, not once per poll"
    assert cache.get(2).policy_version == "v2" and "bad-v3" in watcher.failed


def test_a_promoted_version_that_fails_at_start_gives_way_to_the_configured_one(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    promoted = tmp_path / "bad-v2"
    promoted.mkdir()
    (promoted / "ensemble.json").write_text("{}")
    monkeypatch.setattr(registry, "ensure_seeded", lambda sessions, configured: _info("bad-v2", promoted))
    holder: dict[str, PolicyWatcher] = {}
    cache = ProposerCache(tmp_path / "configured", loader=_load, fallback=tmp_path / "configured",
                          on_fallback=lambda d, exc: holder["w"].fell_back(d, exc))
    watcher = holder["w"] = PolicyWatcher(
        object(), tmp_path / "configured", cache, _Fleet(), poll_s=60.0)  # type: ignore[arg-type]
    assert watcher.adopt() is not None and cache.directory == promoted
    assert cache.get(6).policy_version == "configured"
    assert "bad-v2" in watcher.failed and cache.directory == tmp_path / "configured"

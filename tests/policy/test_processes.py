"""How many cores a trainer or evaluator may use: the affinity mask, capped by the cgroup's CPU quota."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from policy.processes import cgroup_cpu_limit, usable_cores


@pytest.mark.parametrize(("text", "cores"), [("max 100000", None), ("150000 100000", 1.5),
                                             ("200000 100000\n", 2.0),
                                             ("garbage", None), ("", None), ("100 0", None)])
def test_the_cgroup_quota_reads_as_cores(tmp_path: Path, text: str, cores: float | None) -> None:
    f = tmp_path / "cpu.max"
    f.write_text(text)
    assert cgroup_cpu_limit(f) == cores


def test_usable_cores_is_the_affinity_capped_by_the_quota(tmp_path: Path) -> None:
    mask = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    assert usable_cores(tmp_path / "absent") == mask
    quota = tmp_path / "cpu.max"
    quota.write_text("50000 100000")  # half a core still gets one thread
    assert usable_cores(quota) == 1
    quota.write_text(f"{(mask + 8) * 100000} 100000")  # a quota above the mask leaves the mask
    assert usable_cores(quota) == mask

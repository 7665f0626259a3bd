"""Pieces of the multi-process twin that need no worker process: global instance ids, the shared
segment, the seqlock reader, row checksums, and error fingerprints."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from policy.parallel.errors import ErrorLog, describe
from policy.parallel.layout import (
    Layout,
    SharedBuffers,
    publish_rows,
    read_newest,
    read_slot,
    segment_exists,
    verify_rows,
)
from twin import GreenhouseTwin

KW = {"dt_s": 3600.0, "episode_days": 1.0}  # 24-step episodes: autoresets within the test


def _actions(rng: np.random.Generator, b: int) -> np.ndarray:
    a = np.zeros((b, 8), np.float32)
    a[:, :6] = rng.random((b, 6)) < 0.4
    a[:, 6] = 100 * rng.random(b)
    a[:, 7] = 100 * rng.random(b)
    return a


def test_instance_offset_replays_the_rows_of_the_full_batch() -> None:
    full = GreenhouseTwin(num_instances=11, seed=4, **KW)
    parts = [GreenhouseTwin(num_instances=hi - lo, seed=4, instance_offset=lo, **KW)
             for lo, hi in ((0, 3), (3, 11))]
    np.testing.assert_array_equal(full.reset(), np.concatenate([p.reset() for p in parts]))
    rng = np.random.default_rng(0)
    for _ in range(30):  # crosses an episode end: autoreset draws use the global ids too
        a = _actions(rng, 11)
        want = full.step(a)
        got = [p.step(a[lo:hi]) for p, (lo, hi) in zip(parts, ((0, 3), (3, 11)), strict=True)]
        for i in range(4):
            np.testing.assert_array_equal(want[i], np.concatenate([g[i] for g in got]))
    np.testing.assert_array_equal(full.state.episode, np.concatenate([p.state.episode for p in parts]))
    assert full.state.episode.max() >= 1
    # Without the offset, the slice would replay instances 0.. instead: a different scenario.
    assert not np.array_equal(GreenhouseTwin(num_instances=8, seed=4, **KW).reset(), parts[1].reset(seed=4))
    with pytest.raises(ValueError, match="instance_offset"):
        GreenhouseTwin(num_instances=2, instance_offset=-1)


@pytest.fixture
def buffers():
    buf = SharedBuffers.create(Layout(num_instances=6, obs_dim=5, act_dim=3, num_workers=2))
    yield buf
    buf.close()
    buf.unlink()


def _publish(buf: SharedBuffers, step: int, rng: np.random.Generator) -> np.ndarray:
    obs = rng.normal(size=(6, 5)).astype(np.float32)
    publish_rows(buf, step, 0, 6, obs, obs, rng.normal(size=6).astype(np.float32), rng.random(6) < 0.3,
                 rng.random(6) < 0.3, rebuilt=False)
    return obs


def test_segment_lives_until_unlinked(buffers: SharedBuffers) -> None:
    assert segment_exists(buffers.name) and buffers.name.startswith(f"greentwin_{os.getpid()}_")
    other = SharedBuffers.attach(buffers.layout, buffers.name)
    other.obs[0, 0, 0] = 7.0
    assert buffers.obs[0, 0, 0] == 7.0  # one memory, two mappings
    with pytest.raises(RuntimeError, match="only the creating process"):
        other.unlink()
    view = other.obs[0, 0]
    assert not other.close()  # a view is still in use: the mapping stays until it goes
    assert view[0] == 7.0
    del view
    again = SharedBuffers.attach(buffers.layout, buffers.name)
    assert again.close()
    with pytest.raises(MemoryError, match="use fewer instances"):
        SharedBuffers.create(Layout(num_instances=10**12, obs_dim=53, act_dim=8, num_workers=1))


def test_checksums_catch_changed_swapped_and_stale_values(buffers: SharedBuffers) -> None:
    rng = np.random.default_rng(1)
    _publish(buffers, 0, rng)
    obs = _publish(buffers, 1, rng)
    rows, retries = read_slot(buffers, 1)
    assert retries == 0 and (rows.step == 1).all() and verify_rows(rows).all()
    np.testing.assert_array_equal(rows.obs, obs)

    flipped = rows._replace(obs=rows.obs.copy())
    flipped.obs.view(np.uint32)[2, 3] ^= 1  # one bit of one value
    assert verify_rows(flipped).tolist() == [True, True, False, True, True, True]
    swapped = rows._replace(obs=rows.obs.copy())
    swapped.obs[4, [0, 1]] = swapped.obs[4, [1, 0]]
    assert not verify_rows(swapped)[4]
    stale = rows._replace(step=rows.step - 1)  # the right bytes claimed for another step
    assert not verify_rows(stale).any()
    # rows in wrong places
    moved = rows._replace(obs=rows.obs[::-1].copy(), checksum=rows.checksum[::-1].copy())
    assert not verify_rows(moved).any()


def test_seqlock_reader_skips_rows_being_written(buffers: SharedBuffers) -> None:
    rng = np.random.default_rng(2)
    _publish(buffers, 0, rng)
    _publish(buffers, 1, rng)
    # A writer stopped half-way through step 2 of rows 1-2: odd sequence, half-new data.
    buffers.seq[0, 1:3] = 2 * 2 + 1
    buffers.obs[0, 1:3, :2] = 99.0
    rows, retries = read_slot(buffers, 0, max_tries=5)
    assert rows.step.tolist() == [0, -1, -1, 0, 0, 0] and retries == 2 * 5  # two rows, five tries
    assert verify_rows(rows).all()  # rows never read count as valid; every accepted row checks out
    newest, _ = read_newest(buffers, max_tries=5)
    assert (newest.step == 1).all() and verify_rows(newest).all()  # slot 1 still holds whole rows


def _fail(value: int) -> None:
    raise ValueError(f"instance {value} diverged at 0x{id(value):x}")


def _other_failure() -> None:
    raise ValueError("instance 1 diverged")


def _error(fn, *args) -> BaseException:
    try:
        fn(*args)
    except ValueError as exc:
        return exc
    raise AssertionError("expected an exception")


def test_fingerprints_ignore_messages_but_not_the_failing_code() -> None:
    a, b, c = describe(_error(_fail, 1)), describe(_error(_fail, 2)), describe(_error(_other_failure))
    assert a[0] == b[0] != c[0]
    assert a[1] != b[1] and "_fail" in a[2]


def test_error_log_writes_each_fingerprint_once_and_counts_repeats(caplog: pytest.LogCaptureFixture) -> None:
    log = ErrorLog()
    with caplog.at_level(logging.WARNING, logger="policy.parallel"):
        for value in range(50):
            fp, summary, trace = describe(_error(_fail, value))
            log.record(fp, summary, trace, f"worker {value % 2}")
        fp2, summary2, trace2 = describe(_error(_other_failure))
        assert log.record(fp2, summary2, trace2, "worker 0")
        first = [r for r in caplog.records if r.levelno == logging.ERROR]
        log.log_summary()
    assert log.counts() == {fp: 50, fp2: 1}
    assert len(first) == 2 and "Traceback" in first[0].getMessage() and fp in first[0].getMessage()
    summary_lines = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert summary_lines == [f"fingerprint {fp} happened 50 times: {describe(_error(_fail, 0))[1]}"]


def test_a_killed_owner_process_leaves_no_segment() -> None:
    """The learner's resource tracker unlinks its segment when the learner dies without cleaning up."""
    code = ("from policy.parallel.layout import Layout, SharedBuffers\n"
            "import time\n"
            "b = SharedBuffers.create(Layout(8, 4, 2, 1))\n"
            "print(b.name, flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout is not None
        name = proc.stdout.readline().strip()
        assert name and segment_exists(name)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 15
        while segment_exists(name) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not segment_exists(name)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)

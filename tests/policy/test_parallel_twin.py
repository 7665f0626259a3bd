"""ShmVectorTwin against one in-process twin, under concurrent reads, worker crashes, hangs and
errors, and on every way out (the shared segment and the workers must always go)."""

from __future__ import annotations

import glob
import logging
import os
import signal
import threading
import time

import numpy as np
import pytest
import torch

from policy.parallel.layout import SHM_DIR, segment_exists
from policy.parallel.vector import ShmVectorTwin, WorkerError, worker_bounds
from twin import GreenhouseTwin

KW = {"dt_s": 3600.0, "episode_days": 1.0}  # 24-step episodes: autoresets within the tests


def _actions(rng: np.random.Generator, b: int) -> np.ndarray:
    a = np.zeros((b, 8), np.float32)
    a[:, :6] = rng.random((b, 6)) < 0.4
    a[:, 6] = 100 * rng.random(b)
    a[:, 7] = 100 * rng.random(b)
    return a


def _gone(pid: int | None) -> bool:
    return pid is None or not os.path.exists(f"/proc/{pid}")


def _our_segments() -> set[str]:
    return set(glob.glob(os.path.join(SHM_DIR, f"greentwin_{os.getpid()}_*")))


def _fresh_episode_obs(vec: ShmVectorTwin, lo: int, hi: int, episode: np.ndarray) -> np.ndarray:
    """First observation of each instance's next episode, computed by an in-process twin."""
    ref = GreenhouseTwin(num_instances=hi - lo, seed=vec.seed, instance_offset=lo, **KW)
    ref.reset()
    ref.state.episode[...] = episode
    ref.reset_instances(np.arange(hi - lo))
    return ref.state.last_obs


def test_workers_replay_one_in_process_twin_bit_for_bit() -> None:
    b = 13
    ref = GreenhouseTwin(num_instances=b, seed=5, **KW)
    rng = np.random.default_rng(0)
    with ShmVectorTwin(b, 3, seed=5, **KW) as vec:
        assert [hi - lo for lo, hi in worker_bounds(b, 3)] == [4, 5, 4]  # uneven slices
        np.testing.assert_array_equal(vec.reset().numpy(), ref.reset())
        for t in range(36):  # an episode is 24 steps: autoresets, then a reset by hand
            if t == 30:  # a reset without a seed moves every instance to its next episode
                np.testing.assert_array_equal(vec.reset().numpy(), ref.reset())
            a = _actions(rng, b)
            obs, reward, terminated, truncated, info = vec.step(torch.from_numpy(a))
            want = ref.step(a)
            for got, exp in zip((obs, reward, terminated, truncated), want[:4], strict=True):
                np.testing.assert_array_equal(got.numpy(), exp)
            np.testing.assert_array_equal(info["final_obs"].numpy(), want[4].get("final_obs", want[0]))
            assert not info["rebuilt"].any()
        assert ref.state.episode.max() >= 2
        for name, value in ref.state.arrays().items():
            np.testing.assert_array_equal(getattr(vec.state, name).numpy(), value, err_msg=name)
        # new seed, episode 0 again
        np.testing.assert_array_equal(vec.reset(seed=9).numpy(), ref.reset(seed=9))
    # A vector twin over global ids 7..12 replays those rows of the full batch.
    ref = GreenhouseTwin(num_instances=b, seed=5, **KW)
    with ShmVectorTwin(6, 2, seed=5, instance_offset=7, **KW) as part:
        np.testing.assert_array_equal(part.reset().numpy(), ref.reset()[7:])
        a = _actions(rng, b)
        np.testing.assert_array_equal(part.step(a[7:])[0].numpy(), ref.step(a)[0][7:])


def test_reader_never_sees_a_torn_row_while_workers_write() -> None:
    b, steps = 128, 40
    rng = np.random.default_rng(1)
    with ShmVectorTwin(b, 2, seed=2, **KW) as vec:
        vec.reset()
        peeks = mixed = rows_read = retries = 0
        for k in range(1, steps + 1):
            vec.step_async(_actions(rng, b))
            deadline = time.monotonic() + 30
            while True:  # read while the workers write, until the seqlock shows every row at step k
                p = vec.peek()  # raises TornReadError if an accepted row fails its checksum
                assert set(np.unique(p.rows.step)) <= {k - 1, k}
                peeks, rows_read, retries = peeks + 1, rows_read + b, retries + p.retries
                if (p.rows.step == k).all():
                    break
                mixed += bool((p.rows.step == k).any())
                assert time.monotonic() < deadline, "workers stopped publishing"
            obs, reward, terminated, truncated, _ = vec.step_wait()
            np.testing.assert_array_equal(p.rows.obs, obs.numpy())  # the zero-copy views are those rows
            np.testing.assert_array_equal(p.rows.reward, reward.numpy())
            np.testing.assert_array_equal(p.rows.truncated, truncated.numpy())
    print(f"{peeks} peeks, {rows_read} rows verified, {mixed} caught mid-step, {retries} row re-reads")
    assert mixed > 0, "the reader never overlapped a write: the test proved nothing"


def test_killed_worker_is_restarted_with_fresh_truncated_episodes(caplog: pytest.LogCaptureFixture) -> None:
    b = 12
    rng = np.random.default_rng(3)
    with caplog.at_level(logging.INFO, logger="policy.parallel"), ShmVectorTwin(b, 2, seed=1, **KW) as vec:
        vec.reset()
        for _ in range(5):
            obs, *_ = vec.step(_actions(rng, b))
        before = obs.clone()
        episode = vec.state.episode.numpy()
        lo, hi = worker_bounds(b, 2)[1]
        old_pid = vec.worker_pids[1]
        assert old_pid is not None
        os.kill(old_pid, signal.SIGKILL)  # between steps
        obs, reward, terminated, truncated, info = vec.step(_actions(rng, b))
        assert vec.restarts == [0, 1] and _gone(old_pid)
        rebuilt = np.zeros(b, bool)
        rebuilt[lo:hi] = True
        np.testing.assert_array_equal(info["rebuilt"].numpy(), rebuilt)
        assert truncated[lo:hi].all() and not terminated[lo:hi].any() and (reward[lo:hi] == 0).all()
        np.testing.assert_array_equal(info["final_obs"][lo:hi], before[lo:hi])  # what the learner last saw
        np.testing.assert_array_equal(obs[lo:hi].numpy(), _fresh_episode_obs(vec, lo, hi, episode[lo:hi]))
        assert not info["rebuilt"][:lo].any()

        vec.step_async(_actions(rng, b))
        os.kill(vec.worker_pids[1], signal.SIGKILL)  # mid-step (or just after its reply: either must work)
        vec.step_wait()
        obs, _, _, truncated, info = vec.step(_actions(rng, b))
        assert vec.restarts[1] in (1, 2) and not info["rebuilt"][:lo].any()
        assert len(vec.error_counts()) == 1  # one fingerprint for "killed by SIGKILL"
    deaths = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(deaths) == 1 and "SIGKILL" in deaths[0].getMessage()


def test_hung_worker_is_killed_and_replaced() -> None:
    b = 8
    with ShmVectorTwin(b, 2, seed=1, hang_timeout_s=3.0, heartbeat_s=0.05, **KW) as vec:
        vec.reset()
        vec.step(np.zeros((b, 8), np.float32))
        hung = vec.worker_pids[0]
        vec.inject_fault(0, "hang")
        start = time.monotonic()
        _, _, _, truncated, info = vec.step(np.zeros((b, 8), np.float32))
        waited = time.monotonic() - start
        # On a loaded host the replacement can itself look silent once and be replaced again.
        assert vec.restarts[0] >= 1 and vec.restarts[1] == 0 and _gone(hung) and waited >= 3.0
        assert info["rebuilt"].tolist() == [True] * 4 + [False] * 4 and truncated[:4].all()
        _, _, _, _, info = vec.step(np.zeros((b, 8), np.float32))
        assert not info["rebuilt"].any()


def test_worker_errors_rebuild_instances_and_are_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    b = 8
    with caplog.at_level(logging.INFO, logger="policy.parallel"), ShmVectorTwin(b, 2, seed=1, **KW) as vec:
        vec.reset()
        pids = vec.worker_pids
        vec.inject_fault(0, "raise", 4)
        vec.inject_fault(1, "raise", 4)
        for _ in range(4):
            _, reward, _, truncated, info = vec.step(np.zeros((b, 8), np.float32))
            assert info["rebuilt"].all() and truncated.all() and (reward == 0).all()
        _, _, _, _, info = vec.step(np.zeros((b, 8), np.float32))
        assert not info["rebuilt"].any()
        assert list(vec.error_counts().values()) == [8] and vec.worker_pids == pids  # no restart needed
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "InjectedFault" in errors[0] and "Traceback" in errors[0]
    assert any("happened 8 times" in r.getMessage() for r in caplog.records)

    with ShmVectorTwin(b, 2, seed=1, max_failures=2, **KW) as vec:
        vec.reset()
        vec.inject_fault(1, "exit")
        vec.step(np.zeros((b, 8), np.float32))  # 1st failure: the worker is restarted
        vec.inject_fault(1, "raise", 2)  # the restarted worker fails its steps too
        vec.step(np.zeros((b, 8), np.float32))  # 2nd failure in a row
        with pytest.raises(WorkerError, match=r"worker 1 .* failed 3 times in a row"):
            vec.step(np.zeros((b, 8), np.float32))
        assert vec.restarts == [0, 1]


@pytest.mark.parametrize("exit_path", ["close", "exception", "keyboard_interrupt", "worker_crash", "garbage"])
def test_no_segment_or_worker_outlives_the_twin(exit_path: str) -> None:
    existing = _our_segments()
    vec = ShmVectorTwin(4, 2, seed=0, **KW)
    names, pids = vec.segment_names, vec.worker_pids
    assert all(segment_exists(n) for n in names) and _our_segments() - existing
    obs = vec.reset()  # a view into the segment, still held when the twin closes
    kept = obs.clone()
    if exit_path == "close":
        vec.close()
        vec.close()  # idempotent
    elif exit_path == "exception":
        with pytest.raises(RuntimeError, match="learner failed"), vec:
            vec.step(np.zeros((4, 8), np.float32))
            raise RuntimeError("learner failed")
    elif exit_path == "keyboard_interrupt":  # Ctrl-C while the learner waits on a worker that never answers
        # A shell starts background jobs with SIGINT ignored, and the suite inherits that: Ctrl-C must
        # raise here, as it does at a terminal.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        vec.inject_fault(0, "hang")
        vec.step_async(np.zeros((4, 8), np.float32))
        ctrl_c = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT))
        ctrl_c.start()
        start = time.monotonic()
        with pytest.raises(KeyboardInterrupt), vec:
            vec.step_wait()
        ctrl_c.join()
        signal.signal(signal.SIGINT, previous)
        assert time.monotonic() - start < 5.0  # the hung worker is killed, not waited for
    elif exit_path == "worker_crash":
        with vec:
            os.kill(pids[0], signal.SIGKILL)
            os.kill(pids[1], signal.SIGKILL)
        pids = pids + vec.worker_pids
    else:
        del vec  # no close(): the finaliser runs when the twin is collected
    assert not any(segment_exists(n) for n in names)
    assert _our_segments() == existing
    assert all(_gone(p) for p in pids)
    assert torch.equal(obs, kept)  # the view stays mapped and readable until dropped


def test_bad_arguments_get_clear_errors() -> None:
    with pytest.raises(ValueError, match="num_workers"):
        ShmVectorTwin(4, 0)
    with pytest.raises(ValueError, match="at least 2 instances"):
        ShmVectorTwin(5, 3)
    with pytest.raises(ValueError, match="fork is unsafe"):
        ShmVectorTwin(4, 2, start_method="fork")  # type: ignore[arg-type]
    with ShmVectorTwin(4, 2, **KW) as vec:
        with pytest.raises(RuntimeError, match="reset"):
            vec.step(np.zeros((4, 8), np.float32))
        vec.reset()
        with pytest.raises(ValueError, match=r"shape \(4, 8\)"):
            vec.step(np.zeros((4, 7), np.float32))
        with pytest.raises(ValueError, match="unknown fault"):
            vec.inject_fault(0, "explode")
        vec.step_async(np.zeros((4, 8), np.float32))
        with pytest.raises(RuntimeError, match="in flight"):
            vec.reset()
        vec.step_wait()
    with pytest.raises(RuntimeError, match="closed"):
        vec.reset()

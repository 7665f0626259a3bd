"""``greentwin retrain`` hands its fine-tuning to a launcher: a failing one leaves a failed,
resumable stage with a one-line reason; torchrun with two gloo ranks on CPU makes the candidate."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from app import registry
from app.core.config import DEFAULT_POLICY_DIR
from app.core.db import make_engine, make_session_factory
from app.retraining import EXIT_ERROR
from app.retraining.launch import command
from app.retraining.pipeline import RetrainOptions, run_retrain
from app.retraining.runs import RunDir, last_run
from policy.checkpoint import read_meta
from tests.app.retraining.test_retrain import TINY, url  # noqa: F401 - the seeded window's database fixture

REPO = Path(__file__).resolve().parents[3]
TORCHRUN = f"{sys.executable} -m torch.distributed.run --standalone --nproc-per-node 2"


def _cli(url: str, root: Path, *extra: str) -> subprocess.CompletedProcess[str]:  # noqa: F811
    budget = ("--days", "3", "--iterations", "1", "--envs", "8", "--steps", "16", "--seed", "0")
    env = {**os.environ, "GREENTWIN_DATABASE_URL": url, "GREENTWIN_RETRAIN_LAUNCHER": "",
           "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "app.cli", "retrain", "--dir", str(root), *budget, *extra],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)


def test_the_launcher_is_a_prefix_of_the_worker_module() -> None:
    assert command("torchrun --nproc-per-node 4", Path("/r/job.json")) == [
        "torchrun", "--nproc-per-node", "4", "-m", "app.cli", "retrain-worker", "/r/job.json"]
    with pytest.raises(ValueError, match="empty launcher"):
        command("  ", Path("job.json"))


@pytest.mark.slow
def test_a_failed_launch_resumes_under_torchrun_on_two_ranks(url: str, tmp_path: Path,  # noqa: F811
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """About 40 s on two cores: the window and calibration once, a failing launcher, two ranks."""
    root = tmp_path / "retrain"
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    first = run_retrain(sessions, DEFAULT_POLICY_DIR, root,
                        RetrainOptions(**{**TINY.__dict__, "stop_after": "calibrate"}), lambda *a, **k: None)
    assert first.code == EXIT_ERROR

    # The command with a launcher that fails: exit 1, one line that says so, no traceback anywhere.
    failed = _cli(url, root, "--launcher", "false")
    assert failed.returncode == EXIT_ERROR, failed.stderr[-2000:]
    end = json.loads(failed.stdout.strip().splitlines()[-1])
    assert end["event"] == "end" and end["status"] == "failed"
    assert end["reason"] == ("finetune: LaunchFailed: launcher 'false' exited with code 1; "
                             "last output: no output")
    assert "Traceback" not in failed.stdout + failed.stderr
    run = RunDir.current(root)
    assert run is not None and run.run_id == first.run_id and run.done() == ["window", "calibrate"]
    assert run.info()["attempts"] == 2  # the failed start counts towards abandoning the run
    row = last_run(sessions)
    assert row is not None and row["status"] == "failed" and row["reason"] == end["reason"]
    job = json.loads((run.path / "finetune" / "job.json").read_text())
    assert job["seed"] == 0 and len(job["start_states"]) == TINY.start_states and job["demos"]

    # The rerun continues at the fine-tuning, now under torchrun: two gloo ranks on the CPU.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    events: list[dict[str, Any]] = []
    two = RetrainOptions(**{**TINY.__dict__, "stop_after": "finetune", "launcher": TORCHRUN})
    out = run_retrain(sessions, DEFAULT_POLICY_DIR, root, two,
                      lambda e, **f: events.append({"event": e, **f}))
    assert out.run_id == first.run_id and out.reason.startswith("stopped after stage finetune"), out.reason
    tuned = run.result("finetune")
    assert tuned is not None and tuned["ranks"] == 2 and tuned["launcher"] == TORCHRUN
    members = [e for e in events if e["event"] == "member"]  # rank 0's progress, relayed
    assert [(e["done"], e["ranks"]) for e in members] == [(k + 1, 2) for k in range(tuned["members"])]
    assert [e["candidate"] for e in events if e["event"] == "finetuned"] == [tuned["candidate"]]
    info = registry.get(sessions, tuned["candidate"])
    assert info is not None and info.status == "candidate" \
        and info.parent == registry.manifest_version(DEFAULT_POLICY_DIR)
    for k in range(tuned["members"]):
        meta = read_meta(Path(tuned["directory"]) / f"member_{k}")
        assert meta["metrics"]["world_size"] == 2 and meta["seed"] == k
        assert len(meta["twin_config"]["start_states"]) == TINY.start_states
        src = DEFAULT_POLICY_DIR / meta["metrics"]["finetuned_from"]["member"] / "weights.pt"
        before = torch.load(src, weights_only=True)
        after = torch.load(Path(tuned["directory"]) / f"member_{k}" / "weights.pt", weights_only=True)
        assert not torch.equal(before["actor_head.weight"], after["actor_head.weight"])  # it trained
    engine.dispose()

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

import policy.ensemble_training as ensemble_mod
from policy.checkpoint import CheckpointError, read_ensemble_manifest
from policy.config import PPOConfig
from policy.ensemble import Ensemble, StackedMembers, forward_members, load_ensemble
from policy.ensemble_training import train_ensemble
from policy.networks import ActorCritic
from safety.report import Decision
from twin import GreenhouseTwin, ObservationSpec

ZONES = 6
# About a second per member: 2 iterations of 16 x 8 env steps and a token BC warm start.
CFG = PPOConfig.preset("tiny", num_envs=16, num_steps=8, total_steps=16 * 8 * 2, bc_demo_steps=8,
                       bc_pretrain_updates=10, bc_decay_steps=1000)



def untrained(seed: int, zones: int = ZONES) -> ActorCritic:
    torch.manual_seed(seed)
    agent = ActorCritic(ObservationSpec(zones).dim, zones, hidden=16)
    with torch.no_grad():
        agent.actor_head.weight.normal_(0.0, 1.0)
    return agent


def observations(n: int) -> np.ndarray:
    return np.asarray(GreenhouseTwin(num_instances=n, seed=3).reset(), dtype=np.float32)


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_propose_shapes_bounds_and_determinism() -> None:
    ens = Ensemble([untrained(k) for k in range(3)], "test")
    obs = observations(5)
    p = ens.propose(obs)
    assert p.shape == (3, 5, ZONES + 2) and p.dtype == np.float32
    assert np.array_equal(p, ens.propose(obs))
    assert np.isin(p[..., :ZONES], (0.0, 1.0)).all()
    assert (p[..., ZONES:] >= 0.0).all() and (p[..., ZONES:] <= 100.0).all()
    single = ens.propose(obs[2])  # a batch of one may round differently in the last bit
    assert single.shape == (3, ZONES + 2) and np.allclose(single, p[:, 2], rtol=1e-5, atol=1e-4)
    assert np.array_equal(ens.propose(torch.from_numpy(obs)), p)
    assert not np.array_equal(p[0], p[1])  # members differ
    with pytest.raises(ValueError, match="shape"):
        ens.propose(obs[:, :-1])


def test_decide_votes_over_the_members() -> None:
    ens = Ensemble([untrained(k) for k in range(3)], "test")
    obs = observations(1)[0]
    d = ens.decide(obs)
    assert isinstance(d, Decision) and d.action.shape == (ZONES + 2,)
    assert d.used_members == (0, 1, 2) and 0.0 <= d.disagreement <= 1.0
    p = ens.propose(obs)
    assert np.array_equal(d.action[ZONES:], np.median(p[:, ZONES:], axis=0))
    with pytest.raises(ValueError, match="one observation"):
        ens.decide(observations(2))


def test_members_run_side_by_side_as_each_runs_alone() -> None:
    members = [untrained(k) for k in range(3)]
    x = torch.from_numpy(observations(5))
    with torch.no_grad():
        got = forward_members(members, x)
        assert got.shape == (3, 5, ZONES + 4)
        for k, m in enumerate(members):  # the same layers, the same kernels on the same shapes
            torch.testing.assert_close(got[k], m(x), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="architecture"):
        StackedMembers([untrained(0), ActorCritic(ObservationSpec(ZONES).dim, ZONES, hidden=8)])


def test_members_must_share_a_layout() -> None:
    with pytest.raises(ValueError, match="disagree"):
        Ensemble([untrained(0), untrained(1, zones=4)], "test")
    with pytest.raises(ValueError, match="at least one"):
        Ensemble([], "test")


def test_members_train_side_by_side_as_they_train_in_turn(tmp_path: Path) -> None:
    """Two worker processes each train a member; every member's weights equal the in-process
    training of that member at the workers' thread count, and the manifest lists both."""
    parallel = train_ensemble(CFG, 2, tmp_path / "side", progress=False, jobs=2)
    assert [m.status for m in parallel.members] == ["trained", "trained"]
    threads = parallel.members[0].metrics["torch_threads"]
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        in_turn = train_ensemble(CFG, 2, tmp_path / "turn", progress=False, jobs=1)
    finally:
        torch.set_num_threads(before)
    assert in_turn.policy_version == parallel.policy_version
    assert read_ensemble_manifest(tmp_path / "side")["policy_version"] == parallel.policy_version
    for k in range(2):
        a = torch.load(tmp_path / "side" / f"member_{k}" / "weights.pt", weights_only=True)
        b = torch.load(tmp_path / "turn" / f"member_{k}" / "weights.pt", weights_only=True)
        assert all(torch.equal(a[key], b[key]) for key in a), k
    again = train_ensemble(CFG, 2, tmp_path / "side", progress=False, jobs=2)
    assert [m.status for m in again.members] == ["skipped", "skipped"]
    with pytest.raises(ValueError, match="CPU"):
        train_ensemble(CFG.replace(device="cuda"), 2, tmp_path / "gpu", progress=False, jobs=2)


def test_resume_skips_finished_members_and_loads_as_an_ensemble(tmp_path: Path) -> None:
    first = train_ensemble(CFG, 1, tmp_path, progress=False, eval_steps=4, eval_envs=4)
    assert [m.status for m in first.members] == ["trained"]
    w0 = tmp_path / "member_0" / "weights.pt"
    digest, mtime = file_digest(w0), w0.stat().st_mtime_ns
    assert read_ensemble_manifest(tmp_path)["policy_version"] == first.policy_version

    second = train_ensemble(CFG, 2, tmp_path, progress=False)
    assert [m.status for m in second.members] == ["skipped", "trained"]
    assert [m.seed for m in second.members] == [CFG.seed, CFG.seed + 1]
    assert file_digest(w0) == digest and w0.stat().st_mtime_ns == mtime
    assert second.policy_version != first.policy_version
    assert not (tmp_path / "member_1" / "train_state.pt").exists()

    ens = load_ensemble(tmp_path, expected_zones=ZONES)
    assert len(ens) == 2 and ens.policy_version == second.policy_version
    assert ens.metas[0]["metrics"]["eval"]["steps"] == 4.0
    p = ens.propose(observations(4))
    assert p.shape == (2, 4, ZONES + 2) and not np.array_equal(p[0], p[1])

    third = train_ensemble(CFG, 2, tmp_path, progress=False)
    assert [m.status for m in third.members] == ["skipped", "skipped"]
    assert third.policy_version == second.policy_version  # same weights, same version

    with pytest.raises(CheckpointError, match="another config"):
        train_ensemble(CFG.replace(lr=1e-4), 2, tmp_path, progress=False)
    with pytest.raises(CheckpointError, match="zones"):
        load_ensemble(tmp_path, expected_zones=4)


class Killed(Exception):
    """Stands in for the process being killed right after a snapshot hit the disk."""


def test_killed_member_resumes_from_its_snapshot_bit_identically(tmp_path: Path, monkeypatch) -> None:
    cfg = CFG.replace(total_steps=16 * 8 * 3)
    reference = train_ensemble(cfg, 1, tmp_path / "ref", progress=False, snapshot_every=1)

    real_save = ensemble_mod.atomic_torch_save

    def save_then_die(obj: object, path: Path) -> None:
        real_save(obj, path)
        raise Killed

    monkeypatch.setattr(ensemble_mod, "atomic_torch_save", save_then_die)
    with pytest.raises(Killed):
        train_ensemble(cfg, 1, tmp_path / "run", progress=False, snapshot_every=1)
    member = tmp_path / "run" / "member_0"
    assert (member / "train_state.pt").exists() and not (member / "meta.json").exists()

    monkeypatch.undo()
    resumed = train_ensemble(cfg, 1, tmp_path / "run", progress=False, snapshot_every=1)
    assert resumed.members[0].status == "resumed"
    assert not (member / "train_state.pt").exists()
    assert file_digest(member / "weights.pt") == file_digest(tmp_path / "ref" / "member_0" / "weights.pt")
    assert reference.members[0].metrics is not None and resumed.members[0].metrics is not None
    ref_train, res_train = reference.members[0].metrics["train"], resumed.members[0].metrics["train"]
    assert res_train["iteration"] == 3 and res_train["env_steps"] == ref_train["env_steps"]
    assert res_train["mean_reward"] == ref_train["mean_reward"]

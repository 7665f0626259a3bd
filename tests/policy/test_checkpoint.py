from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
import torch

from policy.checkpoint import (
    CheckpointError,
    build_meta,
    load_member,
    policy_version,
    run_hash,
    save_member,
)
from policy.config import PPOConfig
from policy.networks import ActorCritic
from twin import TWIN_VERSION, ObservationSpec
from twin.spec import CROP_STATE, OBS_VERSION

ZONES = 6
CFG = PPOConfig.preset("tiny")


def make_agent(seed: int = 0, hidden: int = 32) -> ActorCritic:
    """An untrained agent with non-trivial normaliser statistics and head, so actions vary with obs."""
    torch.manual_seed(seed)
    dim = ObservationSpec(ZONES).dim
    agent = ActorCritic(dim, ZONES, hidden=hidden)
    agent.update_obs_stats(torch.randn(256, dim) * 5 + 3)
    with torch.no_grad():
        agent.actor_head.weight.normal_(0.0, 1.0)
    return agent


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, ActorCritic]:
    agent = make_agent()
    d = save_member(tmp_path / "member_0", agent,
                    build_meta(CFG, seed=7, metrics={"eval": {"mean_reward": 0.5}}))
    return d, agent


def edit_meta(d: Path, **changes: object) -> None:
    meta = json.loads((d / "meta.json").read_text())
    meta.update(changes)
    (d / "meta.json").write_text(json.dumps(meta))


def test_round_trip_gives_same_actions_and_provenance(saved: tuple[Path, ActorCritic]) -> None:
    d, agent = saved
    loaded, meta = load_member(d, expected_zones=ZONES)
    obs = torch.randn(64, agent.obs_dim) * 5 + 3
    assert torch.equal(agent.act(obs), loaded.act(obs))
    assert not loaded.training
    for key, value in agent.state_dict().items():
        assert torch.equal(value, loaded.state_dict()[key]), key
    assert meta["architecture"] == {"obs_dim": agent.obs_dim, "zones": ZONES, "hidden": 32,
                                    "shared_torso": False}
    assert meta["twin_version"] == TWIN_VERSION and meta["seed"] == 7
    assert meta["observation"] == ObservationSpec(ZONES).to_dict()
    assert meta["train_config"]["num_envs"] == CFG.num_envs
    assert meta["metrics"] == {"eval": {"mean_reward": 0.5}}
    assert datetime.fromisoformat(meta["created_at"]).utcoffset() is not None
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", meta["git_commit"])


def test_shared_torso_architecture_round_trips(tmp_path: Path) -> None:
    agent = ActorCritic(ObservationSpec(ZONES).dim, ZONES, hidden=16, shared_torso=True)
    loaded, meta = load_member(save_member(tmp_path, agent, build_meta(CFG, seed=0)))
    assert meta["architecture"]["shared_torso"] and loaded.actor_torso is loaded.critic_torso


def test_other_zone_count_is_refused(saved: tuple[Path, ActorCritic]) -> None:
    with pytest.raises(CheckpointError, match="zones"):
        load_member(saved[0], expected_zones=4)


def test_shifted_observation_layout_is_refused_naming_the_index(saved: tuple[Path, ActorCritic]) -> None:
    d, _ = saved
    obs = ObservationSpec(ZONES).to_dict()
    obs["names"][6], obs["names"][7] = obs["names"][7], obs["names"][6]
    edit_meta(d, observation=obs)
    with pytest.raises(CheckpointError, match=r"index 6.*'target_low\[1\]'.*'target_low\[0\]'"):
        load_member(d, expected_zones=ZONES)


def test_a_layout_v4_checkpoint_is_refused_naming_the_layout_version(saved: tuple[Path, ActorCritic]) -> None:
    """v4 had no crop-state features: a network trained on it reads shifted inputs on v5."""
    d, _ = saved
    now = ObservationSpec(ZONES).to_dict()
    kept = [i for i, name in enumerate(now["names"]) if name not in CROP_STATE]
    v4 = dict(now, version="4", **{k: [now[k][i] for i in kept] for k in ("names", "units", "low", "high")})
    assert len(v4["names"]) == 149 and OBS_VERSION == "5"
    edit_meta(d, observation=v4, architecture={"obs_dim": 149, "zones": ZONES, "hidden": 32,
                                               "shared_torso": False})
    with pytest.raises(CheckpointError, match=r"layout version '4'.*layout version '5'"):
        load_member(d, expected_zones=ZONES)


def test_other_twin_version_is_refused_naming_both(saved: tuple[Path, ActorCritic]) -> None:
    d, _ = saved
    edit_meta(d, twin_version="0.9.0")
    with pytest.raises(CheckpointError, match=rf"twin version.*'0\.9\.0'.*'{re.escape(TWIN_VERSION)}'"):
        load_member(d, expected_zones=ZONES)


def test_replaced_or_missing_files_are_refused(saved: tuple[Path, ActorCritic], tmp_path: Path) -> None:
    d, _ = saved
    torch.save(make_agent(seed=1).state_dict(), d / "weights.pt")
    with pytest.raises(CheckpointError, match="sha256"):
        load_member(d)
    with pytest.raises(CheckpointError, match="meta.json missing"):
        load_member(tmp_path / "nowhere")


def test_run_hash_ignores_device_but_not_training_or_twin_settings() -> None:
    assert run_hash(CFG) == run_hash(CFG.replace(device="cuda"))
    assert run_hash(CFG) != run_hash(CFG.replace(seed=1))
    assert run_hash(CFG) != run_hash(CFG.replace(twin_overrides=(("zones", 4),)))


def test_policy_version_is_dated_and_content_addressed() -> None:
    v = policy_version(["a" * 64, "b" * 64], "2025-03-04T05:06:07+00:00")
    assert re.fullmatch(r"ppo-20250304-[0-9a-f]{8}", v)
    assert v != policy_version(["b" * 64, "a" * 64], "2025-03-04T05:06:07+00:00")

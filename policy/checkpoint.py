"""On-disk policy checkpoints: one directory per ensemble member, one manifest per ensemble.

A member directory holds ``weights.pt`` (the ActorCritic state_dict, normaliser buffers
included, written with ``torch.save`` and read with ``weights_only=True`` so a checkpoint
cannot execute code) and ``meta.json``: the observation/action layouts, twin version and
config, training config, seed, git commit, creation time, metrics and the architecture
needed to rebuild the module. Loading compares the stored layout and twin version with the
running code and refuses a mismatch with a :class:`CheckpointError` naming the difference,
because a policy fed a shifted observation vector acts confidently and wrongly.

Ensemble layout::

    <dir>/ensemble.json        members, created_at, policy_version
    <dir>/member_<k>/weights.pt
    <dir>/member_<k>/meta.json
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch

from policy.config import PPOConfig
from policy.networks import ActorCritic
from twin import TWIN_VERSION
from twin.config import TwinConfig
from twin.spec import ActionSpec, ObservationSpec

CHECKPOINT_FORMAT = 1
WEIGHTS_FILE = "weights.pt"
META_FILE = "meta.json"
ENSEMBLE_FILE = "ensemble.json"
REPO_ROOT = Path(__file__).resolve().parents[1]


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, or was trained for another twin or observation layout."""


def member_dir(ensemble_dir: str | Path, k: int) -> Path:
    """Directory of member ``k`` inside an ensemble directory."""
    return Path(ensemble_dir) / f"member_{k}"


def utc_now() -> str:
    """ISO-8601 UTC timestamp with second precision (what every record stores)."""
    return datetime.now(UTC).replace(microsecond=0).isoformat()


def git_commit() -> str:
    """HEAD of the source tree the policy was trained from, or 'unknown' outside a git checkout."""
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=5, check=True)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() or "unknown"


def sha256_file(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def config_to_dict(cfg: PPOConfig) -> dict[str, Any]:
    """PPOConfig as JSON-ready data (``twin_overrides`` becomes a list of pairs; a dataclass value
    inside one, such as the twin's start states, becomes its dict)."""
    d = dataclasses.asdict(cfg)
    d["twin_overrides"] = [list(kv) for kv in d["twin_overrides"]]
    return d


def twin_config_of(cfg: PPOConfig) -> TwinConfig:
    """The TwinConfig a PPOConfig trains in (without building a twin)."""
    return TwinConfig.from_overrides(**cfg.twin_kwargs())


def run_hash(cfg: PPOConfig) -> str:
    """Identity of a training run for resuming: training config (minus device and workers), twin config and
    version.

    The device, the number of twin worker processes and the validation settings are left out: a
    run started on a GPU can be finished on a CPU, with or without workers; validation only
    watches the run (and hashes stay those of older runs).
    """
    d = config_to_dict(cfg)
    for key in ("device", "workers", "validate_every", "validation_scenarios", "validation_days"):
        d.pop(key)
    if not d.get("residual_lamp_logit"):  # runs from before the lamp switch keep their hashes
        d.pop("residual_lamp_logit", None)
    if d.get("prior_kl_to") == "served":  # the leash's target before it could be chosen
        d.pop("prior_kl_to")
    for key, default in (("freeze_obs_norm", False), ("fixed_reward_scale", False), ("shaping", "none"),
                         ("lamp_torso", False), ("learn", "all")):
        if d.get(key) == default:  # nor those from before these switches
            d.pop(key, None)
    if not d.get("lamp_demo_files"):  # nor those from before the hindsight lamp demonstrations
        d.pop("lamp_demo_files", None)
        d.pop("lamp_bc_updates", None)
    payload = {"train": d, "twin": twin_config_of(cfg).config_hash(), "twin_version": TWIN_VERSION}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def architecture(agent: ActorCritic) -> dict[str, Any]:
    """Constructor arguments of ``agent``, read off the module so they cannot disagree with the weights."""
    arch = {"obs_dim": agent.obs_dim, "zones": agent.zones, "hidden": agent.actor_head.in_features,
            "shared_torso": agent.actor_torso is agent.critic_torso}
    if agent.lamp_torso is not None:  # members without one keep the meta (and hashes) they had
        arch["lamp_torso"] = True
    return arch


def build_meta(cfg: PPOConfig, *, seed: int, member: int = 0, metrics: dict[str, Any] | None = None,
               zones: int | None = None) -> dict[str, Any]:
    """Provenance of a member trained with ``cfg`` (``cfg.seed`` is the run's base seed)."""
    twin_cfg = twin_config_of(cfg)
    z = twin_cfg.zones if zones is None else zones
    return {
        "format": CHECKPOINT_FORMAT,
        "observation": ObservationSpec(z).to_dict(),
        "action": ActionSpec(z).to_dict(),
        "twin_version": TWIN_VERSION,
        "twin_config_hash": twin_cfg.config_hash(),
        "twin_config": twin_cfg.to_dict(),
        "train_config": config_to_dict(cfg),
        "run_hash": run_hash(cfg),
        "seed": seed,
        "member": member,
        "git_commit": git_commit(),
        "created_at": utc_now(),
        "metrics": metrics,
    }


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write via a temporary file and rename, so a kill mid-write never leaves a torn file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_member(directory: str | Path, agent: ActorCritic, meta: dict[str, Any]) -> Path:
    """Write ``weights.pt`` then ``meta.json`` (the meta is the commit marker: no meta, no member)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().cpu() for k, v in agent.state_dict().items()}
    atomic_torch_save(state, d / WEIGHTS_FILE)
    full = {**meta, "architecture": architecture(agent), "weights_sha256": sha256_file(d / WEIGHTS_FILE)}
    atomic_write_bytes(d / META_FILE, (json.dumps(full, indent=2, sort_keys=True) + "\n").encode())
    return d


def read_meta(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / META_FILE
    try:
        meta: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"no checkpoint at {Path(directory)} ({META_FILE} missing)") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    return meta


def check_compatible(meta: dict[str, Any], zones: int) -> None:
    """Raise CheckpointError naming the first way ``meta`` differs from the running twin's layout."""
    if meta.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"checkpoint format {meta.get('format')!r} is not supported "
                              f"(this code reads format {CHECKPOINT_FORMAT})")
    if meta.get("twin_version") != TWIN_VERSION:
        raise CheckpointError("twin version differs: checkpoint was trained on twin "
                              f"{meta.get('twin_version')!r}, this code runs twin {TWIN_VERSION!r}")
    try:
        ObservationSpec(zones).check_compatible(meta.get("observation") or {})
    except ValueError as exc:
        raise CheckpointError(str(exc)) from exc
    names = (meta.get("action") or {}).get("names")
    if names != list(ActionSpec(zones).names):
        raise CheckpointError(f"action layout differs: checkpoint has {names!r}, twin has "
                              f"{list(ActionSpec(zones).names)!r}")
    arch = meta.get("architecture") or {}
    if arch.get("obs_dim") != ObservationSpec(zones).dim or arch.get("zones") != zones:
        raise CheckpointError(f"network shape differs: checkpoint has obs_dim={arch.get('obs_dim')!r}, "
                              f"zones={arch.get('zones')!r}; twin has obs_dim={ObservationSpec(zones).dim}, "
                              f"zones={zones}")


def load_member(directory: str | Path, *, expected_zones: int | None = None,
                map_location: str | torch.device = "cpu") -> tuple[ActorCritic, dict[str, Any]]:
    """Rebuild a member in eval mode after checking it fits this twin; returns (agent, meta).

    ``expected_zones`` is the zone count of the greenhouse it will serve; None accepts the
    stored count but still checks the layout of that count against the running code.
    """
    d = Path(directory)
    meta = read_meta(d)
    zones = (expected_zones if expected_zones is not None
             else int((meta.get("observation") or {}).get("zones", -1)))
    check_compatible(meta, zones)
    weights = d / WEIGHTS_FILE
    if not weights.exists():
        raise CheckpointError(f"{weights} is missing")
    if meta.get("weights_sha256") and sha256_file(weights) != meta["weights_sha256"]:
        raise CheckpointError(f"{weights} does not match the sha256 in {META_FILE} (corrupt or replaced)")
    arch = meta["architecture"]
    agent = ActorCritic(arch["obs_dim"], arch["zones"], arch["hidden"], arch["shared_torso"],
                        lamp_torso=bool(arch.get("lamp_torso", False)))
    try:
        state = torch.load(weights, map_location=map_location, weights_only=True)
        agent.load_state_dict(state)
    except (RuntimeError, ValueError, OSError) as exc:
        raise CheckpointError(f"cannot load {weights}: {exc}") from exc
    return agent.to(map_location).eval(), meta


def policy_version(weight_hashes: Sequence[str], when: str | None = None) -> str:
    """'ppo-<YYYYMMDD>-<hash8>': the date plus a content hash of the members' weights, in order."""
    day = (datetime.fromisoformat(when) if when else datetime.now(UTC)).strftime("%Y%m%d")
    digest = hashlib.sha256("".join(weight_hashes).encode()).hexdigest()[:8]
    return f"ppo-{day}-{digest}"


def write_ensemble_manifest(directory: str | Path, member_dirs: Sequence[str | Path],
                            extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """(Re)write ``ensemble.json`` for the finished members in ``member_dirs``; returns the manifest.

    If the manifest already lists exactly these weights, its ``created_at`` and
    ``policy_version`` are kept: the same weights must keep the same version on a rerun.
    """
    d = Path(directory)
    metas = [read_meta(m) for m in member_dirs]
    entries = [{"dir": Path(m).name, "seed": meta["seed"], "weights_sha256": meta["weights_sha256"]}
               for m, meta in zip(member_dirs, metas, strict=True)]
    created = utc_now()
    version = policy_version([m["weights_sha256"] for m in metas], created)
    if (d / ENSEMBLE_FILE).exists():
        try:
            old = json.loads((d / ENSEMBLE_FILE).read_text())
        except json.JSONDecodeError:
            old = {}
        if old.get("members") == entries:
            created, version = old.get("created_at", created), old.get("policy_version", version)
    manifest = {"format": CHECKPOINT_FORMAT, "policy_version": version, "created_at": created,
                "members": entries, **(extra or {})}
    atomic_write_bytes(d / ENSEMBLE_FILE, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode())
    return manifest


def read_ensemble_manifest(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / ENSEMBLE_FILE
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CheckpointError(f"no ensemble at {Path(directory)} ({ENSEMBLE_FILE} missing)") from exc
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path} is not valid JSON: {exc}") from exc
    if not manifest.get("members"):
        raise CheckpointError(f"{path} lists no members")
    return manifest

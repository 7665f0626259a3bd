"""The policy versions in force and the shipped ensemble's evaluation metrics (admins).

Read from the ensemble directory the service loaded (``ensemble.json`` and each member's
``meta.json``) and from the controllers: a greenhouse whose zone count the ensemble does not fit
runs the threshold expert, and this says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from app.api.deps import AdminUser, RuntimeDep, get_current_user
from app.api.instants import Instant

router = APIRouter(prefix="/api/policy", tags=["policy"], dependencies=[Depends(get_current_user)])


class PolicyInForce(BaseModel):
    policy_version: str
    greenhouses: list[str]


class PolicyMember(BaseModel):
    member: int
    seed: int | None
    weights_sha256: str
    created_at: Instant | None
    git_commit: str | None
    zones: int | None
    eval_mean_reward: float | None
    eval_steps: float | None
    eval_envs: float | None
    eval_terminations: float | None
    train_mean_reward: float | None
    train_env_steps: float | None
    train_seconds: float | None


class PolicyEnsemble(BaseModel):
    policy_version: str
    created_at: Instant | None
    run_hash: str | None
    members_requested: int | None
    members: list[PolicyMember]


class RegistryRow(BaseModel):
    """A policy registry row (:mod:`app.registry`)."""

    version: str
    parent: str | None
    status: str
    directory: str
    created_at: Instant
    promoted_at: Instant | None
    promoted_by: str | None
    note: str
    data_from: Instant | None
    data_to: Instant | None
    twin_version: str | None
    config_hash: str | None
    git_commit: str | None
    metrics: dict[str, Any] | None
    """The gate's verdict and numbers per suite and controller."""
    calibration: dict[str, Any] | None
    """Fit error and distribution distance per greenhouse, before and after calibration."""


class RetrainRunSummary(BaseModel):
    """A `greentwin retrain` run: its outcome and, per stage, what it found."""

    id: str
    status: str
    started_at: Instant
    finished_at: Instant | None
    incumbent: str | None
    candidate: str | None
    reason: str
    summary: dict[str, Any]


class PolicyOverview(BaseModel):
    in_force: list[PolicyInForce]
    ensemble: PolicyEnsemble | None
    problem: str | None
    """Why the ensemble could not be read (missing, malformed), when it could not."""
    registry: list[RegistryRow] = []
    """The registered versions, newest first."""
    last_retrain: RetrainRunSummary | None = None
    """The newest `greentwin retrain` run."""


def _num(d: dict[str, Any], *path: str) -> float | None:
    for key in path:
        d = d.get(key) if isinstance(d, dict) else None  # type: ignore[assignment]
    return float(d) if isinstance(d, int | float) else None  # type: ignore[arg-type]


def _member(folder: Path, entry: dict[str, Any], index: int) -> PolicyMember:
    meta: dict[str, Any] = json.loads((folder / str(entry["dir"]) / "meta.json").read_text(encoding="utf-8"))
    return PolicyMember(
        member=int(meta.get("member", index)), seed=entry.get("seed"),
        weights_sha256=str(entry["weights_sha256"]),
        created_at=meta.get("created_at"), git_commit=meta.get("git_commit"),
        zones=(meta.get("architecture") or {}).get("zones"),
        eval_mean_reward=_num(meta, "metrics", "eval", "mean_reward"),
        eval_steps=_num(meta, "metrics", "eval", "steps"),
        eval_envs=_num(meta, "metrics", "eval", "num_envs"),
        eval_terminations=_num(meta, "metrics", "eval", "terminations"),
        train_mean_reward=_num(meta, "metrics", "train", "mean_reward"),
        train_env_steps=_num(meta, "metrics", "train", "env_steps"),
        train_seconds=_num(meta, "metrics", "train_seconds"))


def read_ensemble(folder: Path) -> PolicyEnsemble:
    """The ensemble's manifest and its members' metadata; OSError/ValueError/KeyError when unreadable."""
    doc: dict[str, Any] = json.loads((folder / "ensemble.json").read_text(encoding="utf-8"))
    return PolicyEnsemble(policy_version=str(doc["policy_version"]), created_at=doc.get("created_at"),
                          run_hash=doc.get("run_hash"), members_requested=doc.get("members_requested"),
                          members=[_member(folder, m, i) for i, m in enumerate(doc["members"])])


@router.get("")
def policy_overview(runtime: RuntimeDep, user: AdminUser) -> PolicyOverview:
    """Which policy version runs each greenhouse, and the ensemble's evaluation metrics per member."""
    by_version: dict[str, list[str]] = {}
    for gh, ctl in sorted(runtime.controllers.items()):
        by_version.setdefault(ctl.proposer.policy_version, []).append(gh)
    ensemble, problem = None, None
    try:
        ensemble = read_ensemble(Path(getattr(runtime, "policy_dir", runtime.settings.policy_dir)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        problem = f"no readable ensemble in the policy directory ({exc.__class__.__name__})"
    rows, last = _registry(runtime)
    return PolicyOverview(in_force=[PolicyInForce(policy_version=v, greenhouses=g)
                                    for v, g in by_version.items()],
                          ensemble=ensemble, problem=problem, registry=rows, last_retrain=last)


def _registry(runtime: Any) -> tuple[list[RegistryRow], RetrainRunSummary | None]:
    """Registry rows and the last retraining run; empty when the database cannot say (the page still
    shows)."""
    from app.registry import list_versions
    from app.retraining.runs import last_run

    try:
        last = last_run(runtime.sessions)
        return ([RegistryRow(**v.as_dict()) for v in list_versions(runtime.sessions)],
                None if last is None else RetrainRunSummary(**last))
    except Exception:  # noqa: BLE001 - an unreadable registry must not take the policy page down
        return [], None

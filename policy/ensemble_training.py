"""Training K independently seeded PPO members, resumably (serving them: :mod:`policy.ensemble`).

Training is resumable at two levels, because full runs take hours and get killed:

* finished members (``member_<k>/meta.json`` with the same run hash) are skipped;
* the member in progress writes ``member_<k>/train_state.pt`` every ``snapshot_every``
  iterations: weights with normaliser, Adam moments, iteration and env-step counters, RNG
  states, reward-scaler statistics and the twin's in-flight episodes, so a rerun continues
  the same trajectory (bit-identical on CPU for the same device and thread count; after a
  device change the RNG streams start fresh).

Members are independent, so on a CPU with many cores ``jobs`` of them train at once, each in
its own process on its share of the cores (a member's 4,096-row minibatches keep a few threads
busy, not sixteen). The weights depend on the torch thread count, which each member's metrics
record, so the same seed on the same machine with the same ``jobs`` gives the same ensemble bit
for bit.
"""

from __future__ import annotations

import time
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, NamedTuple

import torch
from tqdm import tqdm  # type: ignore[import-untyped]

from policy.checkpoint import (
    CheckpointError,
    atomic_torch_save,
    build_meta,
    member_dir,
    read_meta,
    run_hash,
    save_member,
    write_ensemble_manifest,
)
from policy.config import PPOConfig
from policy.networks import ActorCritic
from policy.ppo import IterationMetrics, TrainSnapshot, make_twin, train
from policy.processes import spawn_pool, usable_cores
from policy.validation import BestCheckpoint, validate, validation_suite

TRAIN_STATE_FILE = "train_state.pt"


class MemberSummary(NamedTuple):
    """What happened to one member in a :func:`train_ensemble` call."""

    member: int
    seed: int
    directory: Path
    status: str
    """'trained' (from scratch), 'resumed' (from a mid-training snapshot) or 'skipped' (already done)."""
    metrics: dict[str, Any] | None
    seconds: float


class EnsembleResult(NamedTuple):
    directory: Path
    policy_version: str
    members: list[MemberSummary]


@torch.no_grad()
def evaluate(agent: ActorCritic, cfg: PPOConfig, steps: int, num_envs: int = 32, seed: int = 10_007
             ) -> dict[str, float]:
    """Deterministic-policy mean reward and terminations on a twin seeded apart from training."""
    twin = make_twin(cfg, num_instances=num_envs, seed=seed)
    obs = twin.reset()
    total, terminations = 0.0, 0
    for _ in range(steps):
        obs, reward, terminated, _, _ = twin.step(agent.act(obs))
        total += float(reward.mean())
        terminations += int(terminated.sum())
    return {"mean_reward": total / steps, "terminations": float(terminations), "steps": float(steps),
            "num_envs": float(num_envs)}


def _check_same_run(path: Path, stored_hash: str | None, expected: str) -> None:
    if stored_hash != expected:
        raise CheckpointError(f"{path} belongs to a run with another config (run hash {stored_hash!r}, "
                              f"this run {expected!r}); use another output directory or remove it")


def _load_snapshot(path: Path, expected_hash: str, device: str) -> TrainSnapshot | None:
    if not path.exists():
        return None
    try:
        blob = torch.load(path, map_location=device, weights_only=True)
    except (RuntimeError, OSError, EOFError) as exc:
        raise CheckpointError(f"cannot read training snapshot {path}: {exc}; delete it to restart the "
                              "member") from exc
    _check_same_run(path, blob.get("run_hash"), expected_hash)
    snapshot: TrainSnapshot = blob["snapshot"]
    return snapshot


def default_jobs(cfg: PPOConfig, members: int) -> int:
    """Members trained at once on a plain CPU run: one per two cores, so each keeps two threads.

    Measured on two cores, two members on one thread each trained the five-member ensemble in
    47 s against 49 s for members in turn on both threads: a member's second thread is nearly
    as good as a second process there, so two cores train in turn (and keep the two-thread
    weights). A GPU, twin worker processes or torch.distributed ranks train in turn too.
    """
    if _side_by_side_refused(cfg):
        return 1
    return max(1, min(usable_cores() // 2, members))


def check_jobs(cfg: PPOConfig, jobs: int) -> None:
    """ValueError unless ``jobs`` members can train at once under ``cfg``."""
    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs}")
    reason = _side_by_side_refused(cfg)
    if jobs > 1 and reason:
        raise ValueError(f"jobs > 1 trains members side by side on CPU cores, not with {reason}")


def _side_by_side_refused(cfg: PPOConfig) -> str:
    """Why members of ``cfg`` must train in turn ('' when they may train side by side)."""
    from policy.distributed import context

    if cfg.device != "cpu":
        return "a GPU"
    if cfg.workers > 0:
        return "twin worker processes"
    return "torchrun ranks" if context().active else ""


def train_ensemble(cfg: PPOConfig, members: int, out_dir: str | Path, *, progress: bool = True,
                   snapshot_every: int = 10, eval_steps: int = 0, eval_envs: int = 32,
                   jobs: int = 1) -> EnsembleResult:
    """Train members 0..members-1 with seeds ``cfg.seed + k`` into ``out_dir``, ``jobs`` at a time.

    Each member is saved the moment it finishes and ``ensemble.json`` is rewritten over the
    finished members 0..k, so killing the run loses at most ``snapshot_every`` iterations of
    each member in flight. A directory holding a run with another config is refused rather
    than mixed. ``eval_steps > 0`` adds a held-out evaluation of the deterministic policy to
    each member's metrics. ``jobs > 1`` (CPU only) trains in spawned worker processes with
    ``cores // jobs`` torch threads each.
    """
    if members < 1:
        raise ValueError("members must be >= 1")
    check_jobs(cfg, jobs)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    expected = run_hash(cfg)
    summaries: dict[int, MemberSummary] = {}
    pending: list[int] = []
    for k in range(members):
        d = member_dir(out, k)
        if (d / "meta.json").exists():
            meta = read_meta(d)
            _check_same_run(d, meta.get("run_hash"), expected)
            summaries[k] = MemberSummary(k, cfg.seed + k, d, "skipped", meta.get("metrics"), 0.0)
        else:
            pending.append(k)

    def finished(summary: MemberSummary) -> None:
        summaries[summary.member] = summary
        done = 0
        while done < members and done in summaries:
            done += 1
        if done:
            write_ensemble_manifest(out, [member_dir(out, i) for i in range(done)],
                                    extra={"run_hash": expected, "members_requested": members})

    jobs = max(1, min(jobs, len(pending)))
    if jobs == 1:
        for k in pending:
            finished(_train_member(cfg, k, members, out, progress, snapshot_every, eval_steps, eval_envs))
    else:
        with spawn_pool(jobs, threads=max(1, usable_cores() // jobs)) as pool:
            futures = [pool.submit(_train_member, cfg, k, members, out, progress, snapshot_every, eval_steps,
                                   eval_envs, slot % jobs) for slot, k in enumerate(pending)]
            for future in as_completed(futures):
                finished(future.result())
    manifest = write_ensemble_manifest(out, [member_dir(out, i) for i in range(members)],
                                       extra={"run_hash": expected, "members_requested": members})
    return EnsembleResult(out, manifest["policy_version"], [summaries[k] for k in range(members)])


def _train_member(cfg: PPOConfig, k: int, members: int, out: Path, progress: bool, snapshot_every: int,
                  eval_steps: int, eval_envs: int, position: int = 0) -> MemberSummary:
    """Train (or resume) member ``k`` into ``member_<k>/`` and save it; runs in any process."""
    expected = run_hash(cfg)
    d = member_dir(out, k)
    seed = cfg.seed + k
    start = time.perf_counter()
    d.mkdir(parents=True, exist_ok=True)
    snap_path = d / TRAIN_STATE_FILE
    resume = _load_snapshot(snap_path, expected, cfg.device)
    member_cfg = cfg.replace(seed=seed)

    def save_snapshot(snapshot: TrainSnapshot) -> None:
        atomic_torch_save({"run_hash": expected, "snapshot": snapshot}, snap_path)

    total = cfg.num_iterations * cfg.batch_size
    done = int(resume["env_steps"]) if resume is not None else 0
    with tqdm(total=total, initial=done, unit="step", unit_scale=True, desc=f"member {k + 1}/{members}",
              disable=not progress, dynamic_ncols=True, position=position) as bar:

        def report(m: IterationMetrics) -> None:
            bar.update(m.env_steps - bar.n)
            # open: the rollout's valve-open share, then the served threshold's on the same states
            opened = f"{m.valve_open_rate:.3f}/{m.expert_open_rate:.3f}"
            bar.set_postfix(sps=f"{m.steps_per_s:.0f}", reward=f"{m.mean_reward:.3f}",
                            pg=f"{m.policy_loss:.3f}",
                            vf=f"{m.value_loss:.3f}", bc=f"{m.bc_loss:.3f}", kl=f"{m.approx_kl:.4f}",
                            prior_kl=f"{m.prior_kl:.4f}", open=opened,
                            refresh=False)

        keeper = BestCheckpoint.load(d) if resume is not None else BestCheckpoint()
        suite = (validation_suite(cfg.validation_scenarios, cfg.validation_days) if cfg.validate_every > 0
                 else [])

        def check(iteration: int, env_steps: int, agent: ActorCritic) -> None:
            point = validate(agent, suite, iteration, env_steps)
            keeper.offer(point, agent)
            keeper.save(d)
            best = keeper.best
            if progress and best is not None:
                bar.write(f"member {k + 1}/{members} iteration {iteration}: validation profit "
                          f"{point.profit_eur_m2:.3f} EUR/m2 (best {best.profit_eur_m2:.3f} at iteration "
                          f"{best.iteration})")

        result = train(member_cfg, progress=report, resume=resume, snapshot=save_snapshot,
                       snapshot_every=snapshot_every, validate=check if suite else None)
    metrics: dict[str, Any] = {"train": result.metrics[-1]._asdict(),
                               "train_seconds": time.perf_counter() - start,
                               "torch_threads": torch.get_num_threads()}
    if keeper.best_state is not None:
        # The checkpoint that earned the most on the validation suite serves, not the last iterate.
        result.agent.load_state_dict(keeper.best_state)
        metrics["validation"] = keeper.summary()
    if eval_steps > 0:
        metrics["eval"] = evaluate(result.agent, member_cfg, eval_steps, eval_envs)
    # The base cfg's seed is the run's; the member's own seed is recorded separately.
    save_member(d, result.agent, build_meta(cfg, seed=seed, member=k, metrics=metrics))
    snap_path.unlink(missing_ok=True)
    (d / "best.pt").unlink(missing_ok=True)
    return MemberSummary(k, seed, d, "resumed" if resume is not None else "trained", metrics,
                         time.perf_counter() - start)

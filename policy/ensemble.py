"""K independently seeded PPO policies: training them resumably, loading them, asking them.

Several members trained from different seeds disagree where the twin taught them little;
the safety layer's vote turns that disagreement into a confidence, so serving asks every
member and votes instead of trusting one network.

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
from collections.abc import Sequence
from concurrent.futures import as_completed
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import ArrayLike
from tqdm import tqdm  # type: ignore[import-untyped]

from policy.baselines import ThresholdExpert
from policy.checkpoint import (
    CheckpointError,
    atomic_torch_save,
    build_meta,
    load_member,
    member_dir,
    read_ensemble_manifest,
    read_meta,
    run_hash,
    save_member,
    write_ensemble_manifest,
)
from policy.config import PPOConfig
from policy.networks import ACTION_SCALE, RESIDUAL_KAPPA, RESIDUAL_MEAN_EPS, ActorCritic, fast_tanh
from policy.ppo import IterationMetrics, TrainSnapshot, make_twin, train
from policy.processes import spawn_pool, usable_cores
from policy.residual import ExpertPrior, expert_prior, interlock
from safety.report import Decision
from safety.voting import vote
from twin.spec import ActionSpec

TRAIN_STATE_FILE = "train_state.pt"


class Ensemble:
    """K actor-critics for one observation layout, queried deterministically (numpy in, numpy out)."""

    def __init__(self, members: Sequence[ActorCritic], policy_version: str,
                 metas: Sequence[dict[str, Any]] | None = None) -> None:
        if not members:
            raise ValueError("an ensemble needs at least one member")
        shapes = {(m.obs_dim, m.zones) for m in members}
        if len(shapes) != 1:
            raise ValueError(f"ensemble members disagree on (obs_dim, zones): {sorted(shapes)}")
        self.members = [m.eval() for m in members]
        self.policy_version = policy_version
        self.metas = list(metas) if metas is not None else []
        self.obs_dim, self.zones = shapes.pop()
        spec = ActionSpec(self.zones)
        self._low, self._high = spec.low, spec.high
        self._stacked: bool | None = None  # whether act_stacked can serve the members (decided at first use)

    def __len__(self) -> int:
        return len(self.members)

    def propose(self, obs: ArrayLike | torch.Tensor) -> np.ndarray:
        """Every member's deterministic action, clipped to the actuator ranges.

        ``obs`` (N, D) gives (K, N, Z+2); a single observation (D,) gives (K, Z+2), the shape
        :func:`safety.voting.vote` takes. float32.
        """
        if isinstance(obs, torch.Tensor):  # the torch twin's observations, possibly on a GPU
            obs = obs.detach().cpu().numpy()
        x = np.asarray(obs, dtype=np.float32)
        single = x.ndim == 1
        if single:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.obs_dim:
            raise ValueError(f"observations must have shape (N, {self.obs_dim}) or ({self.obs_dim},), "
                             f"got {np.shape(obs)}")
        if self._stacked is None:
            self._stacked = _stackable(self.members)
        with torch.no_grad():
            if self._stacked:
                device = next(self.members[0].parameters()).device
                stacked = act_stacked(self.members, torch.from_numpy(x).to(device)).cpu().numpy()
            else:
                stacked = np.stack([m.act(torch.from_numpy(x).to(next(m.parameters()).device)).cpu().numpy()
                                    for m in self.members])
        proposals = np.clip(stacked, self._low, self._high)
        return proposals[:, 0] if single else proposals

    def propose_many(self, obs: ArrayLike | torch.Tensor) -> np.ndarray:
        """(N, D) observations -> (K, N, Z+2) proposals: the service's micro-batch in one call."""
        x = np.asarray(obs.detach().cpu() if isinstance(obs, torch.Tensor) else obs, dtype=np.float32)
        if x.ndim != 2:
            raise ValueError(f"propose_many takes a batch of shape (N, {self.obs_dim}), got {x.shape}")
        return self.propose(x)

    def aggregate(self, proposals: ArrayLike, **vote_kwargs: Any) -> Decision:
        """Vote one action from (K, Z+2) proposals (see :func:`safety.voting.vote` for the options)."""
        return vote(proposals, zones=self.zones, **vote_kwargs)

    def decide(self, obs: ArrayLike | torch.Tensor, **vote_kwargs: Any) -> Decision:
        """The voted action for one greenhouse observation (D,); not yet clipped for safety."""
        x = np.asarray(obs)
        if x.ndim != 1:
            raise ValueError(f"decide takes one observation of shape ({self.obs_dim},), got {x.shape}")
        return self.aggregate(self.propose(x), **vote_kwargs)


def _stackable(members: Sequence[ActorCritic]) -> bool:
    """Members :func:`act_stacked` can serve together: one device, one torso shape, one residual mode."""
    def layout(m: ActorCritic) -> tuple[Any, ...]:
        torso = tuple((type(layer).__name__, tuple(getattr(layer, "weight", torch.empty(0)).shape))
                      for layer in m.actor_torso)
        return torso, tuple(m.actor_head.weight.shape), m.is_residual, next(m.parameters()).device
    first = layout(members[0])
    return all(layout(m) == first for m in members[1:]) and [t for t, _ in first[0]] == [
        "Linear", "Tanh", "Linear", "Tanh"]


@torch.no_grad()
def act_stacked(members: Sequence[ActorCritic], obs: torch.Tensor) -> torch.Tensor:
    """Every member's :meth:`ActorCritic.act` on ``obs`` (N, D) at once: (K, N, Z+2).

    Serving's cost for a small batch is Python and dispatch overhead, not arithmetic, so the
    element-wise work (normalising, the residual prior, the Beta's mode or mean, the interlock)
    runs once over a stacked (K, N, .) tensor, and a residual expert's prior, which depends on
    the observation only, is computed once per distinct expert. Each member keeps its own
    ``F.linear`` calls, the same kernels on the same shapes as ``act``. Valve decisions equal
    ``act``'s; pump and lights equal them to the last bits: a vectorised transcendental (tanh,
    the Beta's mode) may round an element differently from the scalar tail loop that handles
    it in a shorter tensor, on some CPUs.
    """
    k, z = len(members), members[0].zones
    mean = torch.stack([m.obs_rms.mean for m in members])[:, None, :].to(obs.dtype)
    std = torch.sqrt(torch.stack([m.obs_rms.var for m in members])[:, None, :].to(obs.dtype) + 1e-8)
    h = ((obs[None] - mean) / std).clamp(-10.0, 10.0)
    for i in (0, 2):
        h = torch.stack([F.linear(h[j], m.actor_torso[i].weight, m.actor_torso[i].bias)
                         for j, m in enumerate(members)])
        h = fast_tanh(h)
    out = torch.stack([F.linear(h[j], m.actor_head.weight, m.actor_head.bias) for j, m in enumerate(members)])
    logits, conc = out[..., :z], out[..., z:]
    if members[0].is_residual:
        cfgs = [tuple(m.residual_cfg.tolist()) for m in members]
        priors: dict[tuple[float, ...], ExpertPrior] = {}
        for _, refill, stop, pump, _ in cfgs:
            if (refill, stop, pump) not in priors:
                expert = ThresholdExpert(zones=z, refill=refill, stop=stop, pump_pct=pump)
                priors[(refill, stop, pump)] = expert_prior(expert, obs)
        chosen = [priors[(c[1], c[2], c[3])] for c in cfgs]
        valves = torch.stack([p.valves for p in chosen]).to(logits.dtype)
        cont = torch.stack([p.cont for p in chosen]).to(conc.dtype)
        prior_logit = torch.tensor([c[4] for c in cfgs], dtype=logits.dtype, device=obs.device)[:, None, None]
        logits = logits + prior_logit * (2.0 * valves - 1.0)
        mode = torch.sigmoid(torch.logit(cont.clamp(RESIDUAL_MEAN_EPS, 1.0 - RESIDUAL_MEAN_EPS)) + conc[..., :2])
        kappa = RESIDUAL_KAPPA * conc[..., 2:].clamp(-5.0, 5.0).exp()
        a, b = 1.0 + mode * kappa, 1.0 + (1.0 - mode) * kappa
        u = (a - 1.0) / (a + b - 2.0)  # the Beta's mode, as act takes it
    else:
        c = 1.0 + conc.clamp(-10.0, 8.0).exp()
        a, b = c[..., :2], c[..., 2:]
        u = a / (a + b)  # the Beta's mean
    action = torch.cat([(torch.sigmoid(logits) >= 0.5).to(obs.dtype), u.to(obs.dtype) * ACTION_SCALE], dim=-1)
    n = obs.shape[0]
    flat_obs = obs[None].expand(k, *obs.shape).reshape(k * n, obs.shape[-1])
    return interlock(action.reshape(k * n, z + 2), z, flat_obs).reshape(k, n, z + 2)


def load_ensemble(directory: str | Path, *, expected_zones: int | None = None,
                  map_location: str | torch.device = "cpu") -> Ensemble:
    """Load every member listed in ``ensemble.json``, each checked against the running twin."""
    d = Path(directory)
    manifest = read_ensemble_manifest(d)
    members, metas = [], []
    for entry in manifest["members"]:
        agent, meta = load_member(d / entry["dir"], expected_zones=expected_zones, map_location=map_location)
        if entry.get("weights_sha256") not in (None, meta["weights_sha256"]):
            raise CheckpointError(f"{entry['dir']} was replaced after {d / 'ensemble.json'} was written")
        members.append(agent)
        metas.append(meta)
    zones = {m.zones for m in members}
    if len(zones) != 1:
        raise CheckpointError(f"ensemble members were trained for different zone counts: {sorted(zones)}")
    return Ensemble(members, manifest["policy_version"], metas)


# ---- training ------------------------------------------------------------------------------------


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
        raise CheckpointError(f"cannot read training snapshot {path}: {exc}; delete it to restart the member") from exc
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
            bar.set_postfix(sps=f"{m.steps_per_s:.0f}", reward=f"{m.mean_reward:.3f}", pg=f"{m.policy_loss:.3f}",
                            vf=f"{m.value_loss:.3f}", bc=f"{m.bc_loss:.3f}", kl=f"{m.approx_kl:.4f}",
                            prior_kl=f"{m.prior_kl:.4f}", open=opened,
                            refresh=False)

        result = train(member_cfg, progress=report, resume=resume, snapshot=save_snapshot,
                       snapshot_every=snapshot_every)
    metrics: dict[str, Any] = {"train": result.metrics[-1]._asdict(), "train_seconds": time.perf_counter() - start,
                               "torch_threads": torch.get_num_threads()}
    if eval_steps > 0:
        metrics["eval"] = evaluate(result.agent, member_cfg, eval_steps, eval_envs)
    # The base cfg's seed is the run's; the member's own seed is recorded separately.
    save_member(d, result.agent, build_meta(cfg, seed=seed, member=k, metrics=metrics))
    snap_path.unlink(missing_ok=True)
    return MemberSummary(k, seed, d, "resumed" if resume is not None else "trained", metrics,
                         time.perf_counter() - start)

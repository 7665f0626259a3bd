"""Data-parallel PPO across processes started by ``torchrun`` (torch.distributed, gloo or nccl).

The config describes one rank: every rank steps ``num_envs`` twin instances of its own for the
same number of iterations, so ``world_size`` ranks collect ``world_size`` times the env steps per
update. Rank ``r`` simulates instance ids ``r * num_envs .. (r + 1) * num_envs - 1`` of the run's
seed: a two-rank run sees the scenarios of a one-rank run with twice the instances.

What keeps the ranks one model (:class:`RankContext`, called from :func:`policy.ppo.train`):

* parameters and buffers are broadcast from rank 0 at the start;
* gradients are averaged with one ``all_reduce`` after every backward. Not DDP: the actor-critic
  is driven through ``evaluate_actions`` / ``bc_loss`` rather than ``forward``, and an update
  runs two passes (PPO and BC) before its one backward, which DDP's forward hooks do not cover;
* the observation normaliser merges the batch moments of all ranks (:class:`SyncedRunningMeanStd`);
* the reward scaler keeps per-instance statistics for all ``world_size * num_envs`` instances on
  every rank (:class:`ShardedRewardScaler`), so its state is the same everywhere;
* the start (config, resume snapshot, snapshot interval) comes from rank 0; a snapshot holds the
  twin state of every rank's instances and every rank's torch RNG state (sampling Betas draws a
  data-dependent number of variates, so the streams part), and a resume hands each rank its own;
* iteration metrics are averaged over ranks, except ``steps_per_s``, summed (the run's
  throughput), and ``env_steps``, which counts per rank as ``total_steps`` does.

Only rank 0 calls the progress and snapshot callbacks. With one process (no process group, or a
group of one) every hook is a no-op, so single-process training is the plain loop, bit for bit.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from policy.checkpoint import CheckpointError
from policy.normalize import InstanceRewardScaler, RunningMeanStd

if TYPE_CHECKING:
    from policy.ppo import IterationMetrics

_SUMMED_METRICS = frozenset({"steps_per_s"})
_SHARED_METRICS = frozenset({"iteration", "env_steps", "bc_coef", "lr"})
"""Metrics that every rank already has the same value of."""
_PER_INSTANCE_SNAPSHOT_KEYS = ("twin_params", "twin_state")

_left_group = False
"""Set by :func:`shutdown`: this process was a rank of a multi-process group (see :func:`exit_rank`)."""

_pending_start: list[tuple[Any, Any, int, bool]] = []
"""A start received by :func:`follow` before it calls the training function (consumed by ``sync_start``)."""


def _group_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def _comm_device(like: torch.device | None = None) -> torch.device:
    """Where collective buffers live: the current GPU under nccl, else ``like`` or the CPU."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return like if like is not None else torch.device("cpu")


def _broadcast_object(obj: Any) -> Any:
    """Rank 0's ``obj`` on every rank."""
    box = [obj]
    device = _comm_device() if dist.get_backend() == "nccl" else None
    dist.broadcast_object_list(box, src=0, device=device)
    return box[0]


def _to_cpu(tree: Any) -> Any:
    """A nested dict/list of tensors with every tensor on the CPU (so no rank unpickles onto another's
    GPU)."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().cpu()
    if isinstance(tree, dict):
        return {k: _to_cpu(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_to_cpu(v) for v in tree)
    return tree


class SyncedRunningMeanStd(RunningMeanStd):
    """A :class:`RunningMeanStd` whose ``update`` folds in the batches of every rank.

    The global batch mean and variance are computed exactly (a sum, then the squared deviations
    around the global mean, each all-reduced), then merged with Chan's formula as in the parent,
    so every rank ends with the same statistics. Outside a process group it is the parent.
    """

    @classmethod
    def adopt(cls, rms: RunningMeanStd) -> SyncedRunningMeanStd:
        """A synced copy of ``rms`` (same buffers and values, same device)."""
        synced = cls(tuple(rms.mean.shape)).to(rms.mean.device)
        synced.load_state_dict(rms.state_dict())
        return synced

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        if _group_size() == 1:
            super().update(x)
            return
        device = _comm_device(self.mean.device)
        x = x.reshape(-1, *self.mean.shape).to(device=device, dtype=torch.float64)
        head = torch.cat([torch.tensor([float(x.shape[0])], dtype=torch.float64, device=device),
                          x.sum(dim=0).reshape(-1)])
        dist.all_reduce(head)
        n = head[0]
        if float(n) == 0.0:  # the same on every rank: the count is global
            return
        batch_mean = (head[1:] / n).reshape(self.mean.shape)
        batch_m2 = (x - batch_mean).square().sum(dim=0)
        dist.all_reduce(batch_m2)
        batch_mean, batch_var, n = (t.to(self.mean.device) for t in (batch_mean, batch_m2 / n, n))
        delta = batch_mean - self.mean
        total = self.count + n
        m2 = self.var * self.count + batch_var * n + delta.square() * self.count * n / total
        self.mean.add_(delta * n / total)
        self.var.copy_(m2 / total)
        self.count.copy_(total)


class ShardedRewardScaler(InstanceRewardScaler):
    """Per-instance reward scaling over every rank's instances, held whole on every rank.

    Each call gathers all ranks' rewards and dones (an all-reduce of zero-padded [T, world * B]
    tensors, which is exact), runs the parent on them, and returns this rank's columns, so the
    statistics and running returns are identical on all ranks and a snapshot from rank 0 is complete.
    """

    def __init__(self, num_envs: int, gamma: float, device: str | torch.device, rank: int,
                 world_size: int) -> None:
        super().__init__(num_envs * world_size, gamma, device)
        self.rows = slice(rank * num_envs, (rank + 1) * num_envs)

    @torch.no_grad()
    def __call__(self, rewards: torch.Tensor, dones: torch.Tensor) -> torch.Tensor:
        device = _comm_device(rewards.device)
        shape = (rewards.shape[0], self.returns.shape[0])
        full_rewards = torch.zeros(shape, dtype=rewards.dtype, device=device)
        full_dones = torch.zeros(shape, dtype=torch.uint8, device=device)
        full_rewards[:, self.rows] = rewards.to(device)
        full_dones[:, self.rows] = dones.to(device=device, dtype=torch.uint8)
        dist.all_reduce(full_rewards)
        dist.all_reduce(full_dones)
        scaled = super().__call__(full_rewards.to(rewards.device), full_dones.to(rewards.device).bool())
        return scaled[:, self.rows]


@dataclasses.dataclass(frozen=True)
class RankContext:
    """This process's place in the run and the collectives PPO calls (no-ops on one rank)."""

    rank: int = 0
    world_size: int = 1

    @property
    def is_main(self) -> bool:
        """Rank 0: the only one that reports progress and writes checkpoints."""
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    def sync_start(self, cfg: Any, resume: dict[str, Any] | None, snapshot_every: int,
                   fine_tuning: bool = False) -> tuple[dict[str, Any] | None, int, bool]:
        """Rank 0's resume snapshot (this rank's rows of it), snapshot interval and whether it fine-tunes
        given weights, checked against ``cfg``.

        Other ranks' own ``resume``, ``snapshot_every`` and ``fine_tuning`` are ignored (their ``cfg``
        must equal rank 0's): the weights themselves reach them in :meth:`prepare`, but the path
        training takes (a BC warm start only for a fresh policy) must be rank 0's on every rank.
        """
        if self.active:
            if self.is_main:
                resume = _to_cpu(resume)
                _broadcast_object((cfg, resume, snapshot_every, fine_tuning))
            else:
                lead_cfg, resume, snapshot_every, fine_tuning = _pending_start.pop() if _pending_start else \
                    _broadcast_object(None)
                if lead_cfg != cfg:
                    raise ValueError(f"rank {self.rank} was given another training config than rank 0")
        if resume is None:
            return None, snapshot_every, fine_tuning
        ranks = int(resume.get("world_size", 1))
        if ranks != self.world_size:
            raise CheckpointError(f"the training snapshot was written by a run on {ranks} rank(s), this run "
                                  f"has {self.world_size}; resume with {ranks} or delete the snapshot to "
                                  "restart")
        if self.active:
            rows = slice(self.rank * int(resume["num_envs"]), (self.rank + 1) * int(resume["num_envs"]))
            resume = {**resume, "next_obs": resume["next_obs"][rows],
                      "rng": {**resume["rng"], **resume["rank_rng"][self.rank]},
                      **{key: {k: v[rows] for k, v in resume[key].items()}
                         for key in _PER_INSTANCE_SNAPSHOT_KEYS}}
        return resume, snapshot_every, fine_tuning

    def prepare(self, agent: nn.Module) -> None:
        """Start every rank from rank 0's weights, with an observation normaliser shared by all ranks."""
        if not self.active:
            return
        obs_rms = getattr(agent, "obs_rms", None)
        if isinstance(obs_rms, RunningMeanStd) and not isinstance(obs_rms, SyncedRunningMeanStd):
            agent.obs_rms = SyncedRunningMeanStd.adopt(obs_rms)
        with torch.no_grad():
            for t in [*agent.parameters(), *agent.buffers()]:
                buf = t.detach().to(_comm_device(t.device))
                dist.broadcast(buf, src=0)
                t.copy_(buf)

    def average_gradients(self, module: nn.Module) -> None:
        """Replace each gradient by its mean over ranks (one flattened all-reduce)."""
        if not self.active:
            return
        params = list(module.parameters())
        device = _comm_device(params[0].device)
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1).to(device) for g in grads])
        dist.all_reduce(flat)
        flat /= self.world_size
        offset = 0
        for p, g in zip(params, grads, strict=True):
            n = g.numel()
            # Every rank runs the same loss, so a parameter outside it (the actor in the critic's
            # warm-up) has no gradient on any rank: it keeps none, and Adam leaves it alone.
            if p.grad is not None:
                p.grad = flat[offset:offset + n].view_as(g).to(p.device)
            offset += n

    def reward_scaler(self, num_envs: int, gamma: float, device: str | torch.device) -> InstanceRewardScaler:
        """The per-instance reward scaler for this rank's ``num_envs`` instances."""
        if not self.active:
            return InstanceRewardScaler(num_envs, gamma, device)
        return ShardedRewardScaler(num_envs, gamma, device, self.rank, self.world_size)

    def reduce_metrics(self, metrics: IterationMetrics) -> IterationMetrics:
        """Iteration metrics over all ranks: means, summed throughput, shared counters as they are."""
        if not self.active:
            return metrics
        names = [f for f in metrics._fields if f not in _SHARED_METRICS]
        values = torch.tensor([float(getattr(metrics, f)) for f in names], dtype=torch.float64,
                              device=_comm_device())
        dist.all_reduce(values)
        out = {f: v if f in _SUMMED_METRICS else v / self.world_size for f, v in zip(names, values.tolist(),
                                                                                     strict=True)}
        return metrics._replace(**out)

    def gather_instances(self, twin: Any, next_obs: torch.Tensor) -> dict[str, Any]:
        """The per-instance part of a training snapshot: every rank's rows and RNG streams on a multi-rank
        run.

        ``twin`` is anything with ``params`` and ``state`` (the twin or :mod:`policy.parallel`'s workers).
        """
        fields: dict[str, Any] = {
            "twin_params": {k: v.clone() for k, v in twin.params.arrays().items()},
            "twin_state": {k: v.clone() for k, v in twin.state.arrays().items()},
            "next_obs": next_obs.clone(),
        }
        if not self.active:
            return fields
        rng = {"torch": torch.get_rng_state()}
        if next_obs.device.type == "cuda":
            rng["cuda"] = torch.cuda.get_rng_state(next_obs.device).cpu()
        rank_rng: list[Any] = [None] * self.world_size
        dist.all_gather_object(rank_rng, rng)
        return {"twin_params": {k: self._gather_rows(v) for k, v in fields["twin_params"].items()},
                "twin_state": {k: self._gather_rows(v) for k, v in fields["twin_state"].items()},
                "next_obs": self._gather_rows(fields["next_obs"]), "rank_rng": rank_rng,
                "world_size": self.world_size}

    def _gather_rows(self, x: torch.Tensor) -> torch.Tensor:
        """Every rank's ``x`` concatenated along the first axis (rank order)."""
        send = x.to(device=_comm_device(x.device), dtype=torch.uint8 if x.dtype == torch.bool else x.dtype)
        parts = [torch.empty_like(send) for _ in range(self.world_size)]
        dist.all_gather(parts, send.contiguous())
        return torch.cat(parts).to(device=x.device, dtype=x.dtype)


def context() -> RankContext:
    """The calling process's rank context (one rank outside an initialised process group)."""
    if _group_size() == 1:
        return RankContext()
    return RankContext(dist.get_rank(), dist.get_world_size())


def torchrun_world() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's environment; (0, 1, 0) when not under torchrun."""
    try:
        return (int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1")),
                int(os.environ.get("LOCAL_RANK", "0")))
    except ValueError as exc:
        raise ValueError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers: {exc}") from exc


def init_from_env(device: str) -> bool:
    """Join the process group torchrun describes (gloo on CPU, nccl on CUDA); True if this call created it.

    Under torchrun with more than one process, each rank uses GPU ``LOCAL_RANK`` when ``device``
    is cuda. A group that already exists is used as it is (and the caller that made it ends it).
    """
    rank, world, local_rank = torchrun_world()
    if world > 1 and not (dist.is_available() and dist.is_initialized()):
        if not dist.is_available():
            raise RuntimeError("this torch build has no torch.distributed")
        backend = "gloo"
        if device.startswith("cuda"):
            torch.cuda.set_device(local_rank)
            backend = "nccl"
        dist.init_process_group(backend=backend, rank=rank, world_size=world)
        return True
    return False


def shutdown() -> None:
    """Leave the process group (after :func:`init_from_env` returned True).

    Every rank waits for the others first: a rank that tears down its gloo pairs while a peer's
    last collective is still draining aborts that peer ("terminate called without an active
    exception", SIGABRT), which failed about one two-rank run in five here.
    """
    global _left_group
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        _left_group = True


def exit_rank(code: int) -> None:
    """End a process that was a rank (after :func:`shutdown`) with ``code``, skipping interpreter teardown.

    With the group already destroyed and everything saved, a rank still aborted at interpreter
    exit now and then on a loaded machine ("terminate called without an active exception",
    SIGABRT, about one two-rank run in twenty): a native thread torch leaves joinable is destroyed
    with the interpreter. torchrun then fails the whole run for work that was complete. Leaving
    with ``os._exit`` after flushing what Python buffered keeps the exit code the rank's own.
    Outside a rank (no :func:`shutdown` of a group) this returns and the caller exits as usual.
    """
    if not _left_group:
        return
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def follow(train_fn: Callable[[Any], object]) -> None:
    """Loop of ranks > 0 under ``greentwin train``: train every member rank 0 trains, until it releases.

    Rank 0 decides everything (which members, resumed from what) and broadcasts it at the start of
    each ``train`` call; a snapshot refused there is refused on every rank and reported by rank 0.
    """
    while True:
        start = _broadcast_object(None)
        if start is None:
            return
        _pending_start.append(start)
        try:
            train_fn(start[0])
        except CheckpointError:
            pass
        finally:
            _pending_start.clear()


def release_followers() -> None:
    """On rank 0 of a multi-rank run: tell :func:`follow` loops there is nothing more to train."""
    ctx = context()
    if ctx.active and ctx.is_main:
        _broadcast_object(None)

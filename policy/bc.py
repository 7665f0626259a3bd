"""Demonstrations (expert rollouts, operator overrides) and the behaviour-cloning loss.

:class:`DemoBatch` is also the on-disk format the runtime writes when an operator overrides
the policy: a ``.npz`` of plain arrays plus a JSON header recording the observation and
action layouts, so demos recorded under another layout are refused at load instead of
silently feeding shifted features.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from policy.networks import ActorCritic
from twin.spec import ActionSpec, ObservationSpec

DEMO_FORMAT_VERSION = 1


class DemoBatch(NamedTuple):
    """N demonstrated (observation, action) pairs with provenance."""

    obs: torch.Tensor
    """[N, obs_dim] float32 raw (un-normalised) observations."""
    action: torch.Tensor
    """[N, zones + 2] float32 actions: valves 0/1, pump %, lights %."""
    who: np.ndarray
    """[N] str: 'expert' or an operator id."""
    when: np.ndarray
    """[N] int64 microseconds since the Unix epoch (UTC)."""

    @property
    def size(self) -> int:
        """Number of demonstrations N (``len()`` stays the tuple's field count)."""
        return int(self.obs.shape[0])


def to_epoch_us(when: Any) -> np.ndarray:
    """Timestamps as int64 epoch-µs from ISO-8601 strings (naive means UTC) or integers."""
    arr = np.asarray(when)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64)

    def parse(s: str) -> int:
        t = datetime.fromisoformat(str(s))
        t = t if t.tzinfo else t.replace(tzinfo=UTC)
        delta = t - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds

    return np.array([parse(s) for s in arr.reshape(-1)], dtype=np.int64)


def make_demo_batch(obs: Any, action: Any, who: Any, when: Any) -> DemoBatch:
    """Validate shapes and convert to the canonical dtypes."""
    o = torch.as_tensor(np.asarray(obs, dtype=np.float32))
    a = torch.as_tensor(np.asarray(action, dtype=np.float32))
    n = o.shape[0]
    w = np.broadcast_to(np.asarray(who, dtype=str), (n,)).copy()
    t = to_epoch_us(when)
    if o.ndim != 2 or a.ndim != 2 or a.shape[0] != n or t.shape != (n,):
        raise ValueError(f"demo shapes disagree: obs {tuple(o.shape)}, action {tuple(a.shape)}, when "
                         f"{t.shape}")
    return DemoBatch(o, a, w, t)


def save_demos(path: str | Path, batch: DemoBatch, obs_spec: ObservationSpec) -> None:
    """Write ``batch`` as .npz with a JSON header of the layouts it was recorded under."""
    if batch.obs.shape[1] != obs_spec.dim or batch.action.shape[1] != ActionSpec(obs_spec.zones).dim:
        raise ValueError("demo batch does not match the given observation/action layout")
    header = {"format": DEMO_FORMAT_VERSION, "observation": obs_spec.to_dict(),
              "action": ActionSpec(obs_spec.zones).to_dict(), "count": batch.size}
    with open(path, "wb") as f:  # a file object keeps numpy from appending '.npz' to the name
        np.savez(f, obs=batch.obs.cpu().numpy(), action=batch.action.cpu().numpy(),
                 who=np.asarray(batch.who, dtype=str), when=np.asarray(batch.when, dtype=np.int64),
                 header=np.array(json.dumps(header)))


def load_demos(path: str | Path, obs_spec: ObservationSpec) -> DemoBatch:
    """Read demos, raising ValueError if they were recorded under another layout."""
    with np.load(path, allow_pickle=False) as data:
        header = json.loads(str(data["header"]))
        if header.get("format") != DEMO_FORMAT_VERSION:
            raise ValueError(f"unsupported demo format {header.get('format')!r}")
        obs_spec.check_compatible(header["observation"])
        if header["action"]["names"] != list(ActionSpec(obs_spec.zones).names):
            raise ValueError(f"action layout mismatch: demos have {header['action']['names']}")
        return DemoBatch(torch.from_numpy(data["obs"]), torch.from_numpy(data["action"]),
                         data["who"].copy(), data["when"].copy())


@torch.no_grad()
def collect_expert_demos(twin: Any, expert: Any, steps: int, who: str = "expert",
                         t0_us: int = 0) -> DemoBatch:
    """Run ``expert`` on every twin instance for ``steps`` control steps (from a reset) and record it.

    ``when`` is simulated time: ``t0_us`` plus the step index times the control interval.
    """
    obs = twin.reset()
    obs_rows, act_rows = [], []
    for _ in range(steps):
        action = torch.as_tensor(expert(obs), dtype=torch.float32)
        obs_rows.append(torch.as_tensor(obs).clone())
        act_rows.append(action)
        obs, *_ = twin.step(action)
    b = twin.num_instances
    dt_us = int(round(twin.config.dt_s * 1e6))
    when = t0_us + np.repeat(np.arange(steps, dtype=np.int64) * dt_us, b)
    return DemoBatch(torch.cat(obs_rows).float(), torch.cat(act_rows).float(), np.full(steps * b, who), when)


class BCLoss(NamedTuple):
    """Behaviour-cloning loss and its parts (all scalars)."""

    loss: torch.Tensor
    """valve_nll + continuous_nll: what the optimiser sees."""
    valve_nll: torch.Tensor
    """Class-balanced mean -log p(valve_demo)."""
    continuous_nll: torch.Tensor
    """Mean -log p(pump, lights demo) under the Betas."""
    demo_open_rate: torch.Tensor
    """Share of demonstrated valve commands that are 'open'."""


def bc_loss(agent: ActorCritic, obs: torch.Tensor, action: torch.Tensor, open_rate: float | None = None,
            balance: float = 0.5) -> BCLoss:
    """-log pi(a_demo | s) with valve samples weighted by class frequency ** -balance.

    Demonstrated valves are open a few percent of the time; unweighted (balance 0), the
    cheapest fit is 'never irrigate', which scores well for days and then dries the crop out.
    Full balancing (1) over-opens in ambiguous states, and every false open costs water, so
    the default sits in between. Weights are normalised to a mean of 1 over the demo classes.
    """
    valve_lp, cont_lp = agent.log_prob_parts(obs, action)
    is_open = action[:, : agent.zones] >= 0.5
    rate = is_open.float().mean() if open_rate is None else torch.tensor(open_rate, device=obs.device)
    rate = rate.clamp(0.01, 0.99)
    w_open, w_closed = rate ** -balance, (1.0 - rate) ** -balance
    norm = rate * w_open + (1.0 - rate) * w_closed
    weights = torch.where(is_open, w_open / norm, w_closed / norm)
    valve_nll = -(weights * valve_lp).mean()
    continuous_nll = -cont_lp.mean()
    return BCLoss(valve_nll + continuous_nll, valve_nll, continuous_nll, is_open.float().mean())


def lamp_bc_loss(agent: ActorCritic, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Mean -log p(demonstrated lamps on/off | s) under the lamp switch, the lamps alone: hindsight
    demonstrations differ from the served rule only in their lamps, and cloning their valves too
    would move the residual's irrigation (the valve loss's class weights shift its optimum)."""
    if not agent.lamp_switch:
        raise ValueError("lamp demonstrations clone the lamp switch: the agent has none")
    _, cont_lp = agent.log_prob_parts(obs, action)
    return -cont_lp[:, -1].mean()

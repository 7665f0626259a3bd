"""Serving K independently seeded PPO policies: loading them, asking them, voting.

Several members trained from different seeds disagree where the twin taught them little;
the safety layer's vote turns that disagreement into a confidence, so serving asks every
member and votes instead of trusting one network. Training the members lives in
:mod:`policy.ensemble_training`.

Every member answers through its own forward (:meth:`ActorCritic.forward`, then
:func:`policy.networks.deterministic_action`). Members of one architecture are asked together,
their layers run side by side over a leading member axis (:func:`forward_members`), because a
small batch's cost is Python and dispatch overhead, not arithmetic.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike

from policy.baselines import ThresholdExpert
from policy.checkpoint import CheckpointError, load_member, read_ensemble_manifest
from policy.networks import ActorCritic, deterministic_action
from policy.residual import ExpertPrior, expert_prior, interlock
from safety.report import Decision
from safety.voting import vote
from twin.spec import ActionSpec


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
        self._stack: StackedMembers | None = None

    def __len__(self) -> int:
        return len(self.members)

    @property
    def ensemble(self) -> Ensemble:
        """The members an explanation attributes a decision to: all of them (the service's
        :class:`control.proposal.Proposer` asks every proposer, the expert answers None)."""
        return self

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
            self._stack = StackedMembers(self.members) if self._stacked else None
        with torch.no_grad():
            if self._stack is not None:
                stacked = self._stack.act(torch.from_numpy(x).to(self._stack.device)).cpu().numpy()
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
    """Members one side-by-side forward can serve: one device, the same layers holding tensors of
    the same shapes, one residual mode."""
    def layout(m: ActorCritic) -> tuple[Any, ...]:
        shapes = tuple((name, tuple(t.shape), t.dtype) for name, t in m.state_dict().items())
        return (tuple(type(layer) for layer in m.actor_layers()), shapes, m.is_residual, m.lamp_switch,
                next(m.parameters()).device)
    first = layout(members[0])
    return all(layout(m) == first for m in members[1:])


def _has_state(layer: torch.nn.Module) -> bool:
    return any(True for _ in layer.parameters()) or any(True for _ in layer.buffers())


def forward_members(members: Sequence[ActorCritic], obs: torch.Tensor) -> torch.Tensor:
    """Every member's :meth:`ActorCritic.forward` on ``obs`` (N, D): (K, N, zones + 4).

    The members' own layers (:meth:`ActorCritic.actor_layers`) run in lockstep: a layer with
    weights or statistics runs once per member, the kernel ``forward`` runs on the shapes it
    runs on; a stateless one (the activation) runs once over the stacked (K, N, .) tensor,
    which is where stacking saves time for the small batches serving sees.
    """
    x = obs[None].expand(len(members), *obs.shape)
    for layers in zip(*(m.actor_layers() for m in members), strict=True):
        if _has_state(layers[0]):
            x = torch.stack([layer(x[j]) for j, layer in enumerate(layers)])
        else:
            x = layers[0](x)
    return x


class StackedMembers:
    """Members of one architecture asked together: the members' forward side by side
    (:func:`forward_members`), each residual expert's decision once per distinct expert, then the
    shared :func:`policy.networks.deterministic_action` and one interlock over all (K, N) rows."""

    def __init__(self, members: Sequence[ActorCritic]) -> None:
        if not _stackable(members):
            raise ValueError("members must share one architecture, residual mode, lamp switch and device to "
                             "be asked together")
        self.members = list(members)
        self.zones = members[0].zones
        self.device = next(members[0].parameters()).device
        experts = [m.expert() for m in members]
        self._experts: list[ThresholdExpert] = list(dict.fromkeys(e for e in experts if e is not None))
        self._which = torch.tensor([self._experts.index(e) for e in experts if e is not None],
                                   dtype=torch.long, device=self.device)
        settings = [m.residual_settings() for m in members]
        self._prior_logit = torch.tensor([s.prior_logit for s in settings], device=self.device)[:, None, None]
        self._lamp_logit = torch.tensor([s.lamp_logit for s in settings],
                                        device=self.device)[:, None, None] if members[0].lamp_switch else None

    def prior(self, obs: torch.Tensor) -> ExpertPrior | None:
        """Each member's expert decision (K, N, .) for ``obs`` (N, D); None for plain members."""
        if not self._experts:
            return None
        priors = [expert_prior(e, obs) for e in self._experts]
        valves = torch.stack([p.valves for p in priors]).index_select(0, self._which)
        cont = torch.stack([p.cont for p in priors]).index_select(0, self._which)
        return ExpertPrior(valves, cont)

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Every member's :meth:`ActorCritic.act` on ``obs`` (N, D): (K, N, zones + 2)."""
        out = forward_members(self.members, obs)
        lamp_logit = None if self._lamp_logit is None else self._lamp_logit.to(out.dtype)
        action = deterministic_action(out, self.zones, self.prior(obs), self._prior_logit.to(out.dtype),
                                      lamp_logit)
        k, n, z = out.shape[0], obs.shape[0], self.zones
        flat_obs = obs[None].expand(k, *obs.shape).reshape(k * n, obs.shape[-1])
        return interlock(action.reshape(k * n, z + 2), z, flat_obs).reshape(k, n, z + 2)


@torch.no_grad()
def act_stacked(members: Sequence[ActorCritic], obs: torch.Tensor) -> torch.Tensor:
    """Every member's :meth:`ActorCritic.act` on ``obs`` (N, D) at once: (K, N, zones + 2).

    Valve decisions equal ``act``'s; pump and lights equal them to the last bits: the activation
    over the stacked tensor is vectorised where ``act``'s shorter tensor may end in a scalar tail
    loop, which on some CPUs rounds an element differently.
    """
    return StackedMembers(members).act(obs)


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



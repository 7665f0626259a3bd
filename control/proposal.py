"""Stages 4-5 of a decision: every ensemble member proposes an action, then one is chosen.

:func:`propose` runs one forward per proposer for all the greenhouses the policy decides;
:func:`choose` reads the mode at that moment: an e-stop proposes the safe state, manual mode the
operator's action, auto mode the members' vote, or the threshold expert when the members
disagree too much. Whatever the policy proposes is interlocked before the safety clipper sees it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from control.decision_setup import Proposer
from control.state import ControllerState
from control.step import Step
from policy.baselines import ThresholdExpert
from policy.tuning import served_expert
from safety import safe_state, vote
from safety.interlock import interlock_one

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ExpertProposer:
    """The threshold expert as a one-member ensemble (no trained policy available)."""

    expert: ThresholdExpert
    policy_version: str = "expert"

    @property
    def ensemble(self) -> None:
        """A rule explains itself: its decisions carry no attribution."""
        return None

    def propose(self, obs: np.ndarray) -> np.ndarray:
        return np.asarray(self.expert(obs[None, :].astype(np.float32)), dtype=np.float64)

    def propose_many(self, obs: np.ndarray) -> np.ndarray:
        """(N, D) -> (1, N, Z + 2): the expert is batched already."""
        return np.asarray(self.expert(obs.astype(np.float32)), dtype=np.float64)[None]


def load_proposer(policy_dir: Path, zones: int) -> Proposer:
    """The shipped (or configured) ensemble; the threshold expert when there is none."""
    if (policy_dir / "ensemble.json").exists():
        from policy.ensemble import load_ensemble

        return load_ensemble(policy_dir, expected_zones=zones)
    log.warning("no policy ensemble at %s: the threshold expert decides", policy_dir)
    return ExpertProposer(served_expert(zones))


# ---- 4. proposal --------------------------------------------------------------------------------


def propose(steps: list[Step]) -> None:
    """One forward per proposer for every greenhouse the policy decides (auto mode, no e-stop)."""
    groups: dict[int, list[Step]] = {}
    for step in steps:
        state = step.memory.state  # the mode now: a change since the batch began counts
        if not state.estop_latched and state.mode == "auto":
            groups.setdefault(id(step.setup.proposer), []).append(step)
    for group in groups.values():
        proposals = np.asarray(group[0].setup.proposer.propose_many(np.stack([s.obs for s in group])))  # type: ignore[misc]
        for k, step in enumerate(group):
            step.members = proposals[:, k]


# ---- 5. vote ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    """The action a decision goes on with, before the safety clipper, and who chose it."""

    action: np.ndarray
    actor: str
    members: np.ndarray
    """(K, Z + 2) member actions; empty unless the policy decided."""
    confidence: float = 1.0
    low_confidence: bool = False


def choose(step: Step, state: ControllerState) -> Choice:
    """E-stop, manual action, the members' vote or, with low confidence, the threshold expert.

    Reads the mode *now*: an e-stop or a mode change that arrived while the batch was being
    prepared applies to this decision."""
    setup, obs = step.setup, step.obs
    assert obs is not None
    if state.estop_latched:
        return Choice(safe_state(setup.z), "estop", np.zeros((0, setup.z + 2)))
    if state.mode == "manual":
        return Choice(state.manual_action, state.manual_actor, np.zeros((0, setup.z + 2)))
    members = step.members if step.members is not None else setup.proposer.propose(obs)
    decision = vote(members, disagreement_threshold=setup.threshold, zones=setup.z)
    proposed, actor = decision.action, f"policy:{setup.proposer.policy_version}"
    if decision.low_confidence:
        proposed = np.asarray(setup.expert(obs[None, :])[0], dtype=np.float64)
        actor = "expert:low_confidence"
    # The vote of interlocked members need not be interlocked (nor is the expert): no pump on a
    # single path, no command to a failed valve. Manual mode is the operator's own test.
    proposed = interlock_one(proposed, obs, setup.z)
    return Choice(proposed, actor, members, decision.confidence, decision.low_confidence)

"""Validation profit during training, and the checkpoint that earned the most of it.

A PPO run's last iterate is not its best: the policy can drift after it peaked (the reason the
shipped recipe once stopped early). A run with ``PPOConfig.validate_every > 0`` scores the
deterministic policy, behind the serving interlock, on a fixed validation suite every few
iterations and keeps the weights with the highest mean profit per m2. The suite has seeds of its
own (:data:`VALIDATION_SEEDS`), apart from training (0..999), the held-out suite (10,000..19,999)
and the unseen seeds reports use (20,000..), so choosing the checkpoint does not peek at the
numbers that are reported.

The curve (one :class:`ValidationPoint` per validation) is what shows whether training longer
helps: ``greentwin train --set validate_every=N`` records it in each member's meta.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from policy.evaluate import Scenario, evaluate_many, scenarios_from_seeds
from policy.networks import ActorCritic

VALIDATION_SEEDS = range(30_000, 31_000)
"""Seeds of the validation suite: checkpoint selection only, never a reported number."""


def validation_suite(n: int = 4, days: float = 7.0, instances: int = 8) -> list[Scenario]:
    """``n`` scenarios on the first validation seeds; soils and faults cycle as in the held-out suite."""
    if not 1 <= n <= len(VALIDATION_SEEDS):
        raise ValueError(f"n must lie in [1, {len(VALIDATION_SEEDS)}], got {n}")
    return scenarios_from_seeds(VALIDATION_SEEDS[0], VALIDATION_SEEDS[0] + n - 1, days, instances)


class AgentController:
    """One network as an evaluation controller: its deterministic action behind the interlock,
    which is what a single member proposes when it serves."""

    def __init__(self, agent: ActorCritic) -> None:
        self.agent = agent

    @torch.no_grad()
    def __call__(self, obs: Any) -> np.ndarray:
        device = next(self.agent.parameters()).device
        x = torch.as_tensor(np.asarray(obs), dtype=torch.float32, device=device)
        return self.agent.act(x).cpu().numpy()


@dataclass(frozen=True)
class ValidationPoint:
    """The policy's validation results after one iteration."""

    iteration: int
    env_steps: int
    profit_eur_m2: float
    """Mean profit per m2 of floor per greenhouse over the suite's episodes."""
    yield_kg_m2: float
    water_l_per_m2: float
    stress_hours: float
    hard_terminations: int


def validate(agent: ActorCritic, scenarios: list[Scenario], iteration: int,
             env_steps: int) -> ValidationPoint:
    """Score ``agent`` on ``scenarios`` (CPU, the network's own weights, no training state touched)."""
    was_training = agent.training
    agent.eval()
    try:
        m = evaluate_many([AgentController(agent)], scenarios)[0]
    finally:
        agent.train(was_training)
    return ValidationPoint(iteration=iteration, env_steps=env_steps, profit_eur_m2=float(m.profit_eur_m2),
                           yield_kg_m2=float(m.yield_kg_m2), water_l_per_m2=float(m.water_l_per_m2),
                           stress_hours=float(m.stress_hours), hard_terminations=int(m.hard_terminations))


@dataclass
class BestCheckpoint:
    """The learning curve so far and the weights at its highest validation profit.

    Kept in a member's directory (``validation.json`` and ``best.pt``) so a resumed run keeps
    the best checkpoint it had found before it was killed.
    """

    curve: list[ValidationPoint] = field(default_factory=list)
    best_state: dict[str, torch.Tensor] | None = None

    @property
    def best(self) -> ValidationPoint | None:
        return max(self.curve, key=lambda p: p.profit_eur_m2) if self.curve else None

    def offer(self, point: ValidationPoint, agent: ActorCritic) -> bool:
        """Record ``point``; keep the agent's weights when it beats every earlier point.

        A resumed run repeats the iterations after its snapshot bit for bit, so a point already
        on the curve is not recorded twice."""
        if any(p.iteration == point.iteration for p in self.curve):
            return False
        best = self.best
        self.curve.append(point)
        if best is None or point.profit_eur_m2 > best.profit_eur_m2:
            self.best_state = copy.deepcopy(agent.state_dict())
            return True
        return False

    def save(self, directory: Path) -> None:
        from policy.checkpoint import atomic_torch_save

        if self.best_state is not None:
            atomic_torch_save(self.best_state, directory / "best.pt")
        tmp = directory / "validation.json.tmp"
        tmp.write_text(json.dumps([asdict(p) for p in self.curve], indent=1))
        tmp.replace(directory / "validation.json")

    @classmethod
    def load(cls, directory: Path) -> BestCheckpoint:
        path = directory / "validation.json"
        if not path.exists():
            return cls()
        curve = [ValidationPoint(**p) for p in json.loads(path.read_text())]
        best = directory / "best.pt"
        state = torch.load(best, weights_only=True) if best.exists() else None
        return cls(curve, state)

    def summary(self) -> dict[str, Any]:
        """For the member's meta: the curve and which iteration was kept."""
        best = self.best
        return {"curve": [asdict(p) for p in self.curve],
                "best_iteration": best.iteration if best is not None else None,
                "best_profit_eur_m2": best.profit_eur_m2 if best is not None else None}

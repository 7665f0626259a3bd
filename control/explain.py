"""Why an ensemble decided what it did: captured on the control path, computed later in bulk.

:func:`capture` keeps what a decision's explanation needs when it is made (the history moves
on); :func:`explain_decisions` computes many at once, off the control path (the writer process).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from control.decision_setup import DecisionMemory, DecisionSetup, Proposer
from control.records import ExplainRequest


def capture(setup: DecisionSetup, memory: DecisionMemory, obs: np.ndarray, action: np.ndarray,
            confidence: float) -> ExplainRequest:
    """Top-3 factors for every ensemble decision; with low confidence also the last 10 steps
    (the report's heat map). Captured now; :func:`explain_decisions` computes them later."""
    from policy.explain import ExplanationHistory

    if memory.history is None:
        memory.history = ExplanationHistory(maxlen=10)
    memory.history.record(setup.gh, obs, action)
    history = memory.history.snapshot(setup.gh) if confidence < 1.0 - setup.threshold else None
    return ExplainRequest(np.array(obs, dtype=np.float32), float(confidence), history)


def explain_decisions(proposer: Proposer, requests: list[ExplainRequest]) -> list[dict[str, Any]]:
    """The explanation records of several ensemble decisions: one integrated-gradients pass for all
    their top factors and one for the saliency maps of the low-confidence ones."""
    from policy.explain import explain_many, saliency_many

    if not requests:
        return []
    ensemble = proposer.ensemble
    if ensemble is None:
        raise ValueError(f"{proposer.policy_version} is a rule: it has no members to attribute a decision to")
    out = [e.to_dict() for e in explain_many(ensemble, np.stack([r.obs for r in requests]),
                                             [r.confidence for r in requests])]
    with_history = [i for i, r in enumerate(requests) if r.history is not None]
    maps = saliency_many(ensemble, [requests[i].history[0] for i in with_history])  # type: ignore[index]
    for i, saliency in zip(with_history, maps, strict=True):
        past_obs, past_actions = requests[i].history  # type: ignore[misc]
        out[i]["history"] = {"observations": past_obs.tolist(), "actions": past_actions.tolist(),
                             "saliency": saliency.tolist()}
    return out

"""One proposer protocol: the ensemble and the threshold expert answer it whole, and nobody asks which is
which."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from control import ExpertProposer, ExplainRequest, Proposer, explain_decisions, load_proposer
from policy.tuning import served_expert
from twin.spec import ObservationSpec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "policy" / "shipped"
MEMBERS = ("policy_version", "ensemble", "propose", "propose_many")
"""What :class:`control.proposal.Proposer` declares."""


def test_the_protocol_declares_what_its_users_ask() -> None:
    declared = {n for n in vars(Proposer) if not n.startswith("_")}
    assert declared == set(MEMBERS)


@pytest.mark.parametrize("kind", ["expert", "ensemble"])
def test_both_kinds_answer_every_member_of_the_protocol(kind: str) -> None:
    proposer = ExpertProposer(served_expert(6)) if kind == "expert" else load_proposer(SHIPPED, 6)
    assert all(hasattr(proposer, name) for name in MEMBERS)
    obs = np.zeros((3, ObservationSpec(6).dim), np.float32)
    many = proposer.propose_many(obs)
    assert many.ndim == 3 and many.shape[1:] == (3, 8)
    np.testing.assert_allclose(np.asarray(proposer.propose(obs[0])), many[:, 0], atol=1e-6)
    assert (proposer.ensemble is None) == (kind == "expert"), "only trained members are explained"


DUCK_TYPING = re.compile(r"\b(?:has|get)attr\([^)]*\b(?:proposer|expert)\b")


def test_nobody_duck_types_a_proposer() -> None:
    """The protocol says what a proposer has: a ``hasattr(proposer, ...)`` would be a second, unwritten
    one."""
    found = [f"{p.relative_to(ROOT)}:{i}" for pkg in ("app", "control")
             for p in sorted((ROOT / pkg).rglob("*.py"))
             for i, line in enumerate(p.read_text().splitlines(), 1) if DUCK_TYPING.search(line)]
    assert found == []


def test_a_rule_is_not_explained() -> None:
    expert = ExpertProposer(served_expert(6))
    assert explain_decisions(expert, []) == []
    with pytest.raises(ValueError, match="rule"):
        explain_decisions(expert, [ExplainRequest(np.zeros(ObservationSpec(6).dim, np.float32), 1.0, None)])

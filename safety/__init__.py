"""Safety layer: ensemble voting, then hard-limit clipping, before anything reaches an actuator.

Typical step::

    decision = vote(proposals)
    action, report = clip(decision.action, ctx, limits)
"""

from safety.action import DEFAULT_ZONES, action_size, safe_state
from safety.clipper import CLIP_ORDER, clip
from safety.context import ClipContext
from safety.limits import SafetyLimits
from safety.report import Decision, Note, RuleFiring, SafetyReport
from safety.rules import RuleId, VoteReason
from safety.voting import vote

__all__ = [
    "CLIP_ORDER",
    "DEFAULT_ZONES",
    "ClipContext",
    "Decision",
    "Note",
    "RuleFiring",
    "RuleId",
    "SafetyLimits",
    "SafetyReport",
    "VoteReason",
    "action_size",
    "clip",
    "safe_state",
    "vote",
]

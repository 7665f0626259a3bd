"""What the service does as its broker link comes and goes.

At start, the bridge's tracker learns the commands the last run sent (from the stored decisions), so
an ack for one still matches, once. After a reconnect, what each edge box was seen holding vouches
for nothing (commands queued during the outage may reach it late, so valve feedback is judged
afresh), and a greenhouse whose last command went out less than its TTL ago gets that action again
as a new command: a box that fell back while the link was down resumes at once, for what is left of
the original TTL.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Collection, Mapping

from app.dispatch import Dispatcher
from app.mqtt.tracker import CommandTracker
from app.recorder import DecisionRecorder
from control import ControlDecision, GreenhouseController


def remember_sent(tracker: CommandTracker, recorder: DecisionRecorder, greenhouses: Collection[str]) -> None:
    """Each greenhouse's newest stored commands (and the answers recorded for them) into ``tracker``."""
    for gh, cmd_id, status in recorder.recent_commands(greenhouses):
        tracker.remember(gh, uuid.UUID(cmd_id), None if status in (None, "pending") else status)


def repeats_after_reconnect(controllers: Mapping[str, GreenhouseController], in_flight: Collection[str],
                            dispatch: Dispatcher, now: float | None = None) -> list[ControlDecision]:
    """The decisions to emit after a reconnect (every controller forgets what its box was seen holding;
    one mid-decision or held by another replica repeats nothing)."""
    t = time.monotonic() if now is None else now
    repeats = []
    for gh, ctl in controllers.items():
        if gh in in_flight or not dispatch.may_command(gh):
            ctl.forget_held_commands()
            continue
        young = t - dispatch.published_at.get(gh, -math.inf) < ctl.ttl_s
        if (d := ctl.after_reconnect(young)) is not None:
            repeats.append(d)
    return repeats

"""Decisions for several greenhouses at once: the control path's stages in the order they run.

    begin     estimation.begin      accounting: time step, water and light, valve feedback
    estimate  estimation.estimate   crop water demand, one Kalman update over every zone
              estimation.grow_crops one crop-model step over every greenhouse's crop twin
    observe   estimation.observe    e-stop reported by telemetry, the policy's observation
    propose   proposal.propose      one ensemble forward per proposer
    finish    proposal.choose       e-stop / manual / vote / expert fallback, interlock
              finish.finish         safety clipper, command, decision record

The vectorisable stages (estimate, propose) run once for the whole batch; the others per
greenhouse. Each greenhouse's state changes exactly as its own ``on_telemetry`` would change it:
``begin`` and ``finish`` each replace its :class:`~control.state.ControllerState` once, with the value
their stage computed from the one before. The state lives in the memory the controller shares
(:class:`~control.decision_setup.DecisionMemory`), so a mode change in between (the controller's own)
is the state the next stage reads.
"""

from __future__ import annotations

from collections.abc import Callable

from control import estimation, proposal
from control.finish import finish
from control.records import ControlDecision
from control.step import Pending, Step


class DecisionBatch:
    """Decisions for several greenhouses (one message each) with the vectorisable work done once.

    A caller may run other work (an e-stop) between the stages, and :meth:`finish` reads the
    mode at that moment.

    ``strict=False`` (the service): a message that fails a stage drops out of the batch alone
    and lands in :attr:`failed`; a failed vectorised stage is retried one greenhouse at a time
    to find it. ``strict=True`` (``on_telemetry``, tests, benchmarks) raises.
    """

    def __init__(self, items: list[Pending], *, strict: bool = True) -> None:
        if len({id(i.memory) for i in items}) != len(items):
            raise ValueError("a batch holds at most one message per greenhouse (the next one waits for it)")
        self.items = items
        self.strict = strict
        self.steps: list[Step] = []
        self.failed: list[tuple[Pending, BaseException]] = []

    def __len__(self) -> int:
        return len(self.steps)

    def begin(self) -> None:
        self.steps = []
        for item in self.items:
            try:
                item.memory.state, step = estimation.begin(item, item.memory.state)
                self.steps.append(step)
            except Exception as exc:
                if self.strict:
                    raise
                self.failed.append((item, exc))

    def estimate(self) -> None:
        self._vectorised(estimation.estimate)
        self._vectorised(estimation.grow_crops)  # apart: a retry must not repeat a Kalman update

    def observe(self, lo: int = 0, hi: int | None = None) -> None:
        self._each(estimation.observe, self.steps[lo:hi])

    def propose(self) -> None:
        self._vectorised(proposal.propose)

    def finish(self, i: int) -> ControlDecision:
        """The last stage, on the controller's state as it stands now (an e-stop since counts)."""
        step = self.steps[i]
        state = step.memory.state
        step.memory.state, decision = finish(step, state, proposal.choose(step, state))
        return decision

    def run(self) -> list[ControlDecision]:
        """Every stage in one go (tests, benchmarks, the single-message path)."""
        self.begin()
        self.estimate()
        self.observe()
        self.propose()
        return [self.finish(i) for i in range(len(self.steps))]

    def _each(self, fn: Callable[[Step], None], steps: list[Step]) -> None:
        for step in steps:
            try:
                fn(step)
            except Exception as exc:
                if self.strict:
                    raise
                self.failed.append((step.item, exc))
                self.steps.remove(step)

    def _vectorised(self, fn: Callable[[list[Step]], None]) -> None:
        try:
            fn(self.steps)
        except Exception:
            if self.strict:
                raise
            self._each(lambda step: fn([step]), list(self.steps))

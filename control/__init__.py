"""The control path: one telemetry message in, one safe command and one decision record out.

Read in this order; each module imports only modules above it (type hints aside):

* :mod:`~control.records` - zones, mode events, decisions: the plain records every stage shares;
* :mod:`~control.setup` - a greenhouse's operator settings as one value, and the limits under them;
* :mod:`~control.valve_evidence` - the commands sent and when valve feedback is evidence of a fault;
* :mod:`~control.state` - a controller's modes, counters and memory as one immutable value;
* :mod:`~control.outlook` - the site's weather forecast and prices as a decision sees them;
* :mod:`~control.crop_twin` - the crop beside the greenhouse: what no sensor measures;
* :mod:`~control.observation` - held readings and irrigation memory: the policy's view;
* :mod:`~control.decision_setup` - what a decision reads, never writes; the objects it changes in place;
* :mod:`~control.step` - a message waiting (``Pending``) and between stages (``Step``);
* :mod:`~control.estimation` - accounting, the Kalman estimate, the policy's observation;
* :mod:`~control.proposal` - every ensemble member's action, the vote, the expert fallback;
* :mod:`~control.explain` - what an ensemble decision's explanation needs, computed later;
* :mod:`~control.finish` - the safety clipper, the command, the decision record;
* :mod:`~control.batch` - the stages in order for several greenhouses at once;
* :mod:`~control.controller` - one greenhouse's controller: set-up, state, modes; ``on_telemetry``.
"""

from control.batch import DecisionBatch
from control.controller import GreenhouseController
from control.explain import explain_decisions
from control.proposal import ExpertProposer, Proposer, load_proposer
from control.records import ControlDecision, ExplainRequest, Mode, ModeEvent, ZoneSetup
from control.step import Pending

__all__ = ["ControlDecision", "DecisionBatch", "ExpertProposer", "ExplainRequest", "GreenhouseController",
           "Mode", "ModeEvent", "Pending", "Proposer", "ZoneSetup", "explain_decisions", "load_proposer"]

"""The control path: one telemetry message in, one safe command and one decision record out.

Read in this order; each module imports only modules above it (type hints aside):

* :mod:`~app.control.records` - zones, mode events, decisions: the plain records every stage shares;
* :mod:`~app.control.setup` - a greenhouse's operator settings as one value, and the limits under them;
* :mod:`~app.control.valve_evidence` - the commands sent and when valve feedback is evidence of a fault;
* :mod:`~app.control.outlook` - the site's weather forecast and prices as a decision sees them;
* :mod:`~app.control.crop_twin` - the crop beside the greenhouse: what no sensor measures;
* :mod:`~app.control.step` - a message waiting (``Pending``) and between stages (``Step``);
* :mod:`~app.control.observation` - held readings and irrigation memory: the policy's view;
* :mod:`~app.control.estimation` - accounting, the Kalman estimate, the policy's observation;
* :mod:`~app.control.proposal` - every ensemble member's action, the vote, the expert fallback;
* :mod:`~app.control.explain` - what an ensemble decision's explanation needs, computed later;
* :mod:`~app.control.finish` - the safety clipper, the command, the decision record;
* :mod:`~app.control.batch` - the stages in order for several greenhouses at once;
* :mod:`~app.control.controller` - one greenhouse's state and modes; ``on_telemetry``.
"""

from app.control.batch import DecisionBatch
from app.control.controller import GreenhouseController
from app.control.explain import explain_decisions
from app.control.proposal import ExpertProposer, Proposer, load_proposer, propose_many
from app.control.records import ControlDecision, ExplainRequest, Mode, ModeEvent, ZoneSetup
from app.control.step import Pending

__all__ = ["ControlDecision", "DecisionBatch", "ExpertProposer", "ExplainRequest", "GreenhouseController", "Mode",
           "ModeEvent", "Pending", "Proposer", "ZoneSetup", "explain_decisions", "load_proposer", "propose_many"]

"""The twin's view ahead: the served policy run 24 hours forward in the greenhouse's own twin.

:mod:`scene` copies what a forecast starts from out of a controller, :mod:`drive` builds the twin
the outlook drives, :mod:`run` steps it with the policy and the safety layer, :mod:`summary` sums
what happened, :mod:`tracking` compares it with what then did, and :mod:`worker` runs all of it in
a process of its own, never on the decision path.
"""

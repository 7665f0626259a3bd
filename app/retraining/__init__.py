"""Nightly retraining: read the recent window, calibrate the twin, fine-tune, gate, promote.

One run of ``greentwin retrain`` goes through the stages of :data:`STAGES` in its own folder
(:mod:`app.retraining.runs`); each finished stage leaves a small state file, so a rerun after a
crash continues at the first unfinished stage. A lock (:mod:`app.retraining.lock`) keeps two
runs from overlapping. Exit codes: :data:`EXIT_PROMOTED`, :data:`EXIT_ERROR`,
:data:`EXIT_REFUSED`, :data:`EXIT_LOCKED`.
"""

from __future__ import annotations

EXIT_PROMOTED = 0
"""The candidate passed the gate and is the promoted version now."""
EXIT_ERROR = 1
"""The run failed (it can be rerun: it resumes at the stage that failed)."""
EXIT_REFUSED = 3
"""The gate refused the candidate; the incumbent stays promoted and the run says why."""
EXIT_LOCKED = 4
"""Another run holds the lock; nothing was done."""

STAGES = ("window", "calibrate", "finetune", "gate", "promote")
"""The stages of a run, in order."""

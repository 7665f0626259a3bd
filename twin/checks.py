"""The environment contract as checks: every return must fit its spec.

Used by ``GreenhouseTwin(validate=True)`` on every step, by ``greentwin validate-env`` and by
the tests.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from twin.env import GreenhouseTwin


class SpecViolation(ValueError):
    """A twin return does not match its declared spec."""


def _np(twin: GreenhouseTwin, a: Any) -> np.ndarray:
    return twin.backend.to_numpy(a)


def check_observation(twin: GreenhouseTwin, obs: Any) -> None:
    spec = twin.observation_spec
    o = _np(twin, obs)
    if o.shape != (twin.num_instances, spec.dim):
        raise SpecViolation(f"observation shape {o.shape}, expected {(twin.num_instances, spec.dim)}")
    if o.dtype != np.float32:
        raise SpecViolation(f"observation dtype {o.dtype}, expected float32")
    bad = ~np.isfinite(o)
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise SpecViolation(f"observation not finite: instance {i}, feature {spec.names[j]}")
    out = (o < spec.low) | (o > spec.high)
    if out.any():
        i, j = np.argwhere(out)[0]
        raise SpecViolation(f"observation out of bounds: instance {i}, {spec.names[j]}={o[i, j]} "
                            f"not in [{spec.low[j]}, {spec.high[j]}] {spec.units[j]}")


def check_step(twin: GreenhouseTwin, obs: Any, reward: Any, terminated: Any, truncated: Any) -> None:
    """Raise :class:`SpecViolation` on the first return that breaks the contract."""
    check_observation(twin, obs)
    b = twin.num_instances
    r = _np(twin, reward)
    if r.shape != (b,) or r.dtype != np.float32 or not np.isfinite(r).all():
        raise SpecViolation(f"reward must be finite float32 of shape ({b},), got {r.dtype} {r.shape}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        f = _np(twin, flag)
        if f.shape != (b,) or f.dtype != np.bool_:
            raise SpecViolation(f"{name} must be bool of shape ({b},), got {f.dtype} {f.shape}")

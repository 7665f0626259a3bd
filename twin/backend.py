"""One array vocabulary for numpy and torch, plus the twin's counter-based random numbers.

The twin is written once against the array-API namespace that ``array_api_compat``
gives for numpy or torch; :class:`Backend` holds that namespace with the device and
the few helpers the standard lacks (row gathers, integer hashing).

Random numbers are *counter based*: a draw is a hash of (seed, instance id, counter),
never the state of a shared generator. So an instance's trajectory does not depend on
how many other instances run beside it, one instance can be rebuilt alone, and the same
seed gives the same bits on numpy and on torch.
"""

from __future__ import annotations

import builtins  # in annotations inside Backend, whose own `int` and `float` are dtypes
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

Array = Any
"""A numpy ndarray or a torch Tensor; the twin never mixes the two."""

BackendName = Literal["numpy", "torch"]

_MASK32 = 0xFFFFFFFF
UNDERFLOW_EXP_ARG = -104.0
"""float32 exp(x) is +0.0 for every x below this (e^-104 is under half the smallest subnormal)."""
_INV_2_32 = 1.0 / 4294967296.0


def _hash32(x: Array) -> Array:
    """lowbias32 (C. Wellons) on int64 arrays holding 32-bit values.

    Products may wrap around 2**64; only the low 32 bits are kept, and those are
    exact under two's-complement wrapping on both numpy and torch.
    """
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    x = x ^ (x >> 16)
    return x


@dataclass(frozen=True)
class Backend:
    """The array library, device and float dtype every twin array lives in."""

    name: BackendName
    device: str = "cpu"

    @property
    def xp(self) -> Any:
        """numpy itself (2.x follows the array API), or a thin direct-call namespace for torch."""
        return _NUMPY_OPS if self.name == "numpy" else _TORCH_OPS

    @property
    def float(self) -> Any:
        return self.xp.float32

    @property
    def int(self) -> Any:
        return self.xp.int64

    def asarray(self, value: Any, dtype: Any = None) -> Array:
        """Array on this backend's device; float data becomes float32 unless told otherwise."""
        if dtype is None:
            probe = np.asarray(value)
            dtype = self.float if probe.dtype.kind == "f" else None
        if self.name == "torch":
            import torch

            if isinstance(value, torch.Tensor):
                return (value.to(device=self.device, dtype=dtype) if dtype is not None
                        else value.to(self.device))
            return torch.as_tensor(np.asarray(value), device=self.device, dtype=dtype)
        return np.asarray(value, dtype=dtype)

    def zeros(self, shape: tuple[builtins.int, ...], dtype: Any = None) -> Array:
        return self.xp.zeros(shape, dtype=dtype or self.float, device=self.device)

    def full(self, shape: tuple[builtins.int, ...], value: builtins.float, dtype: Any = None) -> Array:
        return self.xp.full(shape, value, dtype=dtype or self.float, device=self.device)

    def arange(self, n: builtins.int) -> Array:
        return self.xp.arange(n, dtype=self.int, device=self.device)

    def to_numpy(self, a: Array) -> np.ndarray:
        if self.name == "torch":
            return a.detach().cpu().numpy()
        return np.asarray(a)

    def take_rows(self, table: Array, rows: Array) -> Array:
        """``table[rows]`` for a 2-D table and an integer index array of any shape."""
        if self.name == "torch":
            return table.index_select(0, rows.reshape(-1)).reshape(*rows.shape, table.shape[1])
        return np.take(table, rows, axis=0)  # the same rows as table[rows], several times faster

    def gather_last(self, a: Array, index: Array) -> Array:
        """``a[..., index]`` element-wise along the last axis (``take_along_axis``)."""
        if self.name == "torch":
            import torch

            return torch.gather(a, -1, index)
        return np.take_along_axis(a, index, axis=-1)

    # ---- counter-based random numbers -------------------------------------------------
    def instance_keys(self, seed: builtins.int, instance_ids: Array) -> Array:
        """Per-instance 32-bit keys from the global seed and each instance's id."""
        s = int(seed) & _MASK32
        ids = self.asarray(instance_ids, dtype=self.int)
        return _hash32(_hash32(ids ^ _hash32(s)) + 0x9E3779B9)  # the seed is hashed as a Python int

    def hash_counter(self, keys: Array, counter: Array | builtins.int, stream: builtins.int) -> Array:
        """A fresh 32-bit value per instance for (key, counter, stream), as int64.

        ``counter`` is a Python int or an int64 array broadcastable against ``keys``.
        """
        c = _hash32(((counter & _MASK32) * 0x2545F491 + stream * 0x68E31DA4) ^ 0x5BD1E995)
        return _hash32(keys ^ c)

    def uniform(self, keys: Array, counter: Array | builtins.int, stream: builtins.int,
                n: builtins.int) -> Array:
        """``n`` independent U[0, 1) float32 draws per instance: shape ``keys.shape + (n,)``."""
        ctr = counter if isinstance(counter, int) else counter[..., None]
        h = self.hash_counter(keys[..., None], ctr, stream)
        h = _hash32(h ^ _hash32(self.arange(n) * 0x27D4EB2F + 0x165667B1))
        return self._to_unit(h)

    def _to_unit(self, h: Array) -> Array:
        # 24 high bits -> exactly representable float32 in [0, 1).
        return self.xp.astype(h >> 8, self.float) * (1.0 / 16777216.0)


class _NumpyOps:
    """numpy, with faster paths for what the twin does most: reductions over a short last axis
    (numpy's reduce loops slowly over rows of 2-6 elements; a chain of column adds does not)
    and clipping (``np.clip`` adds dispatch overhead that ``minimum(maximum())`` avoids).

    The column chain adds left to right, as ``np.sum`` does for rows shorter than 8, so it gives
    the same bits as ``np.sum`` and, unlike a matrix-vector product (whose BLAS kernel blocks
    rows by the batch size on some CPUs), the same bits for a row whatever the batch size."""

    SHORT_ROW = 8
    """Rows up to this length are summed by the column chain; longer ones by ``np.sum``."""

    def __getattr__(self, name: str) -> Any:
        value = getattr(np, name)
        setattr(self, name, value)  # resolved once: later lookups skip __getattr__
        return value

    @staticmethod
    def _trailing(x: Any, axis: Any) -> int | None:
        """Number of trailing elements reduced, if ``axis`` names the last axes of a float array."""
        if x.dtype.kind != "f" or axis is None:
            return None
        axes = sorted(a % x.ndim for a in ((axis,) if isinstance(axis, int) else axis))
        if axes != list(range(x.ndim - len(axes), x.ndim)):
            return None
        return int(np.prod([x.shape[a] for a in axes]))

    def sum(self, x: Any, axis: Any = None) -> Any:
        n = self._trailing(x, axis)
        if n is None:
            return np.sum(x, axis=axis)
        lead = x.shape[: x.ndim - (1 if isinstance(axis, int) else len(axis))]
        if n > self.SHORT_ROW or n == 0:
            return np.sum(x.reshape(*lead, n), axis=-1)
        rows = x.reshape(*lead, n)
        total = rows[..., 0] + 0.0  # -0.0 + 0.0 = +0.0, as np.sum starts from +0.0
        for i in range(1, n):
            total = total + rows[..., i]
        return total

    def mean(self, x: Any, axis: Any = None) -> Any:
        n = self._trailing(x, axis)
        return np.mean(x, axis=axis) if n is None else self.sum(x, axis) * (1.0 / n)

    def any(self, x: Any, axis: Any = None) -> Any:
        if axis is None or x.dtype != np.bool_:
            return np.any(x, axis=axis)
        return self.sum(x.astype(np.float32), axis) > 0.0

    @staticmethod
    def exp_decay(x: Any) -> Any:
        """``exp`` (numpy has no slow path for underflow; see :meth:`_TorchOps.exp_decay`)."""
        return np.exp(x)

    @staticmethod
    def clip(x: Any, lo: Any, hi: Any) -> Any:
        return np.minimum(np.maximum(x, lo), hi)


_NUMPY_OPS: Any = _NumpyOps()


class _TorchOps:
    """The array-API names the twin uses, mapped straight onto torch calls.

    ``array_api_compat.torch`` does the same more generally, but its per-call Python
    wrapping costs more than the arithmetic at small batch sizes and hides the graph from
    ``torch.compile``.
    """

    def __init__(self) -> None:
        import torch

        self._t = torch
        self.float32, self.float64, self.int64, self.bool = (torch.float32, torch.float64, torch.int64,
                                                             torch.bool)
        self.nan = float("nan")
        for name in ("exp", "sqrt", "log", "sin", "cos", "floor", "isfinite", "where", "clip", "zeros_like",
                     "broadcast_to", "argsort", "atan2", "abs"):
            setattr(self, name, getattr(torch, name))

    def maximum(self, a: Any, b: Any) -> Any:
        if isinstance(b, (int, float)):
            return self._t.clamp(a, min=b)
        if isinstance(a, (int, float)):
            return self._t.clamp(b, min=a)
        return self._t.maximum(a, b)

    def minimum(self, a: Any, b: Any) -> Any:
        if isinstance(b, (int, float)):
            return self._t.clamp(a, max=b)
        if isinstance(a, (int, float)):
            return self._t.clamp(b, max=a)
        return self._t.minimum(a, b)

    def astype(self, x: Any, dtype: Any) -> Any:
        return x.to(dtype)

    def exp_decay(self, x: Any) -> Any:
        """``exp(x)`` for decay exponents that mostly underflow to 0, with the same bits.

        On CPUs, torch's vectorised exp takes a slow path (about ten times slower) on arguments
        below -104, where it returns exactly +0.0 anyway; those arguments are replaced by 0 before
        the exp and their results by +0.0 after it. Other devices and dtypes take the plain exp.
        """
        if not x.is_cpu or x.dtype != self._t.float32:
            return self._t.exp(x)
        under = x < UNDERFLOW_EXP_ARG
        return self._t.where(under, 0.0, self._t.exp(self._t.where(under, 0.0, x)))

    def sum(self, x: Any, axis: Any = None) -> Any:
        return self._t.sum(x) if axis is None else self._t.sum(x, dim=axis)

    def mean(self, x: Any, axis: Any = None) -> Any:
        return self._t.mean(x) if axis is None else self._t.mean(x, dim=axis)

    def any(self, x: Any, axis: Any = None) -> Any:
        return self._t.any(x) if axis is None else self._t.any(x, dim=axis)

    def all(self, x: Any, axis: Any = None) -> Any:
        return self._t.all(x) if axis is None else self._t.all(x, dim=axis)

    def concat(self, arrays: Any, axis: int = 0) -> Any:
        return self._t.cat(list(arrays), dim=axis)

    def stack(self, arrays: Any, axis: int = 0) -> Any:
        return self._t.stack(list(arrays), dim=axis)

    def sort(self, x: Any, axis: int = -1) -> Any:
        return self._t.sort(x, dim=axis).values

    def nonzero(self, x: Any) -> Any:
        return self._t.nonzero(x, as_tuple=True)

    def zeros(self, shape: Any, dtype: Any = None, device: Any = None) -> Any:
        return self._t.zeros(shape, dtype=dtype, device=device)

    def full(self, shape: Any, value: float, dtype: Any = None, device: Any = None) -> Any:
        return self._t.full(shape, value, dtype=dtype, device=device)

    def arange(self, n: int, dtype: Any = None, device: Any = None) -> Any:
        return self._t.arange(n, dtype=dtype, device=device)


class _LazyTorchOps:
    """Defers importing torch until a torch backend is first used."""

    _ops: _TorchOps | None = None

    def __getattr__(self, name: str) -> Any:
        if _LazyTorchOps._ops is None:
            _LazyTorchOps._ops = _TorchOps()
        value = getattr(_LazyTorchOps._ops, name)
        setattr(self, name, value)  # later lookups skip __getattr__: the step makes hundreds of them
        return value


_TORCH_OPS: Any = _LazyTorchOps()


def make_backend(name: BackendName, device: str = "cpu") -> Backend:
    """Validate the backend name and device once, at construction."""
    if name not in ("numpy", "torch"):
        raise ValueError(f"backend must be 'numpy' or 'torch', got {name!r}")
    if name == "numpy" and device != "cpu":
        raise ValueError(f"the numpy backend runs on the CPU only, got device={device!r}")
    if name == "torch":
        import torch

        dev = torch.device(device)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device='cuda' requested but torch sees no CUDA device")
    return Backend(name=name, device=device)

"""A CPU stand-in for CuPy as the timed calls' array module (verdict/base_sets.py): NumPy under
another name whose arrays, like CuPy's, refuse to mix with host arrays, and whose generator has
only the methods CuPy's ``Generator`` has.

A task generator that passes with NumPy can still fail under CuPy: it adds a host ``np.arange`` to a
drawn array, assigns a host array into one, or calls ``rng.normal`` (CuPy's generator has none).
On a GPU such a task silently loses its per-call device draws (it falls back to the host, or to
fixed base sets on large shapes); the thirty-sixth session's GPU run found three.  This stand-in
makes those mistakes fail on the CPU:

- ``DeviceArray`` (an ``ndarray`` subclass): a ufunc or NumPy function given one of them and a
  host array of one or more dimensions raises ``TypeError``, as CuPy does; so does assigning a
  host array into one.  Host scalars, 0-d arrays and Python numbers mix freely, as with CuPy.
  Results computed from device arrays are device arrays; arrays made without one (``np.arange``,
  ``np.array([...])``) are host arrays, as they would be under CuPy.
- ``StrictDevice().random.default_rng(seed)``: NumPy's generator behind the methods that CuPy's
  ``cupy.random.Generator`` offers (cupy/random/_generator_api.pyx), each returning device arrays.
"""
from __future__ import annotations

from typing import Any

import numpy as np

# cupy.random.Generator's sampling methods, as listed on the device (CuPy 14.2.0, thirty-sixth
# session): no normal, choice, permutation or standard_t
CUPY_GENERATOR_METHODS = frozenset({
    "beta", "binomial", "chisquare", "dirichlet", "exponential", "f", "gamma", "geometric",
    "hypergeometric", "integers", "logseries", "poisson", "power", "random", "standard_exponential",
    "standard_gamma", "standard_normal", "uniform",
})


def _is_host_array(x: Any) -> bool:
    return isinstance(x, np.ndarray) and not isinstance(x, DeviceArray) and x.ndim > 0


def _refuse_host_arrays(operation: str, args: Any) -> None:
    leaves: list[Any] = []
    _map(leaves.append, args)
    if any(isinstance(x, DeviceArray) for x in leaves) and any(_is_host_array(x) for x in leaves):
        raise TypeError(f"{operation}: a host numpy.ndarray mixed with device arrays "
                        "(CuPy raises here: 'Unsupported type <class numpy.ndarray>')")


def _map(convert: Any, items: Any) -> Any:
    """``convert`` applied to every leaf of nested lists, tuples and dicts."""
    if isinstance(items, (list, tuple)):
        return type(items)(_map(convert, x) for x in items)
    if isinstance(items, dict):
        return {k: _map(convert, v) for k, v in items.items()}
    return convert(items)


def _to_host(items: Any) -> Any:
    return _map(lambda x: x.view(np.ndarray) if isinstance(x, DeviceArray) else x, items)


def _to_device(items: Any) -> Any:
    return _map(lambda x: x.view(DeviceArray) if isinstance(x, np.ndarray) and not isinstance(x, DeviceArray)
                else x, items)


class DeviceArray(np.ndarray):
    """An array of the stand-in device."""

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        _refuse_host_arrays(f"{ufunc.__name__}.{method}", (inputs, kwargs.get("out", ())))
        return _to_device(getattr(ufunc, method)(*_to_host(inputs), **_to_host(kwargs)))

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        _refuse_host_arrays(func.__name__, (args, kwargs))
        return _to_device(func(*_to_host(args), **_to_host(kwargs)))

    def __setitem__(self, key: Any, value: Any) -> None:
        if _is_host_array(value):
            raise ValueError("a host numpy.ndarray assigned into a device array "
                             "(CuPy raises here: 'non-scalar numpy.ndarray cannot be used for fill')")
        self.view(np.ndarray)[_to_host(key)] = _to_host(value)


class StrictGenerator:
    """NumPy's generator behind CuPy's generator's methods only, drawing device arrays."""

    def __init__(self, seed: Any) -> None:
        self._numpy = np.random.default_rng(seed)

    def __getattr__(self, name: str) -> Any:
        if name not in CUPY_GENERATOR_METHODS:
            raise AttributeError(f"'Generator' object has no attribute {name!r} (CuPy's generator has none)")
        method = getattr(self._numpy, name)

        def draw(*args: Any, **kwargs: Any) -> Any:
            return _to_device(np.asarray(method(*_to_host(args), **_to_host(kwargs))))
        return draw


class _Random:
    def default_rng(self, seed: Any = None) -> StrictGenerator:
        return StrictGenerator(seed)


class StrictDevice:
    """The array module: ``xp is not np`` (so the device path is taken) and ``xp.ndarray`` is
    ``DeviceArray`` (so ``make_case`` checks every input is a device array)."""

    ndarray = DeviceArray
    random = _Random()

    def __getattr__(self, name: str) -> Any:
        return getattr(np, name)

"""Scoped float64.

The float64 methods (``minimax``, ``linear_rl``) need double precision, but turning on
``jax_enable_x64`` globally would silently change the dtypes of every other method in the
same process. :func:`enable_x64` scopes it: code traced inside the block sees x64, and jit
caches keep the two modes apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

try:  # JAX's own thread-local config state; a context manager when called.
  from jax._src.config import enable_x64 as _x64_state
except ImportError:  # pragma: no cover - fallback for a JAX that moved it.
  _x64_state = None


@contextlib.contextmanager
def enable_x64(enabled: bool = True) -> Iterator[None]:
  """Runs the block with ``jax_enable_x64 = enabled``, restoring the previous mode after."""
  if _x64_state is not None:
    with _x64_state(enabled):
      yield
    return
  previous = jax.config.jax_enable_x64  # pragma: no cover
  jax.config.update("jax_enable_x64", enabled)  # pragma: no cover
  try:  # pragma: no cover
    yield
  finally:  # pragma: no cover
    jax.config.update("jax_enable_x64", previous)


def x64_enabled() -> bool:
  return bool(jax.numpy.zeros((), dtype=float).dtype == jax.numpy.float64)

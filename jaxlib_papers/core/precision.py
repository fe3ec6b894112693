"""Scoped float64.

The float64 methods (``minimax``, ``linear_rl``) need double precision, but turning on
``jax_enable_x64`` globally would silently change the dtypes of every other method in the
same process. :func:`enable_x64` scopes it with JAX's public thread-local context manager
(``jax.enable_x64``): code traced inside the block sees x64, and jit caches keep the two
modes apart.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax


@contextlib.contextmanager
def enable_x64(enabled: bool = True) -> Iterator[None]:
  """Runs the block with ``jax_enable_x64 = enabled``, restoring the previous mode after."""
  with jax.enable_x64(enabled):
    yield


def x64_enabled() -> bool:
  return bool(jax.numpy.zeros((), dtype=float).dtype == jax.numpy.float64)

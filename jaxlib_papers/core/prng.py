"""``jax.random`` draws with the same values and a fraction of the XLA:CPU compile time.

With JAX's partitionable threefry (the default since JAX 0.5) the counter of element
``i`` of a draw is its row-major flat index, so a draw of shape ``[a, b, ...]`` equals the
draw of ``[a * b * ...]`` reshaped, bit for bit (``tests/core/test_core_prng.py`` checks
every function here against ``jax.random``, in and out of ``jit``/``vmap`` and sharded).
Only the compile time differs: XLA:CPU (jax 0.10) compiles a multi-axis draw with a
short trailing axis (``[n, 10]``, ``[B, N, S, 2]``) in 1-2 s and the flat one in 0.2-0.3 s
(``benchmarks/compile_time.py``). A training step with a few draws pays it once per
program, and a test suite of small programs pays it hundreds of times. These functions
draw flat and reshape; the package code uses them instead of ``jax.random``'s (a test
greps for it). Keys, splitting and folding stay ``jax.random``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike, DTypeLike

__all__ = ["normal", "uniform", "randint", "bernoulli", "laplace", "truncated_normal",
           "gumbel", "categorical", "rademacher", "lecun_normal"]

Shape = Sequence[int]


def _flat(draw: Callable[[tuple[int, ...]], jax.Array], shape: Shape) -> jax.Array:
  shape = tuple(int(s) for s in shape)
  if len(shape) <= 1:
    return draw(shape)
  return draw((math.prod(shape),)).reshape(shape)


def normal(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32) -> jax.Array:
  """``jax.random.normal(key, shape, dtype)``."""
  return _flat(lambda s: jax.random.normal(key, s, dtype), shape)


def uniform(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32,
            minval: ArrayLike = 0.0, maxval: ArrayLike = 1.0) -> jax.Array:
  """``jax.random.uniform(key, shape, dtype, minval, maxval)`` (scalar bounds)."""
  _check_scalar(minval=minval, maxval=maxval)
  return _flat(lambda s: jax.random.uniform(key, s, dtype, minval, maxval), shape)


def randint(key: jax.Array, shape: Shape, minval: ArrayLike, maxval: ArrayLike,
            dtype: DTypeLike = jnp.int32) -> jax.Array:
  """``jax.random.randint(key, shape, minval, maxval, dtype)`` (scalar bounds)."""
  _check_scalar(minval=minval, maxval=maxval)
  return _flat(lambda s: jax.random.randint(key, s, minval, maxval, dtype), shape)


def laplace(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32) -> jax.Array:
  """``jax.random.laplace(key, shape, dtype)``."""
  return _flat(lambda s: jax.random.laplace(key, s, dtype), shape)


def bernoulli(key: jax.Array, p: ArrayLike = 0.5, shape: Shape | None = None) -> jax.Array:
  """``jax.random.bernoulli(key, p, shape)``; ``p`` broadcasts to ``shape`` (default:
  ``p``'s shape)."""
  p = jnp.asarray(p)
  shape = p.shape if shape is None else tuple(shape)
  p_flat = jnp.broadcast_to(p, shape).reshape(-1) if len(shape) > 1 else p
  return _flat(lambda s: jax.random.bernoulli(key, p_flat, s), shape)


def truncated_normal(key: jax.Array, lower: ArrayLike, upper: ArrayLike,
                     shape: Shape, dtype: DTypeLike = jnp.float32) -> jax.Array:
  """``jax.random.truncated_normal(key, lower, upper, shape, dtype)`` (scalar bounds)."""
  _check_scalar(lower=lower, upper=upper)
  return _flat(lambda s: jax.random.truncated_normal(key, lower, upper, s, dtype), shape)


def gumbel(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32) -> jax.Array:
  """``jax.random.gumbel(key, shape, dtype)`` (default mode)."""
  return _flat(lambda s: jax.random.gumbel(key, s, dtype), shape)


def categorical(key: jax.Array, logits: ArrayLike, axis: int = -1,
                shape: Shape | None = None) -> jax.Array:
  """``jax.random.categorical(key, logits, axis, shape)`` (Gumbel-max over ``axis``).

  Without ``shape`` the output has ``logits``' shape without ``axis``; with ``shape``
  (``axis=-1`` only) it is ``shape``, whose trailing axes are ``logits``' batch axes.
  """
  logits = jnp.asarray(logits)
  if shape is None:
    return jnp.argmax(gumbel(key, logits.shape, logits.dtype) + logits, axis=axis)
  if axis != -1:
    raise ValueError(f"categorical with a shape supports axis=-1 only, got axis={axis}")
  shape = tuple(int(s) for s in shape)
  if shape[len(shape) - (logits.ndim - 1):] != logits.shape[:-1]:
    raise ValueError(f"shape {shape} must end with the batch shape of logits "
                     f"{logits.shape[:-1]}")
  noise = gumbel(key, shape + logits.shape[-1:], logits.dtype)
  return jnp.argmax(noise + logits, axis=-1)


def rademacher(key: jax.Array, shape: Shape, dtype: DTypeLike = jnp.int32) -> jax.Array:
  """``jax.random.rademacher(key, shape, dtype)``: +-1 with equal probability."""
  return _flat(lambda s: jax.random.rademacher(key, s, dtype), shape)


def lecun_normal() -> Callable[..., jax.Array]:
  """``jax.nn.initializers.lecun_normal()`` (flax's default kernel init), equal to it bit
  for bit: a truncated normal on (-2, 2) scaled to variance 1 / fan_in, fan_in the
  product of every axis but the last.

  Returns:
    ``init(key, shape, dtype=float32) -> [*shape]`` for real dtypes.
  """
  def init(key, shape, dtype=jnp.float32):
    shape = tuple(int(s) for s in shape)
    if len(shape) < 2:
      raise ValueError(f"lecun_normal needs a shape of rank >= 2 (fan-in, fan-out), got {shape}")
    fan_in = math.prod(shape) // shape[-1]
    variance = jnp.array(1.0 / fan_in, dtype=dtype)
    stddev = jnp.sqrt(variance) / jnp.array(.87962566103423978, dtype)
    return truncated_normal(key, -2, 2, shape, dtype) * stddev
  return init


def _check_scalar(**values: ArrayLike) -> None:
  for name, value in values.items():
    if jnp.ndim(value) != 0:
      raise ValueError(f"{name} must be a scalar (a bound broadcast over the draw), got "
                       f"shape {jnp.shape(value)}; use jax.random directly for array bounds")

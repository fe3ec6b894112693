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

``normal`` and ``uniform`` (float32, typed threefry keys, JAX's defaults) also run faster:
their random bits are the Threefry-2x32 hash written out round by round here. JAX lowers
the hash on CPU as a rolled loop of five iterations, each a pass over the whole draw in
memory that nothing fuses with; written out, inside a loop of its own, XLA fuses the hash
with the conversion to floats and stores the draw once (a [1024, 4, 100, 2] normal draw on
one core: 12.3 -> 5.2 ms). The bits are JAX's, and so are the draws (tested).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike, DTypeLike

__all__ = ["normal", "uniform", "randint", "bernoulli", "laplace", "truncated_normal",
           "gumbel", "categorical", "rademacher", "lecun_normal"]

Shape = Sequence[int]


def _flat(draw: Callable[[tuple[int, ...]], jax.Array], shape: Shape) -> jax.Array:
  shape = tuple(int(s) for s in shape)
  if len(shape) <= 1:
    return draw(shape)
  return draw((math.prod(shape),)).reshape(shape)


# Threefry-2x32's rotation constants, the first four rounds and the next four alternately
# (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = 0x1BD11BDA


def _written_out(key: jax.Array, dtype: DTypeLike, size: int) -> bool:
  """Whether a draw can take the written-out hash: a typed threefry key (one, or one per
  vmapped call), float32, JAX's partitionable counters, fewer than 2^32 numbers."""
  return (isinstance(key, jax.Array) and jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
          and key.shape == () and jax.random.key_impl(key) == "threefry2x32"
          and jnp.dtype(dtype) == jnp.float32 and size < 2**32
          and bool(jax.config.jax_threefry_partitionable))


def _threefry_bits(words: tuple[jax.Array, jax.Array], counters: jax.Array) -> jax.Array:
  """The random bits of the numbers at ``counters`` (uint32 [m]) of a draw: uint32 [m].

  With partitionable counters, number i of a draw is the Threefry-2x32 hash of the counter
  pair (0, i) under the key's two words, its two output words xor-ed: 20 rounds of add,
  rotate and xor, the key schedule injected after every four.
  """
  ks = (*words, words[0] ^ words[1] ^ jnp.uint32(_PARITY))
  x0 = jnp.zeros(counters.shape, jnp.uint32) + ks[0]
  x1 = counters + ks[1]
  for block in range(5):
    for r in _ROTATIONS[block % 2]:
      x0 = x0 + x1
      x1 = x0 ^ ((x1 << jnp.uint32(r)) | (x1 >> jnp.uint32(32 - r)))
    x0 = x0 + ks[(block + 1) % 3]
    x1 = x1 + ks[(block + 2) % 3] + jnp.uint32(block + 1)
  return x0 ^ x1


def _scaled(unit: jax.Array, minval, maxval) -> jax.Array:
  """``jax.random.uniform``'s map of [0, 1) floats onto [minval, maxval)."""
  lo, hi = jnp.float32(minval), jnp.float32(maxval)
  return jax.lax.max(lo, unit * (hi - lo) + lo)


def _written_out_draw(key: jax.Array, size: int,
                      transform: Callable[[jax.Array], jax.Array]) -> jax.Array:
  """float32 [size]: ``transform`` of the draw's uniform [0, 1) floats (23 random mantissa
  bits under the exponent of 1.0, minus 1, as ``jax.random.uniform`` makes them).

  The even and the odd numbers are made by the two steps of a ``lax.map`` (so that a draw
  sharded along its leading axis is computed shard by shard). A loop body is compiled on
  its own, so the hash runs once, fused with the conversion and ``transform``, and its
  result is stored; left in the caller's program, XLA would fuse the hash (~100 integer
  operations a number) into every fusion that reads the draw and recompute it there.
  """
  data = jax.random.key_data(key)
  words = (data[0], data[1])
  one = jnp.uint32(np.array(1.0, np.float32).view(np.uint32))
  half = -(-size // 2)

  def numbers(parity):  # the numbers 2 j + parity, j < half
    counters = jax.lax.iota(jnp.uint32, half) * jnp.uint32(2) + parity
    bits = _threefry_bits(words, counters) >> jnp.uint32(9)
    return transform(jax.lax.bitcast_convert_type(bits | one, jnp.float32) - jnp.float32(1.0))

  pairs = jax.lax.map(numbers, jnp.arange(2, dtype=jnp.uint32))   # [2, half]
  return pairs.T.reshape(2 * half)[:size]


def normal(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32) -> jax.Array:
  """``jax.random.normal(key, shape, dtype)``."""
  def draw(s):
    if not _written_out(key, dtype, math.prod(s)):
      return jax.random.normal(key, s, dtype)
    # jax.random's transform: sqrt(2) erfinv(u), u uniform on (nextafter(-1, 0), 1).
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
    to_normal = lambda unit: jnp.float32(np.sqrt(2.0)) * jax.lax.erf_inv(_scaled(unit, lo, 1.0))
    return _written_out_draw(key, math.prod(s), to_normal).reshape(s)
  return _flat(draw, shape)


def uniform(key: jax.Array, shape: Shape = (), dtype: DTypeLike = jnp.float32,
            minval: ArrayLike = 0.0, maxval: ArrayLike = 1.0) -> jax.Array:
  """``jax.random.uniform(key, shape, dtype, minval, maxval)`` (scalar bounds)."""
  _check_scalar(minval=minval, maxval=maxval)

  def draw(s):
    if not _written_out(key, dtype, math.prod(s)):
      return jax.random.uniform(key, s, dtype, minval, maxval)
    return _written_out_draw(key, math.prod(s),
                             lambda unit: _scaled(unit, minval, maxval)).reshape(s)
  return _flat(draw, shape)


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

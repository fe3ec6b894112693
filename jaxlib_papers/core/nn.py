"""Shared flax (linen) modules: the sinusoidal time embedding, MLPs, a time-conditioned MLP.

The suite uses flax.linen throughout: parameters are plain pytrees, which is what the
pure-function kernels take and return (``model.apply(params, ...)``). ``Dense``,
``DenseGeneral`` and ``Conv`` are flax's layers with their default kernel init drawn
through :mod:`jaxlib_papers.core.prng`: the same parameters, a faster-compiling init.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import prng

Dense = functools.partial(nn.Dense, kernel_init=prng.lecun_normal())
DenseGeneral = functools.partial(nn.DenseGeneral, kernel_init=prng.lecun_normal())
Conv = functools.partial(nn.Conv, kernel_init=prng.lecun_normal())


def silu(x: jax.Array) -> jax.Array:
  """SiLU, x sigmoid(x), written as (x / 2) (1 + tanh(x / 2)): the same function.

  XLA:CPU expands ``jax.nn.silu``'s sigmoid into an exp and a divide, and emits tanh as
  one rational polynomial: over a [2000, 128] float32 array this form took 0.72x the
  time on this suite's 2-core CPU (``seeds/ocm.md``, "Speed"). Float32 error against the
  exact value: at most 2^-22 max(|x|, 1), as ``jax.nn.silu``'s own (both measured near
  1.5e-7 max(|x|, 1), tested); only where the value is near 0 (x < -4) does the tanh
  form keep fewer relative digits. Gradients: autodiff of the same expression.
  """
  half = 0.5 * x
  return half + half * jnp.tanh(half)


def timestep_embedding(t: jax.Array, dim: int, max_period: float = 10_000.0, *,
                       cos_first: bool = False) -> jax.Array:
  """Transformer-style sinusoidal embedding, the one every method uses.

  Args:
    t: [...] times or step indices (any real dtype; computed in float32).
    dim: embedding size; an odd size gets one zero feature at the end.
    max_period: the longest period, 1 / the lowest frequency.
    cos_first: [cos, sin] order (the FSBM/DeepGSB toy field) instead of [sin, cos].

  Returns:
    [..., dim] float32.
  """
  half = dim // 2
  freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=jnp.float32) / half)
  args = jnp.asarray(t, jnp.float32)[..., None] * freqs
  parts = [jnp.cos(args), jnp.sin(args)] if cos_first else [jnp.sin(args), jnp.cos(args)]
  emb = jnp.concatenate(parts, axis=-1)
  if dim % 2:
    emb = jnp.concatenate([emb, jnp.zeros_like(emb[..., :1])], axis=-1)
  return emb


def check_time_shape(t: jax.Array, x: jax.Array) -> None:
  """Raises unless ``t``'s shape broadcasts to ``x.shape[:-1]`` (the points' shape).

  For fields ``v(x [..., D], t)`` that embed ``t`` at its own shape and broadcast the
  features, so that a scalar time is embedded once.
  """
  points = tuple(x.shape[:-1])
  try:
    joint = jnp.broadcast_shapes(tuple(t.shape), points)
  except ValueError:
    joint = None
  if joint != points:
    raise ValueError(f"t: expected a shape that broadcasts to the points' shape {points} "
                     f"(x is {tuple(x.shape)}), got {tuple(t.shape)}")


class SinusoidalEmbedding(nn.Module):
  """:func:`timestep_embedding` of ``scale * t`` as a module: ``t: [...] -> [..., dim]``."""

  dim: int
  max_period: float = 10_000.0
  scale: float = 1000.0  # times in [0, 1] are spread over the frequencies like indices

  @nn.compact
  def __call__(self, t: jax.Array) -> jax.Array:
    return timestep_embedding(self.scale * jnp.asarray(t, jnp.float32), self.dim,
                              self.max_period)


class MLP(nn.Module):
  """``x: [..., d_in] -> [..., features[-1]]``; activation between layers, none after.

  Attributes:
    features: widths of the layers, last one is the output size.
    activation: nonlinearity between layers.
    zero_init_last: zero the last layer (a head that starts as the identity/zero map).
  """

  features: Sequence[int]
  activation: Callable[[jax.Array], jax.Array] = nn.silu
  zero_init_last: bool = False

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for i, width in enumerate(self.features):
      last = i == len(self.features) - 1
      zero = last and self.zero_init_last
      init = nn.initializers.zeros if zero else nn.linear.default_kernel_init
      x = nn.Dense(width, kernel_init=init)(x)
      if not last:
        x = self.activation(x)
    return x


class TimeMLP(nn.Module):
  """A vector field ``v(x, t)``: ``x: [..., D], t: [...] or [] -> [..., out_dim]``.

  ``x`` goes through a ``depth``-layer MLP and ``t`` through a sinusoidal embedding and
  an MLP; the two are summed, passed through the activation and a final MLP. ``t``'s shape
  broadcasts against ``x.shape[:-1]``, and ``t`` is embedded at its own shape: a time shared
  by the batch (``t`` a scalar, as an ODE or SDE solver's step has it) costs its MLP once,
  not once per point (same function; only float rounding can differ).
  """

  out_dim: int
  hidden: int = 128
  depth: int = 3
  time_embed_dim: int = 128
  activation: Callable[[jax.Array], jax.Array] = nn.silu
  zero_init_last: bool = False

  @nn.compact
  def __call__(self, x: jax.Array, t: jax.Array) -> jax.Array:
    t = jnp.asarray(t, x.dtype)
    check_time_shape(t, x)
    t_emb = SinusoidalEmbedding(self.time_embed_dim)(t)
    t_feat = MLP((self.hidden, self.hidden), self.activation)(t_emb)  # [*t.shape, hidden]
    x_feat = MLP((self.hidden,) * self.depth, self.activation)(x)
    h = self.activation(x_feat + t_feat)
    return MLP((self.hidden, self.out_dim), self.activation, self.zero_init_last)(h)

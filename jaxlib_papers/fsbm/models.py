"""Vector-field network v_theta(x, t) (flax.linen).

Same shape as the official toy field: a sinusoidal embedding of 1000 t feeds a
2-layer MLP, x feeds a 3-layer MLP, the two are summed and a 2-layer MLP maps
the sum to D outputs.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import nn as core_nn


def timestep_embedding(t: jax.Array, dim: int, max_period: float = 10000.0):
  """[..., dim] sinusoidal embedding of ``t`` [...], [cos, sin] as in the official field."""
  return core_nn.timestep_embedding(t, dim, max_period, cos_first=True)


class VectorField(nn.Module):
  """v_theta: x [..., D], t [...] -> [..., D].

  ``t``'s shape broadcasts against ``x.shape[:-1]``; it is embedded at its own shape, so a
  time shared by the batch (a scalar: the simulator's step) costs the time MLP once.
  """

  dim: int
  hidden: int = 128
  time_embed_dim: int = 128
  x_depth: int = 3
  step_scale: float = 1000.0

  @nn.compact
  def __call__(self, x: jax.Array, t: jax.Array) -> jax.Array:
    t = jnp.asarray(t)
    core_nn.check_time_shape(t, x)
    emb = timestep_embedding(t * self.step_scale, self.time_embed_dim)
    h_t = core_nn.Dense(self.hidden)(emb.astype(x.dtype))
    h_t = core_nn.Dense(self.hidden)(nn.silu(h_t))  # [*t.shape, hidden]
    h_x = x
    for i in range(self.x_depth):
      h_x = core_nn.Dense(self.hidden)(h_x)
      if i < self.x_depth - 1:
        h_x = nn.silu(h_x)
    h = core_nn.Dense(self.hidden)(h_x + h_t)
    return core_nn.Dense(self.dim)(nn.silu(h))

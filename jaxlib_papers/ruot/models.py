"""Networks of DeepRUOT: velocity v(t, x), growth g(t, x) and potential s(t, x).

Each is an MLP on the concatenation ``[t, x]`` (LeakyReLU, width 128, three hidden
layers in the paper). ``s`` is a scalar potential with ``s = sigma^2 / 2 * log rho``, so the
score of the (unnormalised) density is ``grad log rho = 2 / sigma^2 * grad_x s``.

Parameters are plain pytrees ``{"v": ..., "g": ..., "s": ...}`` so the kernels can freeze,
mask and vmap them freely.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng


class MLP(nn.Module):
  """MLP with PyTorch's default ``nn.Linear`` initialisation (LeakyReLU between layers).

  Kernels and biases are ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``. ``core.nn.MLP`` uses
  flax's lecun-normal kernels and zero biases, whose weights are sqrt(3) times larger per
  layer: through four layers the initial v and g come out ~9x larger than the official
  code's and training from there is far slower (measured on the gene data, t=2 held out:
  last-interval OT loss after 20 stage-1 passes 0.70 with flax's init, 0.20 with this
  one). So the paper's nets get the paper's initialisation.
  """
  features: Sequence[int]
  activation: Any = nn.leaky_relu

  @nn.compact
  def __call__(self, x: jax.Array) -> jax.Array:
    for i, width in enumerate(self.features):
      bound = 1.0 / np.sqrt(x.shape[-1])
      init = lambda key, shape, dtype=jnp.float32, b=bound: prng.uniform(
          key, shape, dtype, -b, b)
      x = nn.Dense(width, kernel_init=init, bias_init=init)(x)
      if i < len(self.features) - 1:
        x = self.activation(x)
    return x

Params = dict[str, Any]


def _time_input(t: jax.Array, x: jax.Array) -> jax.Array:
  """Concatenates a scalar or per-point time with ``x: [n, d]`` into ``[n, d + 1]``."""
  t = jnp.broadcast_to(jnp.asarray(t, x.dtype).reshape(-1, 1), (x.shape[0], 1))
  return jnp.concatenate([t, x], axis=-1)


class Networks(NamedTuple):
  """Pure apply functions of the three networks (batched over points)."""
  init: Any       # (key) -> Params
  velocity: Any   # (params, t: [] or [n], x: [n, d]) -> [n, d]
  growth: Any     # (params, t, x: [n, d]) -> [n]
  potential: Any  # (params, t, x: [n, d]) -> [n]


def make_networks(dim: int, width: int = 128, depth: int = 3) -> Networks:
  """Builds the v, g, s networks for data of dimension ``dim``.

  Args:
    dim: state dimension d.
    width: hidden width (paper: 128).
    depth: number of hidden layers (paper: 3).

  Returns:
    A :class:`Networks` of pure functions.
  """
  if dim < 1 or width < 1 or depth < 1:
    raise ValueError(f"dim, width and depth must be positive; got {dim}, {width}, {depth}")
  hidden = [width] * depth
  v_net = MLP(tuple(hidden + [dim]), activation=nn.leaky_relu)
  g_net = MLP(tuple(hidden + [1]), activation=nn.leaky_relu)
  s_net = MLP(tuple(hidden + [1]), activation=nn.leaky_relu)

  def init(key: jax.Array) -> Params:
    kv, kg, ks = jax.random.split(key, 3)
    dummy = jnp.zeros((1, dim + 1), jnp.float32)
    return {"v": v_net.init(kv, dummy), "g": g_net.init(kg, dummy), "s": s_net.init(ks, dummy)}

  def velocity(params: Params, t, x):
    return v_net.apply(params["v"], _time_input(t, x))

  def growth(params: Params, t, x):
    return g_net.apply(params["g"], _time_input(t, x))[:, 0]

  def potential(params: Params, t, x):
    return s_net.apply(params["s"], _time_input(t, x))[:, 0]

  return Networks(init, velocity, growth, potential)

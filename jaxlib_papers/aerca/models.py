"""The GVAR block (SENN-style generalised VAR) and AERCA's three networks.

``GVAR`` holds one coefficient MLP per lag slot, with the lag axis stacked in every weight
(``[K, fan_in, fan_out]``) so the K MLPs run as one batched matmul. For windows
``w [N, K, p]`` (slot 0 the oldest lag) it returns

  coeffs[n, k] = Psi_k(w[n, k]) in (-1, 1)^{p x p}   (tanh output, row-major p x p)
  preds[n]     = sum_k coeffs[n, k] @ w[n, k]

with ``coeffs[n, k, i, j]`` the effect of cause j on target i. The MLP is
Linear(p -> H) + ReLU, (L - 1) x [Linear(H -> H) + ReLU], Linear(H -> p^2) + tanh, with
PyTorch's default ``nn.Linear`` initialisation (weights and biases U(+-1/sqrt(fan_in))).
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxlib_papers.core import prng


def torch_linear_init(fan_in: int):
  """U(-1/sqrt(fan_in), 1/sqrt(fan_in)): PyTorch's nn.Linear default for W and b."""
  bound = 1.0 / math.sqrt(fan_in)

  def init(key, shape, dtype=jnp.float32):
    return prng.uniform(key, shape, dtype, -bound, bound)
  return init


class GVAR(nn.Module):
  """Generalised VAR: K coefficient MLPs (lag axis stacked) and their linear readout.

  Attributes:
    num_vars: p.
    lag: K, number of lag slots.
    hidden: H, hidden width.
    layers: L >= 1, number of hidden layers.
    lag_major: run the MLPs on [K, N, .] activations (the lag the leading batch axis of
      every matmul) instead of [N, K, .]; same function, same parameters, another layout
      (training uses it: :meth:`Networks.for_training`).
  """

  num_vars: int
  lag: int
  hidden: int
  layers: int
  lag_major: bool = False

  @nn.compact
  def __call__(self, windows: jax.Array) -> tuple[jax.Array, jax.Array]:
    """windows [N, K, p] -> (preds [N, p], coeffs [N, K, p, p])."""
    n, lag, p = windows.shape
    if lag != self.lag or p != self.num_vars:
      raise ValueError(f"windows must be [N, {self.lag}, {self.num_vars}]; got "
                       f"{windows.shape}")
    sizes = [p] + [self.hidden] * self.layers + [p * p]
    x = jnp.swapaxes(windows, 0, 1) if self.lag_major else windows
    h = x
    for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
      w = self.param(f"w{index}", torch_linear_init(fan_in), (lag, fan_in, fan_out))
      b = self.param(f"b{index}", torch_linear_init(fan_in), (lag, fan_out))
      if self.lag_major:
        h = jnp.einsum("kni,kio->kno", h, w) + b[:, None, :]
      else:
        h = jnp.einsum("nki,kio->nko", h, w) + b
      h = jnp.tanh(h) if index == len(sizes) - 2 else nn.relu(h)
    if not self.lag_major:
      coeffs = h.reshape(n, lag, p, p)
      return jnp.einsum("nkij,nkj->ni", coeffs, windows), coeffs
    coeffs = h.reshape(lag, n, p, p)
    return jnp.einsum("knij,knj->ni", coeffs, x), jnp.swapaxes(coeffs, 0, 1)


class Networks:
  """AERCA's encoder Psi, decoder Phi (on residuals) and Phi' (on lagged inputs).

  ``init(key) -> params`` with keys ``encoder``, ``decoder``, ``decoder_prev``;
  ``apply(params_of_one_block, windows)`` runs one GVAR block.
  """

  BLOCKS = ("encoder", "decoder", "decoder_prev")

  def __init__(self, num_vars: int, lag: int, hidden: int, layers: int,
               lag_major: bool = False):
    for name, value, low in (("num_vars", num_vars, 1), ("lag", lag, 1),
                             ("hidden", hidden, 1), ("layers", layers, 1)):
      if int(value) < low:
        raise ValueError(f"{name} must be >= {low}; got {value}")
    self.num_vars, self.lag = int(num_vars), int(lag)
    self.block = GVAR(self.num_vars, self.lag, int(hidden), int(layers), bool(lag_major))

  def for_training(self) -> Networks:
    """These networks in the layout that trains faster: lag-major.

    Measured on XLA:CPU (2 cores, nonlinear ``cpu`` sizes; ``seeds/aerca.md``, "Speed"):
    3 seeds vmapped 13-22 % and 8 seeds 27-38 % less time per epoch than the ``[N, K, .]``
    layout (whose activations are transposed around every matmul), one seed ~15 % less
    now that ``blocks.vmap_members`` runs a single seed unvmapped (under a vmap of one it
    was 2x slower). The function and the parameters are the same in both layouts.
    """
    block = self.block
    return Networks(self.num_vars, self.lag, block.hidden, block.layers, lag_major=True)

  def init(self, key: jax.Array) -> dict:
    """PyTorch-default init of the three blocks from one uniform draw.

    (One threefry call instead of one per parameter: each is compiled on its own.)
    """
    dummy = jnp.zeros((1, self.lag, self.num_vars))
    shapes = jax.eval_shape(self.block.init, jax.random.key(0), dummy)["params"]
    names = sorted(shapes)
    sizes = [math.prod(shapes[n].shape) for n in names]
    total = sum(sizes)
    u = prng.uniform(key, (len(self.BLOCKS), total), minval=-1.0, maxval=1.0)
    out = {}
    for b, block in enumerate(self.BLOCKS):
      params, offset = {}, 0
      for name, size in zip(names, sizes):
        fan_in = shapes["w" + name[1:]].shape[1]
        chunk = u[b, offset:offset + size].reshape(shapes[name].shape)
        params[name] = chunk / math.sqrt(fan_in)
        offset += size
      out[block] = params
    return out

  def apply(self, block_params, windows: jax.Array) -> tuple[jax.Array, jax.Array]:
    return self.block.apply({"params": block_params}, windows)

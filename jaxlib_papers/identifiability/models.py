"""The encoder f: an MLP with BatchNorm, as in the paper's simulations and DisLib runs.

Simulations: ``d -> [10d, 50d, 50d, 50d, 50d, 10d] -> d``, each hidden layer Linear ->
BatchNorm -> LeakyReLU(0.01), linear output (our ``cpu`` preset uses narrower layers, see
``configs/default.py``). DisLib: ``pixels -> 3 x [Linear 512, BatchNorm, ReLU]`` and the
representation is the last hidden layer (``output_dim=0``).
"""

from __future__ import annotations

from collections.abc import Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng


def torch_uniform(key, shape, dtype=jnp.float32):
  """PyTorch's ``nn.Linear`` init: ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` (kernel [in, out])."""
  bound = 1.0 / np.sqrt(shape[0])
  return prng.uniform(key, shape, dtype, -bound, bound)


class Encoder(nn.Module):
  """``x: [n, d_in] -> f(x): [n, output_dim]`` (or the last hidden layer if output_dim=0).

  Attributes:
    hidden: hidden widths.
    output_dim: width of the final linear layer; 0 returns the last hidden activations.
    batch_norm: BatchNorm after every hidden Linear (running averages in eval mode).
    negative_slope: LeakyReLU slope (0 gives ReLU).
  """
  hidden: Sequence[int]
  output_dim: int
  batch_norm: bool = True
  negative_slope: float = 0.01

  @nn.compact
  def __call__(self, x: jax.Array, train: bool = False) -> jax.Array:
    for width in self.hidden:
      # A bias before BatchNorm is cancelled by it; its gradient is pure round-off, which
      # Adam would blow up to full-size steps, so it is left out.
      x = nn.Dense(width, kernel_init=torch_uniform, use_bias=not self.batch_norm)(x)
      if self.batch_norm:
        x = nn.BatchNorm(use_running_average=not train, momentum=0.9, epsilon=1e-5)(x)
      x = nn.leaky_relu(x, self.negative_slope) if self.negative_slope else nn.relu(x)
    if self.output_dim:
      x = nn.Dense(self.output_dim, kernel_init=torch_uniform)(x)
    return x

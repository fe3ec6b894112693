"""The paper's losses: weighted conditional flow matching and the flat-bottom energy term.

FM regresses v(t, x_t) on x1 - x0 with x_t = (1 - t) x0 + t x1 for pairs of a coupling q.
Pairs carry weights (a rejected pair weighs 0), so the loss is a masked mean
sum_b w_b l_b / max(sum_b w_b, 1): 0, with finite gradients, for a batch with no accepted
pair. The relaxation loss adds a flat-bottom energy of the one-step prediction
x^1 = x_t + (1 - t) v (the official relaxation model's extra term).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

Velocity = Callable[[jax.Array, jax.Array], jax.Array]   # (x [B, D], t [B] or [1]) -> [B, D]
Energy = Callable[[jax.Array], jax.Array]                # x [B, D] -> [B]


def masked_mean(values: jax.Array, weights: jax.Array) -> jax.Array:
  """sum w v / max(sum w, 1) over ``[B]``: a weighted mean, 0 for an empty batch."""
  return (weights * values).sum() / jnp.maximum(weights.sum(), 1.0)


def interpolate(x0: jax.Array, x1: jax.Array, t: jax.Array) -> jax.Array:
  """x_t = (1 - t) x0 + t x1 for ``x0, x1 [B, D]``, ``t [B]``."""
  return (1 - t)[:, None] * x0 + t[:, None] * x1


def weighted_fm_loss(velocity: Velocity, x0: jax.Array, x1: jax.Array, t: jax.Array,
                     weights: jax.Array, energy: Energy | None = None,
                     energy_weight: jax.Array | float = 0.0
                     ) -> tuple[jax.Array, dict[str, jax.Array]]:
  """The (energy-regularised) weighted CFM loss of one batch.

  Args:
    velocity: the field ``v(x [B, D], t [B]) -> [B, D]``.
    x0, x1: ``[B, D]`` the coupled pairs (flattened conformers).
    t: ``[B]`` times in [0, 1].
    weights: ``[B]`` pair weights (0 = rejected).
    energy: ``energy(x [B, D]) -> [B]``, or None for plain CFM.
    energy_weight: the energy term's factor (``[]``; 0 switches it off).

  Returns:
    (loss ``[]``, aux ``{"fm", "energy", "accepted"}``).
  """
  xt = interpolate(x0, x1, t)
  v = velocity(xt, t)
  fm = masked_mean(((v - (x1 - x0)) ** 2).mean(-1), weights)
  if energy is None:
    e = jnp.zeros(())
  else:
    predicted = xt + (1 - t)[:, None] * v
    e = masked_mean(energy(predicted), weights)
  return fm + energy_weight * e, {"fm": fm, "energy": e, "accepted": weights.sum()}


def euler(velocity: Velocity, x0: jax.Array, num_steps: int | jax.Array) -> jax.Array:
  """``num_steps`` Euler steps of dx/dt = v from ``x0 [..., D]`` at t = 0 to t = 1.

  ``num_steps`` may be traced (a ``while_loop``): one compiled sampler serves every K.
  """
  num_steps = jnp.asarray(num_steps, jnp.int32)
  dt = 1.0 / num_steps.astype(x0.dtype)

  def body(i, x):
    # One t for the batch, shaped [1, ...] to broadcast: the field embeds it once.
    t = jnp.full((1,) * (x.ndim - 1), i * dt, x.dtype)
    return x + dt * velocity(x, t)

  return jax.lax.fori_loop(0, num_steps, body, x0)

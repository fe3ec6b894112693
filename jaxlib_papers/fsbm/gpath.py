"""Gaussian paths between endpoint pairs (the CondSOC variational family).

For one endpoint pair (x0, x1) the path is X_t = mu_t + gamma_t * eps with
  * mu_t: piecewise-linear spline through ``T_mean`` knots on linspace(0, 1),
    whose first and last knots are pinned to x0 and x1;
  * gamma_t = sigma * sqrt(t (1 - t)) * softplus(s(t)), s a piecewise-linear
    spline through ``T_gamma`` knots on linspace(0, 1); the CondSOC solve trains the
    interior ones and keeps the two end knots at 0 (:func:`pin_std_ends`), as the official
    code does.
All functions here act on ONE pair; callers vmap over pairs.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike


class PathParams(NamedTuple):
  """Free parameters of one Gaussian path.

  Attributes:
    mean_knots: [T_mean - 2, D] interior knots of the mean spline.
    gamma_knots: [T_gamma] knots of the pre-softplus std spline (the first and last
      stay at their initial 0 in the CondSOC solve).
  """

  mean_knots: jax.Array
  gamma_knots: jax.Array


def spline_basis(t: ArrayLike, num_knots: int, dtype=jnp.float32):
  """Piecewise-linear basis on ``num_knots`` uniform knots over [0, 1].

  The spline through knot values y [T, ...] is ``basis @ y`` and its time
  derivative ``dbasis @ y`` (right-continuous slope at the knots). Dense
  one-hot weights instead of a gather keep the CondSOC inner loop a pair of
  small matmuls.

  Args:
    t: [S] times in [0, 1].
    num_knots: T >= 2.

  Returns:
    (basis [S, T], dbasis [S, T]).
  """
  t = jnp.asarray(t, dtype)
  scale = num_knots - 1
  u = t * scale
  seg = jnp.clip(jnp.floor(u), 0, num_knots - 2).astype(jnp.int32)
  w = (u - seg)[:, None]
  lo = jax.nn.one_hot(seg, num_knots, dtype=dtype)
  hi = jax.nn.one_hot(seg + 1, num_knots, dtype=dtype)
  return (1.0 - w) * lo + w * hi, scale * (hi - lo)


def linear_spline(knot_y: jax.Array, t: ArrayLike) -> jax.Array:
  """Value at times t [S] of the spline through uniform knots knot_y [T, ...]."""
  basis, _ = spline_basis(t, knot_y.shape[0], knot_y.dtype)
  return jnp.tensordot(basis, knot_y, axes=1)


def full_mean_knots(params: PathParams, x0: jax.Array, x1: jax.Array) -> jax.Array:
  """[T_mean, D] mean knots with the pinned endpoints."""
  return jnp.concatenate([x0[None], params.mean_knots, x1[None]], axis=0)


def mean_and_std(params: PathParams, x0: jax.Array, x1: jax.Array, sigma: float,
                 t: ArrayLike):
  """Mean, std and their time derivatives on a time grid.

  Args:
    params: the pair's spline parameters.
    x0: [D] start point; x1: [D] end point.
    sigma: diffusion coefficient.
    t: [S] times in (0, 1).

  Returns:
    (mean [S, D], dmean [S, D], std [S], dstd [S]).
  """
  knots = full_mean_knots(params, x0, x1)
  dtype = knots.dtype
  t = jnp.asarray(t, dtype)
  basis, dbasis = spline_basis(t, knots.shape[0], dtype)
  mean, dmean = basis @ knots, dbasis @ knots
  gbasis, dgbasis = spline_basis(t, params.gamma_knots.shape[0], dtype)
  s, ds = gbasis @ params.gamma_knots, dgbasis @ params.gamma_knots
  root = jnp.sqrt(t * (1.0 - t))
  base, dbase = sigma * root, sigma * (1.0 - 2.0 * t) / (2.0 * root)
  std = base * jax.nn.softplus(s)
  dstd = dbase * jax.nn.softplus(s) + base * jax.nn.sigmoid(s) * ds
  return mean, dmean, std, dstd


def drift_coefficients(std: jax.Array, dstd: jax.Array, sigma: float,
                       sign: ArrayLike):
  """Linear coefficient of the Gaussian-path drift.

  Forward (sign=+1): a_t = (d_t gamma - sigma^2 / (2 gamma)) / gamma;
  backward (sign=-1): b_t = (-d_t gamma - sigma^2 / (2 gamma)) / gamma.
  For gamma the Brownian-bridge std these are -1/(1-t) and -1/t.
  """
  return (sign * dstd - sigma**2 / (2.0 * std)) / std


def sample(params: PathParams, x0: jax.Array, x1: jax.Array, sigma: float,
           t: ArrayLike, noise: jax.Array) -> jax.Array:
  """One sample mu_t + gamma_t * noise at a single time t [] in [0, 1].

  Unlike :func:`mean_and_std` it needs no time derivative, so t = 0 and t = 1
  (where gamma = 0) are fine.

  Args:
    params: the pair's spline parameters; x0, x1: [D]; noise: [D].

  Returns:
    [D].
  """
  knots = full_mean_knots(params, x0, x1)
  t = jnp.reshape(jnp.asarray(t, knots.dtype), (1,))
  mean = linear_spline(knots, t)[0]
  s = linear_spline(params.gamma_knots, t)[0]
  std = sigma * jnp.sqrt(jnp.clip(t[0] * (1.0 - t[0]), 0.0)) * jax.nn.softplus(s)
  return mean + std * noise


def sample_and_drift(params: PathParams, x0: jax.Array, x1: jax.Array,
                     sigma: float, t: ArrayLike, noise: jax.Array,
                     sign: ArrayLike = 1.0):
  """Samples of the path and the path's drift at those samples.

  Args:
    params: the pair's spline parameters.
    x0: [D]; x1: [D] endpoints.
    sigma: diffusion coefficient.
    t: [S] times in (0, 1).
    noise: [N, S, D] standard normal draws.
    sign: +1.0 for the forward drift, -1.0 for the backward drift (a traced
      scalar is fine, so one program serves both directions).

  Returns:
    (x [N, S, D], u [N, S, D]): u_t(x) = sign * d_t mu + c_t (x - mu_t) with
    c_t the forward or backward coefficient.
  """
  mean, dmean, std, dstd = mean_and_std(params, x0, x1, sigma, t)
  x = mean + std[:, None] * noise
  coef = drift_coefficients(std, dstd, sigma, sign)
  u = sign * dmean + coef[:, None] * (x - mean)
  return x, u


def pin_std_ends(grads: PathParams) -> PathParams:
  """``grads`` with the first and last std knots' entries zeroed.

  The std spline's knots at t = 0 and t = 1 stay at their initial value (0), as in the
  official code, where they are fixed buffers and only the T_gamma - 2 interior knots are
  trained. (The end knots shape gamma over the first and last spline segments, where gamma
  is smallest, and their gradient is large there.)
  """
  g = grads.gamma_knots
  return grads._replace(gamma_knots=g.at[..., 0].set(0).at[..., -1].set(0))


def init_params(mean_path: jax.Array, num_gamma_knots: int) -> PathParams:
  """Parameters from a [T_mean, D] knot path (endpoints included), std knots 0."""
  return PathParams(mean_knots=mean_path[1:-1],
                    gamma_knots=jnp.zeros((num_gamma_knots,), mean_path.dtype))


def linear_mean_path(x0: jax.Array, x1: jax.Array, num_knots: int) -> jax.Array:
  """[T_mean, D] straight-line knots between x0 and x1 (first-round init)."""
  s = jnp.linspace(0.0, 1.0, num_knots, dtype=x0.dtype)[:, None]
  return (1.0 - s) * x0[None] + s * x1[None]

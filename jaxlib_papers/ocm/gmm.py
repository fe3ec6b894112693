"""Gaussian mixtures with diagonal components: closed-form diffused score and Hessian diagonal.

If x0 ~ sum_k w_k N(mu_k, diag(s_k^2)) then under the forward process
q_t(x) = sum_k w_k N(x; alpha mu_k, diag(alpha^2 s_k^2 + sigma^2)) with alpha = sqrt(abar_t).
With responsibilities r_k(x), per-component scores g_k = -(x - alpha mu_k) / v_k and
v_k = alpha^2 s_k^2 + sigma^2:

  score(x)  = sum_k r_k g_k,
  diag H(x) = sum_k r_k (g_k^2 - 1 / v_k) - score(x)^2.

This gives the "exact covariance" row of the reproduction: h* = sigma^2 diag H.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxlib_papers.core import prng

Array = jax.Array


class GaussianMixture(NamedTuple):
  """weights: [K] (sum to 1); means: [K, D]; stds: [K, D] (diagonal components)."""
  weights: Array
  means: Array
  stds: Array

  @property
  def dim(self) -> int:
    return int(self.means.shape[-1])


def make_mixture(weights, means, stds) -> GaussianMixture:
  """Validates and builds a mixture (numpy or jax inputs)."""
  weights, means, stds = map(jnp.asarray, (weights, means, stds))
  if means.ndim != 2:
    raise ValueError(f"means must be [K, D], got shape {means.shape}")
  if weights.shape != means.shape[:1]:
    raise ValueError(f"weights must be [K] = {means.shape[:1]}, got {weights.shape}")
  stds = jnp.broadcast_to(stds, means.shape) if stds.ndim < 2 else stds
  if stds.shape != means.shape:
    raise ValueError(f"stds must broadcast to means' shape {means.shape}, got {stds.shape}")
  return GaussianMixture(weights / jnp.sum(weights), means, stds)


def ring(num_modes: int = 8, radius: float = 0.8, std: float = 0.1) -> GaussianMixture:
  """The 2-D benchmark: equal-weight modes on a circle (data inside [-1, 1]^2)."""
  angles = 2 * np.pi * np.arange(num_modes) / num_modes
  means = radius * np.stack([np.cos(angles), np.sin(angles)], axis=1)
  return make_mixture(np.full(num_modes, 1.0 / num_modes), means,
                      np.full(means.shape, std))


def random_mixture(seed: int, num_modes: int, dim: int, *, spread: float = 0.5,
                   std_range: tuple[float, float] = (0.05, 0.2)) -> GaussianMixture:
  """A random mixture in ``dim`` dimensions (means uniform in [-spread, spread])."""
  rng = np.random.default_rng(seed)
  means = rng.uniform(-spread, spread, size=(num_modes, dim))
  stds = rng.uniform(*std_range, size=(num_modes, dim))
  weights = rng.uniform(0.5, 1.5, size=num_modes)
  return make_mixture(weights, means, stds)


def sample(gmm: GaussianMixture, key: Array, num: int) -> Array:
  """Draws [num, D] samples."""
  k_comp, k_noise = jax.random.split(key)
  comp = prng.categorical(k_comp, jnp.log(gmm.weights), shape=(num,))
  noise = prng.normal(k_noise, (num, gmm.dim), gmm.means.dtype)
  return gmm.means[comp] + gmm.stds[comp] * noise


def _components(gmm: GaussianMixture, x: Array, abar: Array):
  """Per-component (log weight + log density, score g_k, variances v_k) at x [..., D]."""
  alpha = jnp.sqrt(abar)[..., None, None]
  sig2 = (1.0 - abar)[..., None, None]
  v = jnp.square(alpha * gmm.stds) + sig2                           # [..., K, D]
  diff = x[..., None, :] - alpha * gmm.means                        # [..., K, D]
  log_comp = jnp.log(gmm.weights) - 0.5 * jnp.sum(
      jnp.log(2 * jnp.pi * v) + jnp.square(diff) / v, axis=-1)     # [..., K]
  return log_comp, -diff / v, v


def log_prob(gmm: GaussianMixture, x: Array, abar: Array | float = 1.0) -> Array:
  """log q_t(x) at noise level abar (abar = 1 is the data density); x: [..., D] -> [...]."""
  abar = jnp.broadcast_to(jnp.asarray(abar, x.dtype), x.shape[:-1])
  log_comp, _, _ = _components(gmm, x, abar)
  return jax.nn.logsumexp(log_comp, axis=-1)


def score_and_hessian_diag(gmm: GaussianMixture, x: Array, abar: Array | float
                           ) -> tuple[Array, Array]:
  """Closed-form grad log q_t and diag of its Hessian; x: [..., D], abar broadcastable to [...].

  Returns:
    (score [..., D], hessian_diag [..., D]).
  """
  abar = jnp.broadcast_to(jnp.asarray(abar, x.dtype), x.shape[:-1])
  log_comp, g, v = _components(gmm, x, abar)
  r = jax.nn.softmax(log_comp, axis=-1)[..., None]                  # [..., K, 1]
  score = jnp.sum(r * g, axis=-2)
  hess_diag = jnp.sum(r * (jnp.square(g) - 1.0 / v), axis=-2) - jnp.square(score)
  return score, hess_diag


def posterior_moments(gmm: GaussianMixture, x_t: Array, abar: Array | float
                      ) -> tuple[Array, Array]:
  """Exact E[x0 | x_t] and full Cov[x0 | x_t] (a mixture of Gaussian posteriors).

  Used by the tests to check the second-order Tweedie identity. x_t: [D] (single point).

  Returns:
    (mean [D], covariance [D, D]).
  """
  abar = jnp.asarray(abar, x_t.dtype)
  alpha, sig2 = jnp.sqrt(abar), 1.0 - abar
  log_comp, _, _ = _components(gmm, x_t, abar)
  r = jax.nn.softmax(log_comp)                                       # [K]
  prior_var = jnp.square(gmm.stds)                                   # [K, D]
  post_var = 1.0 / (1.0 / prior_var + abar / sig2)
  post_mean = post_var * (gmm.means / prior_var + alpha * x_t / sig2)
  mean = r @ post_mean
  second = jnp.einsum("k,kd,ke->de", r, post_mean, post_mean) + jnp.diag(r @ post_var)
  return mean, second - jnp.outer(mean, mean)


class GMMOracle(NamedTuple):
  """The exact eps and h of a mixture under a schedule (the 'exact covariance' row)."""
  gmm: GaussianMixture
  abar_table: np.ndarray

  def eps_and_h(self, x_t: Array, t: Array) -> tuple[Array, Array]:
    """eps*(x_t) = -sigma_t score and h*(x_t) = sigma_t^2 diag H; x_t: [B, D], t scalar int."""
    abar = jnp.asarray(self.abar_table, x_t.dtype)[t]
    score, hess = score_and_hessian_diag(self.gmm, x_t, abar)
    sig2 = 1.0 - abar
    return -jnp.sqrt(sig2) * score, sig2 * hess

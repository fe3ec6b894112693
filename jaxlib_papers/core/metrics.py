"""Distances between (weighted) point clouds, and closed forms to test them against.

* :func:`wasserstein` (:func:`w1`, :func:`w2`): exact W_p by POT's network simplex on the
  host, float64. Weights are normalised (unbalanced clouds are compared as shapes; report
  their mass separately).
* :func:`sinkhorn_divergence`: debiased entropic OT (ott-jax), jit-able, differentiable.
* :func:`mmd_rbf`, :func:`energy_distance`: kernel two-sample statistics, jit-able.
* :func:`gaussian_w2`: W2 between Gaussians in closed form (Bures).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike

from jaxlib_papers.core import ot as ot_lib


def _host_cloud(x: ArrayLike, name: str) -> np.ndarray:
  x = np.asarray(x, dtype=np.float64)
  if x.ndim == 1:
    x = x[:, None]
  if x.ndim != 2 or x.shape[0] == 0:
    raise ValueError(f"{name} must be a non-empty [n, d] point cloud; got shape {x.shape}")
  if not np.all(np.isfinite(x)):
    raise ValueError(f"{name} contains NaN or Inf")
  return x


def wasserstein(
    x: ArrayLike, y: ArrayLike, a: ArrayLike | None = None, b: ArrayLike | None = None,
    p: int = 2,
) -> float:
  """Exact W_p between weighted clouds (not its p-th power).

  Args:
    x: [n, d] points.  y: [m, d] points.
    a: [n] non-negative weights (normalised here), default uniform.  b: [m] likewise.
    p: 1 or 2 (any p >= 1 works).

  Returns:
    W_p as a Python float.
  """
  x, y = _host_cloud(x, "x"), _host_cloud(y, "y")
  if x.shape[1] != y.shape[1]:
    raise ValueError(f"x and y must share a dimension; got {x.shape} and {y.shape}")
  if p < 1:
    raise ValueError(f"p must be >= 1; got {p}")
  import ot as pot  # pylint: disable=g-import-not-at-top
  plan = ot_lib.exact_coupling(x, y, a, b, p=p)
  cost = pot.dist(x, y, metric="euclidean") ** p
  return float(np.sum(plan * cost)) ** (1.0 / p)


def w1(x, y, a=None, b=None) -> float:
  return wasserstein(x, y, a, b, p=1)


def w2(x, y, a=None, b=None) -> float:
  return wasserstein(x, y, a, b, p=2)


def sinkhorn_divergence(
    x: ArrayLike, y: ArrayLike, a: ArrayLike | None = None, b: ArrayLike | None = None,
    *, epsilon: float = 0.05,
) -> jax.Array:
  """Debiased Sinkhorn divergence S_eps(x, y) >= 0 with cost ``||x - y||^2``.

  Args:
    x: [n, d].  y: [m, d].  a: [n] weights, b: [m] weights (default uniform).
    epsilon: entropic regularisation, > 0.
  """
  x, y = jnp.asarray(x), jnp.asarray(y)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
    raise ValueError(f"x, y must be [n, d] and [m, d]; got {x.shape} and {y.shape}")
  ot_lib._check_epsilon(epsilon)  # pylint: disable=protected-access
  a = jnp.full(x.shape[0], 1.0 / x.shape[0], x.dtype) if a is None else jnp.asarray(a)
  b = jnp.full(y.shape[0], 1.0 / y.shape[0], y.dtype) if b is None else jnp.asarray(b)
  # One compiled program for the three Sinkhorn solves: eager dispatch of ott's loops is
  # several times slower than compiling them once.
  return _sinkhorn_divergence(x, y, a, b, epsilon)


@jax.jit
def _sinkhorn_divergence(x, y, a, b, epsilon):
  from ott.geometry import pointcloud  # pylint: disable=g-import-not-at-top
  from ott.tools import sinkhorn_divergence as sd  # pylint: disable=g-import-not-at-top
  div, _ = sd.sinkhorn_divergence(pointcloud.PointCloud, x, y, a=a, b=b, epsilon=epsilon)
  return div


def _sq_dists(x: jax.Array, y: jax.Array) -> jax.Array:
  return jnp.maximum(
      jnp.sum(x**2, -1)[:, None] + jnp.sum(y**2, -1)[None, :] - 2 * x @ y.T, 0.0)


def mmd_rbf(x: ArrayLike, y: ArrayLike, bandwidths: ArrayLike | None = None) -> jax.Array:
  """Squared MMD (biased V-statistic) with a sum of RBF kernels.

  Args:
    x: [n, d].  y: [m, d].
    bandwidths: kernel length scales; default ``median * (0.5, 1, 2)`` of the pooled
      pairwise distances.

  Returns:
    MMD^2 >= 0 (a scalar).
  """
  x, y = jnp.asarray(x), jnp.asarray(y)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
    raise ValueError(f"x, y must be [n, d] and [m, d]; got {x.shape} and {y.shape}")
  xy = jnp.concatenate([x, y])
  d2 = _sq_dists(xy, xy)
  if bandwidths is None:
    median = jnp.sqrt(jnp.median(d2) + 1e-12)
    bandwidths = median * jnp.array([0.5, 1.0, 2.0])
  bandwidths = jnp.atleast_1d(jnp.asarray(bandwidths, dtype=d2.dtype))
  k = jnp.sum(jnp.exp(-d2[..., None] / (2 * bandwidths**2)), axis=-1)
  n = x.shape[0]
  return jnp.maximum(
      jnp.mean(k[:n, :n]) + jnp.mean(k[n:, n:]) - 2 * jnp.mean(k[:n, n:]), 0.0)


def energy_distance(x: ArrayLike, y: ArrayLike) -> jax.Array:
  """Energy distance ``2 E|X-Y| - E|X-X'| - E|Y-Y'|`` (V-statistic), >= 0."""
  x, y = jnp.asarray(x), jnp.asarray(y)
  if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
    raise ValueError(f"x, y must be [n, d] and [m, d]; got {x.shape} and {y.shape}")
  dist = lambda u, v: jnp.sqrt(_sq_dists(u, v) + 1e-30)
  return 2 * jnp.mean(dist(x, y)) - jnp.mean(dist(x, x)) - jnp.mean(dist(y, y))


def gaussian_w2(mean1: ArrayLike, cov1: ArrayLike, mean2: ArrayLike, cov2: ArrayLike) -> jax.Array:
  """W2 between N(mean1, cov1) and N(mean2, cov2) (Bures-Wasserstein)."""
  mean1, mean2 = jnp.atleast_1d(mean1), jnp.atleast_1d(mean2)
  cov1, cov2 = jnp.atleast_2d(cov1), jnp.atleast_2d(cov2)
  root2 = ot_lib._sqrtm_psd(cov2)  # pylint: disable=protected-access
  cross = ot_lib._sqrtm_psd(root2 @ cov1 @ root2)  # pylint: disable=protected-access
  sq = jnp.sum((mean1 - mean2) ** 2) + jnp.trace(cov1 + cov2 - 2 * cross)
  return jnp.sqrt(jnp.maximum(sq, 0.0))

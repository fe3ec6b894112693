"""Thin wrappers over ott-jax (inside kernels) and POT (exact plans on the host).

* :func:`sinkhorn` / :func:`sinkhorn_coupling`: entropic OT with squared Euclidean cost,
  jit-able and differentiable (ott-jax).
* :func:`exact_coupling`: the exact (unregularised) plan by POT's network simplex, on the
  host; for evaluation and for pairing data, not inside a jitted step.
* :func:`gaussian_entropic_ot`: the closed form of entropic OT between two Gaussians
  (Janati et al., 2020; Mallasto et al., 2021), the suite's reference case.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


def _check_points(x: ArrayLike, name: str) -> jax.Array:
  x = jnp.asarray(x)
  if x.ndim != 2:
    raise ValueError(f"{name} must be a [n, d] point cloud; got shape {x.shape}")
  return x


def _check_weights(w: ArrayLike | None, n: int, name: str) -> jax.Array | None:
  if w is None:
    return None
  w = jnp.asarray(w)
  if w.shape != (n,):
    raise ValueError(f"{name} must have shape ({n},); got {w.shape}")
  return w


def _check_epsilon(epsilon: float) -> None:
  if not isinstance(epsilon, jax.Array) and not float(epsilon) > 0:
    raise ValueError(f"epsilon must be > 0; got {epsilon}")


def sinkhorn(
    x: ArrayLike,
    y: ArrayLike,
    a: ArrayLike | None = None,
    b: ArrayLike | None = None,
    *,
    epsilon: float = 0.05,
    relative_epsilon: bool = False,
    threshold: float = 1e-3,
    max_iterations: int = 2000,
):
  """Solves entropic OT with cost ``||x - y||^2``; returns ott's ``SinkhornOutput``.

  Args:
    x: [n, d] source points.  y: [m, d] target points.
    a: [n] source weights (sum 1), default uniform.  b: [m] target weights.
    epsilon: entropic regularisation (absolute, or relative to the mean cost when
      ``relative_epsilon``).
  """
  from ott.geometry import pointcloud  # pylint: disable=g-import-not-at-top
  from ott.problems.linear import linear_problem  # pylint: disable=g-import-not-at-top
  from ott.solvers.linear import sinkhorn as sinkhorn_lib  # pylint: disable=g-import-not-at-top

  x, y = _check_points(x, "x"), _check_points(y, "y")
  if x.shape[1] != y.shape[1]:
    raise ValueError(f"x and y must share a dimension; got {x.shape} and {y.shape}")
  a = _check_weights(a, x.shape[0], "a")
  b = _check_weights(b, y.shape[0], "b")
  _check_epsilon(epsilon)
  geom = pointcloud.PointCloud(
      x, y, epsilon=epsilon, relative_epsilon="mean" if relative_epsilon else None)
  problem = linear_problem.LinearProblem(geom, a=a, b=b)
  solver = sinkhorn_lib.Sinkhorn(threshold=threshold, max_iterations=max_iterations)
  return solver(problem)


def sinkhorn_coupling(x, y, a=None, b=None, *, epsilon: float = 0.05, **kwargs) -> jax.Array:
  """The entropic plan ``[n, m]`` (rows sum to ``a``, columns to ``b``)."""
  return sinkhorn(x, y, a, b, epsilon=epsilon, **kwargs).matrix


def exact_coupling(
    x: ArrayLike, y: ArrayLike, a: ArrayLike | None = None, b: ArrayLike | None = None,
    *, p: int = 2,
) -> np.ndarray:
  """Exact OT plan ``[n, m]`` for cost ``||x - y||^p`` by POT's network simplex (host)."""
  import ot as pot  # pylint: disable=g-import-not-at-top

  x = np.asarray(_check_points(x, "x"), dtype=np.float64)
  y = np.asarray(_check_points(y, "y"), dtype=np.float64)
  a = np.full(len(x), 1.0 / len(x)) if a is None else np.asarray(a, np.float64)
  b = np.full(len(y), 1.0 / len(y)) if b is None else np.asarray(b, np.float64)
  for name, w, n in (("a", a, len(x)), ("b", b, len(y))):
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
      raise ValueError(f"{name} must be ({n},) finite non-negative weights with a positive sum")
  a, b = a / a.sum(), b / b.sum()
  cost = pot.dist(x, y, metric="euclidean") ** p
  return pot.emd(a, b, cost, numItermax=10_000_000)


def _sqrtm_psd(mat: jax.Array) -> jax.Array:
  vals, vecs = jnp.linalg.eigh((mat + mat.T) / 2)
  return (vecs * jnp.sqrt(jnp.clip(vals, 0))) @ vecs.T


def gaussian_entropic_ot(
    mean_a: ArrayLike, cov_a: ArrayLike, mean_b: ArrayLike, cov_b: ArrayLike, epsilon: float,
) -> tuple[jax.Array, jax.Array]:
  """Entropic OT between N(mean_a, cov_a) and N(mean_b, cov_b), cost ``||x - y||^2``.

  Solves ``min_pi E_pi ||X - Y||^2 + epsilon KL(pi || N_a x N_b)`` in closed form. With
  ``s = epsilon / 2`` and ``D = (4 A^1/2 B A^1/2 + s^2 I)^1/2``:

    cost = ||m_a - m_b||^2 + tr A + tr B - tr D + d s (1 - log 2s) + s log det(D + s I)
    Cov_pi[X, Y] = (A^1/2 D A^-1/2 - s I) / 2

  (Janati, Muzellec, Peyre, Cuturi, NeurIPS 2020, Thm. 1 and Prop. 1.) The optimal
  coupling is the time-(0, 1) marginal of the Schrodinger bridge with reference Brownian
  motion of variance ``epsilon / 2`` per unit time.

  Returns:
    (cost: [], cross_covariance: [d, d]).
  """
  _check_epsilon(epsilon)
  mean_a, mean_b = jnp.atleast_1d(jnp.asarray(mean_a)), jnp.atleast_1d(jnp.asarray(mean_b))
  cov_a, cov_b = jnp.atleast_2d(jnp.asarray(cov_a)), jnp.atleast_2d(jnp.asarray(cov_b))
  d = mean_a.shape[0]
  s = epsilon / 2.0
  eye = jnp.eye(d, dtype=cov_a.dtype)
  root_a = _sqrtm_psd(cov_a)
  d_mat = _sqrtm_psd(4.0 * root_a @ cov_b @ root_a + s ** 2 * eye)
  _, logdet = jnp.linalg.slogdet(d_mat + s * eye)
  cost = (jnp.sum((mean_a - mean_b) ** 2) + jnp.trace(cov_a) + jnp.trace(cov_b)
          - jnp.trace(d_mat) + d * s * (1.0 - jnp.log(2.0 * s)) + s * logdet)
  cross = 0.5 * (root_a @ d_mat @ jnp.linalg.inv(root_a) - s * eye)
  return cost, cross

"""Min-max problems min_x max_y f(x, y) as first/second-order oracles.

A problem is a :class:`MinimaxProblem`: the game field F(z) = [grad_x f; -grad_y f] of the
stacked variable z = (x, y) and its Jacobian J(z) = dF/dz (the "Hessian" oracle of LEN). Both
are pure functions of z, so solvers can close over them inside ``lax.while_loop``.

Shipped problems:

* :func:`cubic_bilinear`: the synthetic saddle (rho/6)||x||^3 + y^T (A x - b) of the paper,
  with its exact solution and an analytic Jacobian (autodiff of ||x|| is NaN at x = 0).
* :func:`fairness_logistic`: fairness-aware logistic regression
  (1/n) sum l(b_i a_i^T x) - beta l(c_i y a_i^T x) + lam ||x||^2 - gamma y^2.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.typing import ArrayLike


class MinimaxProblem(NamedTuple):
  """A smooth min-max problem as oracles of the stacked variable z = (x, y).

  Attributes:
    name: short description, used in reports.
    dim_x: size of the min player x.
    dim_y: size of the max player y.
    field: F(z) -> [d], the game field [grad_x f; -grad_y f], d = dim_x + dim_y.
    jacobian: J(z) -> [d, d], dF/dz.
    z_star: [d] exact saddle point (NumPy float64) when known, else None.
    lipschitz_jacobian: rho, a Lipschitz constant of J (sets LEN's M), or None.
  """
  name: str
  dim_x: int
  dim_y: int
  field: Callable[[jax.Array], jax.Array]
  jacobian: Callable[[jax.Array], jax.Array]
  z_star: np.ndarray | None
  lipschitz_jacobian: float | None

  @property
  def dim(self) -> int:
    return self.dim_x + self.dim_y


def safe_norm(x: jax.Array) -> jax.Array:
  """Euclidean norm whose derivatives are finite (zero) at x = 0.

  ``jnp.linalg.norm`` differentiates as x / ||x||, which is 0/0 = NaN at the origin; the
  synthetic problem starts exactly there (z0 = 0). Here the gradient at 0 is defined as 0
  (the subgradient of minimal norm), and ``safe_norm(x) ** 3`` has the correct, finite
  gradient 3||x|| x and Hessian 3(||x|| I + x x^T / ||x||) (-> 0 at 0) under autodiff.

  Args:
    x: [n].

  Returns:
    Scalar ||x||.
  """
  return _safe_norm(x)


@jax.custom_jvp
def _safe_norm(x):
  return jnp.sqrt(jnp.sum(x * x))


@_safe_norm.defjvp
def _safe_norm_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  squared = jnp.sum(x * x)
  positive = squared > 0
  # Double-where: the untaken branch must not produce inf in reverse/forward mode either.
  norm_or_one = jnp.sqrt(jnp.where(positive, squared, 1.0))
  tangent_out = jnp.where(positive, jnp.sum(x * t) / norm_or_one, 0.0)
  return jnp.where(positive, norm_or_one, 0.0), tangent_out


def from_objective(
    objective: Callable[[jax.Array, jax.Array], jax.Array],
    dim_x: int,
    dim_y: int,
    *,
    jacobian: Callable[[jax.Array], jax.Array] | None = None,
    z_star: ArrayLike | None = None,
    lipschitz_jacobian: float | None = None,
    name: str = "objective",
) -> MinimaxProblem:
  """Builds the oracles of min_x max_y objective(x, y) by autodiff.

  Args:
    objective: f(x: [dim_x], y: [dim_y]) -> scalar, smooth, convex in x and concave in y for
      LEN's guarantees (the solvers run on any smooth f).
    dim_x: size of x (>= 1).
    dim_y: size of y (>= 1).
    jacobian: optional analytic J(z) -> [d, d]; by default the forward-mode Jacobian of F.
      Pass one when f has a kink in its derivatives (e.g. a raw ||x||^3 at x = 0), or use
      :func:`safe_norm` inside f.
    z_star: optional [d] known saddle point (then solvers record ||z - z*||).
    lipschitz_jacobian: optional rho (Lipschitz constant of J).
    name: label for reports.

  Returns:
    A MinimaxProblem.

  Raises:
    ValueError: non-positive sizes, or a z_star of the wrong shape / non-finite.
  """
  if int(dim_x) < 1 or int(dim_y) < 1:
    raise ValueError(f"dim_x and dim_y must be >= 1, got dim_x={dim_x}, dim_y={dim_y}")
  dim_x, dim_y = int(dim_x), int(dim_y)

  def field(z):
    x, y = z[:dim_x], z[dim_x:]
    grad_x, grad_y = jax.grad(objective, argnums=(0, 1))(x, y)
    return jnp.concatenate([grad_x, -grad_y])

  if jacobian is None:
    jacobian = jax.jacfwd(field)
  if z_star is not None:
    # Kept in NumPy float64: a jax array made outside enable_x64 would be float32.
    z_star = np.asarray(z_star, dtype=np.float64)
    if z_star.shape != (dim_x + dim_y,):
      raise ValueError(
          f"z_star must have shape ({dim_x + dim_y},), got {tuple(z_star.shape)}")
    if not np.all(np.isfinite(z_star)):
      raise ValueError("z_star must be finite")
  return MinimaxProblem(name, dim_x, dim_y, field, jacobian, z_star, lipschitz_jacobian)


# --------------------------------------------------------------------------- synthetic


def bidiagonal_matrix(n: int) -> np.ndarray:
  """The paper's A: [n, n] upper bidiagonal, 1 on the diagonal and -1 above it."""
  return np.eye(n) - np.eye(n, k=1)


def rademacher_vector(n: int, seed: int) -> np.ndarray:
  """b in {-1, +1}^n drawn like the official script (NumPy's legacy seeded generator).

  The official figures use ``np.random.seed(42); 2 * randint(2, size=n) - 1``; drawing b the
  same way lets the iteration counts be compared on the very same instance.
  """
  return 2.0 * np.random.RandomState(seed).randint(2, size=n).astype(np.float64) - 1.0


def _cubic_jacobian(a_np: np.ndarray, rho: float, z: jax.Array) -> jax.Array:
  """J(z) [d, d] of the cubic bilinear saddle with A = ``a_np`` [n, n] and cubic weight rho."""
  n = a_np.shape[0]
  a_mat = jnp.asarray(a_np, z.dtype)
  x = z[:n]
  squared = x @ x
  positive = squared > 0
  norm_or_one = jnp.sqrt(jnp.where(positive, squared, 1.0))
  # (rho/2)(||x|| I + x x^T / ||x||); its limit at x = 0 is 0 (the cubic is C^2 there).
  block_xx = jnp.where(
      positive,
      rho / 2.0 * (norm_or_one * jnp.eye(n, dtype=z.dtype)
                   + jnp.outer(x, x) / norm_or_one),
      0.0)
  top = jnp.concatenate([block_xx, a_mat.T], axis=1)
  bottom = jnp.concatenate([-a_mat, jnp.zeros((n, n), z.dtype)], axis=1)
  return jnp.concatenate([top, bottom], axis=0)


def cubic_bilinear(n: int, seed: int = 42, *, rho: float | None = None,
                   b: ArrayLike | None = None) -> MinimaxProblem:
  """The synthetic saddle min_x max_y (rho/6)||x||^3 + y^T (A x - b).

  Exact saddle: x* = A^{-1} b, y* = -(rho/2)||x*|| A^{-T} x*. J is (rho)-Lipschitz.

  Args:
    n: size of x and of y (d = 2n), n >= 2.
    seed: seed of the Rademacher b (ignored when b is given).
    rho: cubic weight; default 1 / (20 n) as in the paper.
    b: optional [n] right-hand side.

  Returns:
    A MinimaxProblem in float64 when x64 is enabled (use
    ``jaxlib_papers.core.precision.enable_x64``).
  """
  if int(n) < 2:
    raise ValueError(f"n must be >= 2, got {n}")
  n = int(n)
  rho = 1.0 / (20.0 * n) if rho is None else float(rho)
  if not rho > 0:
    raise ValueError(f"rho must be > 0, got {rho}")
  a_np = bidiagonal_matrix(n)
  b_np = rademacher_vector(n, seed) if b is None else np.asarray(b, np.float64)
  if b_np.shape != (n,) or not np.all(np.isfinite(b_np)):
    raise ValueError(f"b must be a finite vector of shape ({n},), got {b_np.shape}")
  x_star = np.linalg.solve(a_np, b_np)
  y_star = -rho / 2.0 * np.linalg.norm(x_star) * np.linalg.solve(a_np.T, x_star)
  z_star_np = np.concatenate([x_star, y_star])

  # NumPy constants, turned into jax arrays at trace time so they take the dtype of the
  # mode (float64 under enable_x64) the solver runs in.
  def objective(x, y):
    a_mat, b_vec = jnp.asarray(a_np, x.dtype), jnp.asarray(b_np, x.dtype)
    return rho / 6.0 * safe_norm(x) ** 3 + y @ (a_mat @ x - b_vec)

  def field(z):
    # Analytic, cheaper than autodiff and exact at x = 0.
    a_mat, b_vec = jnp.asarray(a_np, z.dtype), jnp.asarray(b_np, z.dtype)
    x, y = z[:n], z[n:]
    grad_x = rho / 2.0 * safe_norm(x) * x + a_mat.T @ y
    return jnp.concatenate([grad_x, -(a_mat @ x - b_vec)])

  jacobian = functools.partial(_cubic_jacobian, a_np, rho)
  problem = from_objective(objective, n, n, jacobian=jacobian, z_star=z_star_np,
                           lipschitz_jacobian=rho, name=f"cubic_bilinear(n={n})")
  return problem._replace(field=field)


def cubic_bilinear_objective(n: int, seed: int = 42, rho: float | None = None):
  """(objective, z_star) of :func:`cubic_bilinear`, for autodiff-vs-analytic checks."""
  problem = cubic_bilinear(n, seed, rho=rho)
  rho = problem.lipschitz_jacobian
  a_np, b_np = bidiagonal_matrix(n), rademacher_vector(n, seed)

  def objective(x, y):
    a_mat, b_vec = jnp.asarray(a_np, x.dtype), jnp.asarray(b_np, x.dtype)
    return rho / 6.0 * safe_norm(x) ** 3 + y @ (a_mat @ x - b_vec)

  return objective, problem.z_star


# --------------------------------------------------------------------------- fairness


def _log1p_exp(u):
  """log(1 + exp(u)), stable for large |u|."""
  return jnp.logaddexp(0.0, u)


def fairness_logistic(features: ArrayLike, labels: ArrayLike, sensitive: ArrayLike, *,
                      lam: float = 1e-4, gamma: float = 1e-4, beta: float = 0.5,
                      rho: float = 10.0, name: str = "fairness") -> MinimaxProblem:
  """Fairness-aware logistic regression as a min-max problem.

  f(x, y) = (1/n) sum_i [l(b_i a_i^T x) - beta l(c_i y a_i^T x)] + lam ||x||^2 - gamma y^2
  with l(u) = log(1 + exp(-u)): x classifies b from a, while the adversary y (a scalar)
  tries to predict the sensitive attribute c from the score a^T x.

  Args:
    features: [n, p] the a_i.
    labels: [n] b_i in {-1, +1}.
    sensitive: [n] c_i in {-1, +1}.
    lam: ridge weight on x (> 0).
    gamma: ridge weight on y (> 0).
    beta: weight of the adversary (>= 0).
    rho: the Lipschitz constant of J that LEN's M uses (the official code's 10).
    name: label for reports.

  Returns:
    A MinimaxProblem with dim_x = p, dim_y = 1 and an autodiff Jacobian.

  Raises:
    ValueError: shapes, non-finite values, labels outside {-1, +1}, bad weights.
  """
  a = np.asarray(features, dtype=np.float64)
  b = np.asarray(labels, dtype=np.float64)
  c = np.asarray(sensitive, dtype=np.float64)
  if a.ndim != 2 or a.shape[0] < 1 or a.shape[1] < 1:
    raise ValueError(f"features must be [n, p] with n, p >= 1, got shape {a.shape}")
  n, p = a.shape
  for arr, what in ((b, "labels"), (c, "sensitive")):
    if arr.shape != (n,):
      raise ValueError(f"{what} must have shape ({n},), got {arr.shape}")
    if not np.all(np.isin(arr, (-1.0, 1.0))):
      raise ValueError(f"{what} must take values in {{-1, +1}}")
  if not np.all(np.isfinite(a)):
    raise ValueError("features contain NaN or Inf")
  if not lam > 0 or not gamma > 0 or not beta >= 0:
    raise ValueError(f"need lam > 0, gamma > 0, beta >= 0; got {lam}, {gamma}, {beta}")
  def objective(x, y):
    a_mat, b_vec, c_vec = (jnp.asarray(v, x.dtype) for v in (a, b, c))
    score = a_mat @ x
    loss_label = _log1p_exp(-b_vec * score)
    loss_sensitive = _log1p_exp(-c_vec * y[0] * score)
    return (jnp.mean(loss_label - beta * loss_sensitive)
            + lam * (x @ x) - gamma * (y @ y))

  return from_objective(objective, p, 1, lipschitz_jacobian=float(rho), name=name)

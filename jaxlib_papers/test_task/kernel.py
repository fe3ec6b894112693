"""The paper's fits as pure float64 functions (no ``jit`` here: callers jit, tests compare).

Every fit takes per-model weights ``w`` ([n], >= 0): 0/1 selects a subset without changing
shapes (one compiled program serves every subset), and bootstrap counts make a weighted fit
equal to the fit on the resampled rows (frequency weights). With ``w`` all ones each fit is
ordinary least squares, as statsmodels' ``OLS`` computes it.

1. :func:`ols`: coefficients by QR, classical standard errors s^2 (X^T W X)^-1 with
   df = sum(w) - k, two-sided t-test p-values, 95% t intervals, and both R^2 forms
   (uncentered 1 - SSE / sum w y^2, as statsmodels reports for a model without a constant;
   centered 1 - SSE / sum w (y - ybar)^2).
2. :func:`fit_hinge` (Section 1a): A - r = alpha max(0, log10 C - c_e) + theta N, no
   intercept, profiled exactly over a grid of c_e: for each grid point the 2x2 normal
   equations in closed form (vmapped over the grid), the argmin of the SSE, then :func:`ols`
   at the best c_e.
3. :func:`fit_emergence` (Section 1c): the same with theta dropped: A - r = alpha max(0,
   log10 C - c_e), a flat floor at chance.
4. :func:`segmented_features` (appendix tables): 1, N, min(L, 22), clip(L - 22, 0, 1),
   max(0, L - 23) for :func:`ols` (psi, phi).
5. :func:`pareto_area`: the area between the step fronts of all models and of the older ones.
6. :func:`bootstrap_hinge`: models resampled with replacement, the emergence point refitted
   for every sample (vmapped over samples, in batches).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.special import betainc
from jax.typing import ArrayLike

from jaxlib_papers.core import prng

# A grid point whose design is this close to singular (relative) has no fit: SSE = inf.
_SINGULAR = 1e-12


class OLSFit(NamedTuple):
  """An ordinary least-squares fit with its classical inference (float64)."""
  coef: jax.Array           # [k] coefficients
  se: jax.Array             # [k] standard errors sqrt(diag(s^2 (X^T W X)^-1))
  t: jax.Array              # [k] coef / se
  p: jax.Array              # [k] two-sided p-values of Student's t with df
  ci_low: jax.Array         # [k] 95% interval: coef -/+ t_{0.975, df} se
  ci_high: jax.Array        # [k]
  df: jax.Array             # [] residual degrees of freedom sum(w) - k
  sse: jax.Array            # [] sum w (y - X coef)^2
  r2_uncentered: jax.Array  # [] 1 - SSE / sum w y^2
  r2_centered: jax.Array    # [] 1 - SSE / sum w (y - ybar)^2


class HingeFit(NamedTuple):
  """:func:`fit_hinge`'s result: ``ols.coef`` is [theta, alpha]."""
  emergence: jax.Array      # [] log10 c_e, the best grid point
  ols: OLSFit               # the fit at c_e (k = 2: theta on N, alpha on the hinge)
  sse_profile: jax.Array    # [G] SSE at every grid point (inf where undefined)


class EmergenceFit(NamedTuple):
  """:func:`fit_emergence`'s result."""
  emergence: jax.Array      # [] log10 c_e
  alpha: jax.Array          # [] slope above c_e
  sse: jax.Array            # [] at c_e
  sse_profile: jax.Array    # [G]


def emergence_grid(low: float = 19.0, high: float = 25.0, step: float = 5e-4) -> jax.Array:
  """[G] float64 grid low + step * i, i = 0 .. G - 1, G = round((high - low) / step)."""
  count = int(round((high - low) / step))
  return low + step * jnp.arange(count, dtype=jnp.float64)


def t_two_sided_p(t: ArrayLike, df: ArrayLike) -> jax.Array:
  """P(|T| >= |t|) for Student's t with ``df`` degrees of freedom: I_{df/(df+t^2)}(df/2, 1/2)."""
  t = jnp.asarray(t)
  return betainc(df / 2.0, 0.5, df / (df + t * t))


def t_cdf(t: ArrayLike, df: ArrayLike) -> jax.Array:
  """Student's t CDF through the regularised incomplete beta function."""
  t = jnp.asarray(t)
  tail = 0.5 * t_two_sided_p(t, df)
  return jnp.where(t > 0, 1.0 - tail, tail)


def t_quantile(q: ArrayLike, df: ArrayLike, iterations: int = 120) -> jax.Array:
  """The ``q`` quantile (0.5 <= q < 1) of Student's t, by bisection of :func:`t_cdf`."""
  def halve(_, bracket):
    low, high = bracket
    mid = 0.5 * (low + high)
    below = t_cdf(mid, df) < q
    return jnp.where(below, mid, low), jnp.where(below, high, mid)
  low, high = jax.lax.fori_loop(0, iterations, halve,
                                (jnp.zeros_like(df * 1.0), jnp.full_like(df * 1.0, 1e4)))
  return 0.5 * (low + high)


def ols(design: ArrayLike, y: ArrayLike, w: ArrayLike | None = None,
        critical: ArrayLike | None = None) -> OLSFit:
  """Weighted least squares of ``y`` on ``design`` with classical inference.

  Args:
    design: [n, k] regressors (add a column of ones for an intercept).
    y: [n] responses.
    w: [n] weights >= 0 (default ones): 0/1 selects rows, counts repeat them.
    critical: t_{0.975, df} for the intervals when the caller knows df (saves compiling
      :func:`t_quantile`'s bisection); None computes it.

  Returns:
    :class:`OLSFit`.
  """
  design, y = jnp.asarray(design), jnp.asarray(y)
  w = jnp.ones_like(y) if w is None else jnp.asarray(w)
  root = jnp.sqrt(w)
  q, r = jnp.linalg.qr(design * root[:, None])
  coef = jax.scipy.linalg.solve_triangular(r, q.T @ (y * root), lower=False)
  resid = y - design @ coef
  sse = jnp.sum(w * resid ** 2)
  df = jnp.sum(w) - design.shape[1]
  r_inv = jax.scipy.linalg.solve_triangular(r, jnp.eye(design.shape[1], dtype=r.dtype),
                                            lower=False)
  se = jnp.sqrt(sse / df * jnp.sum(r_inv ** 2, axis=1))
  t = coef / se
  half = (t_quantile(0.975, df) if critical is None else critical) * se
  mean = jnp.sum(w * y) / jnp.sum(w)
  return OLSFit(coef=coef, se=se, t=t, p=t_two_sided_p(t, df), ci_low=coef - half,
                ci_high=coef + half, df=df, sse=sse,
                r2_uncentered=1.0 - sse / jnp.sum(w * y ** 2),
                r2_centered=1.0 - sse / jnp.sum(w * (y - mean) ** 2))


def hinge(log_compute: ArrayLike, emergence: ArrayLike) -> jax.Array:
  """max(0, log10 C - c_e): [n] for a scalar c_e, [G, n] for a [G] grid."""
  log_compute, emergence = jnp.asarray(log_compute), jnp.asarray(emergence)
  return jnp.maximum(0.0, log_compute - emergence[..., None])


def hinge_profile(log_compute: ArrayLike, new: ArrayLike, y: ArrayLike, w: ArrayLike,
                  grid: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """SSE and theta of y = theta N + alpha max(0, L - c) at every grid point c.

  Closed-form 2x2 normal equations at every grid point at once: the sums over models are
  products of the [G, n] hinge matrix with [n] vectors, so a batch of weight vectors (the
  bootstrap) becomes one matrix product. Points where the hinge is zero for every selected
  model, or collinear with N, get SSE = inf.

  Returns:
    (sse [G], theta [G]).
  """
  new, y, w = jnp.asarray(new), jnp.asarray(y), jnp.asarray(w)
  x = hinge(log_compute, grid)                                   # [G, n]
  s_nn, s_ny, s_yy = jnp.sum(w * new * new), jnp.sum(w * new * y), jnp.sum(w * y * y)
  s_nx, s_xx, s_xy = x @ (w * new), (x * x) @ w, x @ (w * y)     # [G] each
  det = s_nn * s_xx - s_nx ** 2
  ok = (s_xx > 0) & (det > _SINGULAR * s_nn * s_xx)
  det = jnp.where(ok, det, 1.0)
  theta = (s_xx * s_ny - s_nx * s_xy) / det
  alpha = (s_nn * s_xy - s_nx * s_ny) / det
  sse = s_yy - theta * s_ny - alpha * s_xy
  return jnp.where(ok, sse, jnp.inf), jnp.where(ok, theta, jnp.nan)


def emergence_profile(log_compute: ArrayLike, y: ArrayLike, w: ArrayLike, grid: ArrayLike
                      ) -> tuple[jax.Array, jax.Array]:
  """SSE and alpha of y = alpha max(0, L - c) at every grid point (inf where the hinge is 0).

  Returns:
    (sse [G], alpha [G]).
  """
  y, w = jnp.asarray(y), jnp.asarray(w)
  x = hinge(log_compute, grid)                                   # [G, n]
  s_xx, s_xy = (x * x) @ w, x @ (w * y)
  ok = s_xx > 0
  alpha = s_xy / jnp.where(ok, s_xx, 1.0)
  sse = jnp.sum(w * y * y) - alpha * s_xy
  return jnp.where(ok, sse, jnp.inf), jnp.where(ok, alpha, jnp.nan)


def fit_hinge(log_compute: ArrayLike, new: ArrayLike, y: ArrayLike, w: ArrayLike,
              grid: ArrayLike, critical: ArrayLike | None = None) -> HingeFit:
  """The confound fit y = theta N + alpha max(0, L - c_e) (y = A - r), c_e by exact grid search.

  Args:
    log_compute: [n] L = log10 C.
    new: [n] 1 for a model released after the cutoff, else 0.
    y: [n] accuracy minus chance.
    w: [n] weights (0/1 selection or bootstrap counts).
    grid: [G] candidate log10 c_e (first minimum wins on ties).
    critical: t_{0.975, df} (see :func:`ols`).

  Returns:
    :class:`HingeFit`: c_e and the OLS fit (theta, alpha) there.
  """
  log_compute, grid = jnp.asarray(log_compute), jnp.asarray(grid)
  sse, _ = hinge_profile(log_compute, new, y, w, grid)
  best = grid[jnp.argmin(sse)]
  design = jnp.stack([jnp.asarray(new, log_compute.dtype), hinge(log_compute, best)], axis=1)
  return HingeFit(emergence=best, ols=ols(design, y, w, critical), sse_profile=sse)


def fit_emergence(log_compute: ArrayLike, y: ArrayLike, w: ArrayLike, grid: ArrayLike
                  ) -> EmergenceFit:
  """The emergence fit y = alpha max(0, L - c_e) (y = A - r, floor at chance), c_e by grid.

  Args:
    log_compute: [n]; y: [n]; w: [n] weights (the older models in range: 1, others 0).
    grid: [G] candidate log10 c_e.
  """
  grid = jnp.asarray(grid)
  sse, alpha = emergence_profile(log_compute, y, w, grid)
  index = jnp.argmin(sse)
  return EmergenceFit(emergence=grid[index], alpha=alpha[index], sse=sse[index],
                      sse_profile=sse)


def segmented_features(log_compute: ArrayLike, new: ArrayLike) -> jax.Array:
  """[n, 5] design of the appendix tables: 1, N, min(L, 22), clip(L - 22, 0, 1), max(0, L - 23)."""
  log_compute = jnp.asarray(log_compute)
  return jnp.stack([jnp.ones_like(log_compute), jnp.asarray(new, log_compute.dtype),
                    jnp.minimum(log_compute, 22.0), jnp.clip(log_compute - 22.0, 0.0, 1.0),
                    jnp.maximum(0.0, log_compute - 23.0)], axis=1)


def pareto_area(log_compute: ArrayLike, score: ArrayLike, new: ArrayLike) -> jax.Array:
  """Area between the step fronts of all models and of the older ones, over log10 C.

  Each front is the running best score in order of compute (a point counts only where it
  improves strictly), flat after its last model up to the largest compute and, for the older
  models, extended left at its first model's score. Both are evaluated on the sorted
  compute of every model (a refinement of the union of their knots, so the sum is the same).

  Args:
    log_compute: [n]; score: [n] accuracies; new: [n] 0/1 (at least one 0).
  """
  log_compute, score = jnp.asarray(log_compute), jnp.asarray(score)
  order = jnp.argsort(log_compute, stable=True)
  knots, score = log_compute[order], score[order]
  old = jnp.asarray(new)[order] == 0
  front_all = jax.lax.cummax(score)
  front_old = jax.lax.cummax(jnp.where(old, score, -jnp.inf))
  first_old = score[jnp.argmax(old)]
  front_old = jnp.where(jnp.isfinite(front_old), front_old, first_old)
  return jnp.sum((front_all - front_old)[:-1] * jnp.diff(knots))


class BootstrapSettings(NamedTuple):
  """:func:`bootstrap_hinge`'s sizes."""
  num_samples: int = 1000   # B, resamples of the models
  batch_size: int = 50      # samples vmapped at once ([batch, G] SSE arrays in memory)


def resample_counts(key: jax.Array, num_models: int, num_samples: int) -> jax.Array:
  """[B, n] float64 counts of each model in B draws of n models with replacement."""
  draws = prng.randint(key, (num_samples, num_models), 0, num_models)
  return jax.vmap(lambda d: jnp.zeros(num_models).at[d].add(1.0))(draws)


def bootstrap_hinge(key: jax.Array, log_compute: ArrayLike, new: ArrayLike, y: ArrayLike,
                    grid: ArrayLike, settings: BootstrapSettings = BootstrapSettings()
                    ) -> tuple[jax.Array, jax.Array]:
  """theta and c_e refitted on B resamples of the models (a resample = frequency weights).

  Returns:
    (theta [B], log10 c_e [B]).
  """
  grid = jnp.asarray(grid)
  counts = resample_counts(key, jnp.shape(y)[0], settings.num_samples)

  def refit(w):
    sse, theta = hinge_profile(log_compute, new, y, w, grid)
    index = jnp.argmin(sse)
    return theta[index], grid[index]

  return jax.lax.map(refit, counts, batch_size=settings.batch_size)

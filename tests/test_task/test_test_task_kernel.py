"""The fits of ``test_task.kernel`` against numpy / scipy closed forms (float64, 1e-8)."""

import jax
import numpy as np
import pytest
import scipy.stats

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.test_task import kernel


@pytest.fixture(autouse=True)
def x64():
  with enable_x64():
    yield


def _world(n=40, seed=0, theta=0.07, alpha=0.2, c_e=21.6):
  rng = np.random.default_rng(seed)
  log_c = rng.uniform(20.0, 24.0, n)
  new = (rng.uniform(size=n) < 0.35).astype(float)
  y = alpha * np.maximum(0.0, log_c - c_e) + theta * new + 0.03 * rng.normal(size=n)
  return log_c, new, y


def numpy_ols(design, y, intercept_free=True):
  """statsmodels' OLS summary in closed form (numpy lstsq, scipy's t)."""
  coef, *_ = np.linalg.lstsq(design, y, rcond=None)
  resid = y - design @ coef
  n, k = design.shape
  df = n - k
  s2 = resid @ resid / df
  se = np.sqrt(np.diag(s2 * np.linalg.inv(design.T @ design)))
  t = coef / se
  half = scipy.stats.t.ppf(0.975, df) * se
  return dict(coef=coef, se=se, t=t, p=2 * scipy.stats.t.sf(np.abs(t), df),
              ci_low=coef - half, ci_high=coef + half, sse=resid @ resid,
              r2_uncentered=1 - resid @ resid / (y @ y),
              r2_centered=1 - resid @ resid / ((y - y.mean()) @ (y - y.mean())))


def _assert_fit(fit, expected, atol=1e-8):
  for name, value in expected.items():
    np.testing.assert_allclose(np.asarray(getattr(fit, name)), value, rtol=1e-8, atol=atol,
                               err_msg=name)


def test_student_t_matches_scipy():
  t = np.array([-3.5, -1.0, 0.0, 0.3, 2.0, 6.0])
  df = np.array([1.0, 2.0, 5.0, 17.0, 51.0, 200.0])
  got = jax.jit(lambda t, df: (kernel.t_cdf(t, df), kernel.t_two_sided_p(t, df),
                               kernel.t_quantile(0.975, df)))(t, df)
  np.testing.assert_allclose(got[0], scipy.stats.t.cdf(t, df), rtol=1e-10, atol=1e-13)
  np.testing.assert_allclose(got[1], 2 * scipy.stats.t.sf(np.abs(t), df), rtol=1e-10)
  np.testing.assert_allclose(got[2], scipy.stats.t.ppf(0.975, df), rtol=1e-10)


def test_ols_equals_closed_forms_with_and_without_intercept_jit_equals_eager():
  log_c, new, y = _world()
  for design in (np.c_[new, np.maximum(0, log_c - 21.5)],
                 np.asarray(kernel.segmented_features(log_c, new))):
    eager = kernel.ols(design, y)
    jitted = jax.jit(kernel.ols)(design, y)
    _assert_fit(eager, numpy_ols(design, y))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14),
                 eager, jitted)
    # A known critical value gives the same intervals as the bisection.
    critical = scipy.stats.t.ppf(0.975, len(y) - design.shape[1])
    np.testing.assert_allclose(kernel.ols(design, y, None, critical).ci_high,
                               eager.ci_high, rtol=1e-10)


def test_weights_select_rows_and_counts_repeat_them():
  log_c, new, y = _world(n=30, seed=1)
  design = np.c_[np.ones_like(y), new, log_c]
  counts = np.random.default_rng(2).integers(0, 3, size=len(y)).astype(float)
  fit = jax.jit(kernel.ols)(design, y, counts)
  rows = np.repeat(np.arange(len(y)), counts.astype(int))
  _assert_fit(fit, numpy_ols(design[rows], y[rows]))


def numpy_hinge(log_c, new, y, grid):
  """Exact profile least squares over the grid: lstsq at every point, first minimum."""
  best = None
  for c in grid:
    x = np.c_[new, np.maximum(0.0, log_c - c)]
    if not x[:, 1].any():
      continue
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    sse = np.sum((y - x @ coef) ** 2)
    if best is None or sse < best[0]:
      best = (sse, c)
  return best[1], numpy_ols(np.c_[new, np.maximum(0.0, log_c - best[1])], y)


def test_hinge_fit_is_lstsq_at_the_best_grid_point_jit_equals_eager():
  log_c, new, y = _world(seed=3)
  grid = np.asarray(kernel.emergence_grid(19.0, 25.0, 5e-3))
  c_best, expected = numpy_hinge(log_c, new, y, grid)
  fit = jax.jit(kernel.fit_hinge)(log_c, new, y, np.ones_like(y), grid)
  assert float(fit.emergence) == c_best
  _assert_fit(fit.ols, expected)
  eager = kernel.fit_hinge(log_c, new, y, np.ones_like(y), grid)
  assert float(eager.emergence) == c_best
  np.testing.assert_allclose(eager.ols.coef, fit.ols.coef, rtol=1e-12)
  # Grid points with no model above them have no fit.
  assert np.all(np.isinf(np.asarray(fit.sse_profile)[grid > log_c.max()]))


def test_emergence_fit_matches_numpy_on_a_subset():
  log_c, _, y = _world(seed=4, theta=0.0)
  w = (np.arange(len(y)) % 4 != 0).astype(float)
  grid = np.asarray(kernel.emergence_grid(19.5, 24.0, 5e-3))
  sel = w > 0
  sses = []
  for c in grid:
    x = np.maximum(0.0, log_c[sel] - c)
    sses.append(np.inf if x @ x == 0 else np.sum((y[sel] - (x @ y[sel]) / (x @ x) * x) ** 2))
  fit = jax.jit(kernel.fit_emergence)(log_c, y, w, grid)
  best = grid[int(np.argmin(sses))]
  assert float(fit.emergence) == best
  x = np.maximum(0.0, log_c[sel] - best)
  np.testing.assert_allclose(fit.alpha, (x @ y[sel]) / (x @ x), rtol=1e-10)


def loop_pareto(log_c, score, new):
  """The definition: step fronts on the union of their knots, left-extrapolated."""
  def front(idx):
    idx = sorted(idx, key=lambda i: log_c[i])
    knots, values = [log_c[idx[0]]], [score[idx[0]]]
    for i in idx[1:]:
      if score[i] > values[-1]:
        knots.append(log_c[i])
        values.append(score[i])
    return knots + [log_c[idx[-1]]], values + [values[-1]]

  def at(fr, g):
    knots, values = fr
    return values[max([0] + [j for j, k in enumerate(knots) if k <= g])]

  every = front(list(range(len(score))))
  old = front([i for i in range(len(score)) if not new[i]])
  grid = sorted(set(every[0]) | set(old[0]))
  return sum((at(every, g) - at(old, g)) * (h - g) for g, h in zip(grid, grid[1:]))


def test_pareto_area_matches_the_step_front_definition():
  rng = np.random.default_rng(5)
  for trial in range(4):
    log_c = np.round(rng.uniform(20, 24, 25), 1 if trial % 2 else 6)  # ties when rounded
    score = rng.uniform(0.2, 0.8, 25)
    new = (rng.uniform(size=25) < 0.4).astype(float)
    new[np.argmin(log_c)] = float(trial == 3)  # an older model first, or a newer one
    new[0] = 0.0
    np.testing.assert_allclose(jax.jit(kernel.pareto_area)(log_c, score, new),
                               loop_pareto(log_c, score, new), rtol=1e-12, atol=1e-12)


def test_bootstrap_refits_each_resample_like_a_fit_on_the_repeated_rows():
  log_c, new, y = _world(n=30, seed=6)
  grid = np.asarray(kernel.emergence_grid(19.0, 25.0, 1e-2))
  key = jax.random.key(7)
  settings = kernel.BootstrapSettings(num_samples=6, batch_size=4)
  theta, c_e = jax.jit(kernel.bootstrap_hinge, static_argnames="settings")(
      key, log_c, new, y, grid, settings)
  counts = np.asarray(kernel.resample_counts(key, len(y), 6))
  assert counts.shape == (6, 30) and np.all(counts.sum(axis=1) == 30)
  for b in range(6):
    rows = np.repeat(np.arange(len(y)), counts[b].astype(int))
    c_best, expected = numpy_hinge(log_c[rows], new[rows], y[rows], grid)
    assert float(c_e[b]) == c_best
    np.testing.assert_allclose(theta[b], expected["coef"][0], rtol=1e-8, atol=1e-10)

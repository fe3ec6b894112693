"""The four generators satisfy their defining equations; twins differ only by the shift."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.aerca import data


def _gen(name, num_series, **kw):
  fn = jax.jit(lambda k: tuple(data.generate(name, k, num_series, **kw))[:5])
  return data.Dataset(*jax.device_get(fn(jax.random.key(3))), name=name)


def _one_anomaly_per_series(ds, low, high, r_low, r_high):
  for lab in ds.labels:
    rows = np.flatnonzero(lab.any(1))
    assert len(rows) == 1
    assert low <= rows[0] < high
    assert r_low <= lab[rows[0]].sum() <= r_high
  return [int(np.flatnonzero(lab.any(1))[0]) for lab in ds.labels]


def test_linear_var_equation_graph_and_shift():
  ds = _gen("linear", 6, length=60)
  a = ds.weights[0]
  np.testing.assert_array_equal(a != 0, data.LINEAR_GRAPH.astype(bool))
  assert np.all((np.abs(a[a != 0]) >= 0.2) & (np.abs(a[a != 0]) <= 0.8))
  t_ps = _one_anomaly_per_series(ds, 12, 48, 1, 4)
  for x, xa, lab, t_p in zip(ds.normal, ds.abnormal, ds.labels, t_ps):
    np.testing.assert_array_equal(x[0], 0.0)
    eps = x[1:] - x[:-1] @ a.T
    eps_ab = xa[1:] - xa[:-1] @ a.T
    np.testing.assert_allclose(eps_ab - eps, 3.0 * lab[1:], atol=1e-5)
    np.testing.assert_array_equal(x[:t_p], xa[:t_p])
    assert 0.25 < eps.std() < 0.55   # N(0, 0.4^2) noise


def test_nonlinear_cosine_equation_graph_and_shift():
  ds = _gen("nonlinear", 5, length=60, num_vars=5, num_edges=6)
  g = ds.graph
  assert g.sum() == 6 and np.all(np.diag(g) == 0)
  w = ds.weights                                   # [5, p, p]
  np.testing.assert_array_equal(w[0] != 0, g.astype(bool))
  coef = w[:, g.astype(bool)]
  assert coef.min() >= 0.1 and coef.max() <= 2.0
  t_ps = _one_anomaly_per_series(ds, 12, 48, 1, 5)
  for x, xa, lab, t_p in zip(ds.normal, ds.abnormal, ds.labels, t_ps):
    def resid(series):
      out = []
      for t in range(5, series.shape[0]):
        pred = sum(w[l] @ np.cos(series[t - l - 1] + 1.0) for l in range(5))
        out.append(series[t] - pred)
      return np.array(out)
    np.testing.assert_allclose(resid(xa) - resid(x), 10.0 * lab[5:], atol=1e-4)
    np.testing.assert_array_equal(x[:t_p], xa[:t_p])


def _rk4_fine(f, x, dt, steps):
  for _ in range(steps):
    k1 = f(x)
    k2 = f(x + dt / 2 * k1)
    k3 = f(x + dt / 2 * k2)
    k4 = f(x + dt * k3)
    x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
  return x


def test_lorenz96_drift_flow_and_shift():
  p, forcing = 6, 8.0
  x = np.arange(1.0, p + 1.0)
  expected = np.array([(x[(i + 1) % p] - x[i - 2]) * x[i - 1] - x[i] + forcing
                       for i in range(p)])
  np.testing.assert_allclose(data.lorenz96_drift(jnp.asarray(x), forcing), expected)
  ds = _gen("lorenz96", 3, length=40, num_vars=p)
  g = ds.graph
  for i in range(p):
    assert {j for j in range(p) if g[i, j]} == {i, (i - 1) % p, (i - 2) % p, (i + 1) % p}
  drift = lambda v: (np.roll(v, -1) - np.roll(v, 2)) * np.roll(v, 1) - v + forcing
  t_ps = _one_anomaly_per_series(ds, 20, 32, 1, p // 2)
  for xn, xa, lab, t_p in zip(ds.normal, ds.abnormal, ds.labels, t_ps):
    assert np.all((xn[0] >= 0) & (xn[0] <= 1))
    # One sample = 0.1 time units; a 10x finer RK4 agrees to integration error.
    for t in (3, 17):
      np.testing.assert_allclose(xn[t + 1], _rk4_fine(drift, xn[t].astype(np.float64),
                                                      0.001, 100), atol=2e-3)
    np.testing.assert_array_equal(xn[:t_p], xa[:t_p])
    bumped = _rk4_fine(drift, xa[t_p - 1].astype(np.float64), 0.001, 100)
    np.testing.assert_allclose(xa[t_p] - bumped, 10.0 * lab[t_p], atol=2e-3)


def test_lotka_volterra_drift_graph_and_twin():
  q, block = 4, 2
  params = data.LotkaVolterraParams()
  rng = np.random.default_rng(0)
  state = rng.uniform(5, 15, 2 * q)
  x, y = state[:q], state[q:]
  dx = [params.alpha * x[j] - params.beta * x[j] * y[(j // block) * block:][:block].sum()
        - params.crowding * (x[j] / 200) ** 2 for j in range(q)]
  dy = [params.delta * x[(j // block) * block:][:block].sum() * y[j] - params.gamma * y[j]
        for j in range(q)]
  np.testing.assert_allclose(data.lotka_volterra_drift(jnp.asarray(state), params, block),
                             np.concatenate([dx, dy]), rtol=1e-5)
  g = data.lotka_volterra_graph(q, block)
  assert g[0, q] == g[0, q + 1] == 1 and g[0, q + 2] == 0    # prey 0 <- predators 0, 1
  assert g[q + 3, 2] == g[q + 3, 3] == 1 and g[q + 3, 0] == 0
  assert np.all(np.diag(g) == 1)
  ds = _gen("lotka_volterra", 3, length=30, num_species=q,
            sim=data.LotkaVolterraSim(burn_in=10))
  assert ds.normal.shape == (3, 30, 2 * q) and np.all(ds.normal >= 0)
  for xn, xa, lab in zip(ds.normal, ds.abnormal, ds.labels):
    rows = np.flatnonzero(lab.any(1))
    assert len(rows) == 1
    t_p = rows[0]
    roots = np.flatnonzero(lab[t_p])
    assert 3 <= len(roots) <= 4 and (np.all(roots < q) or np.all(roots >= q))
    np.testing.assert_array_equal(xn[:t_p], xa[:t_p])
    # The shift (+20 on the noise) shows on exactly the root-cause species at t_p.
    jump = xa[t_p] - xn[t_p]
    np.testing.assert_allclose(jump[roots], 20.0, atol=0.5)
    np.testing.assert_allclose(np.delete(jump, roots), 0.0, atol=0.5)


def test_generators_are_pure_functions_of_the_key():
  fn = jax.jit(lambda k: data.linear(k, 2, length=30).normal)
  a, b = fn(jax.random.key(1)), fn(jax.random.key(1))
  np.testing.assert_array_equal(a, b)
  assert not np.allclose(a, fn(jax.random.key(2)))


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match="data set name"):
    data.generate("nope", jax.random.key(0), 2)
  with pytest.raises(ValueError, match="num_edges"):
    data.erdos_renyi_digraph(jnp.zeros(6), 3, 7)
  with pytest.raises(ValueError, match="num_series"):
    data.linear(jax.random.key(0), 0)
  with pytest.raises(ValueError, match="contains NaN"):
    data.validate_series("train", np.full((1, 5, 2), np.nan))

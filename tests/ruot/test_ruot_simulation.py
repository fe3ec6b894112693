"""DeepRUOT's generated gene data: the JAX simulator against the official CSV."""

import jax
import numpy as np
import pytest

from jaxlib_papers.ruot import data

NUM_SEEDS = 8


def _simulated_statistics(params, num_seeds=NUM_SEEDS):
  """[seeds, 5 times, 5] (count, mean x1, mean x2, var x1, var x2), one program for all."""
  keys = jax.random.split(jax.random.key(100), num_seeds)
  xs, alive, overflow = jax.vmap(lambda k: data.simulate_gene_population(
      k, params, num_cells=400, num_switch=200, steps=(100,) * 4, dt=0.01,
      capacity=3200))(keys)
  assert not bool(np.any(overflow))
  xs, alive = np.asarray(xs), np.asarray(alive)
  return np.array([[_statistics(xs[s, k][alive[s, k]]) for k in range(5)]
                   for s in range(num_seeds)])


def _statistics(x):
  return np.array([len(x), *x.mean(0), *x.var(0)])


def test_simulator_key_function_layout_and_division():
  a = data.simulate_gene_network(jax.random.key(5), num_cells=40)
  b = data.simulate_gene_network(jax.random.key(5), num_cells=40)
  c = data.simulate_gene_network(jax.random.key(6), num_cells=40)
  assert a.times.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
  for xa, xb in zip(a.xs, b.xs):
    assert xa.dtype == np.float32 and xa.shape[1] == 2 and np.all(xa >= 0)
    np.testing.assert_array_equal(xa, xb)
  assert any(xa.shape != xc.shape or np.any(xa != xc) for xa, xc in zip(a.xs, c.xs))
  # Without division the count is constant; with it, it grows.
  still = data.simulate_gene_network(jax.random.key(5), num_cells=40,
                                     params=data.GeneNetwork(division=0.0))
  assert still.counts.tolist() == [40] * 5
  assert a.counts[-1] > a.counts[0]
  with pytest.raises(ValueError, match="max_cells"):
    data.simulate_gene_network(jax.random.key(5), num_cells=40, max_cells=41)
  with pytest.raises(ValueError, match="noise"):
    data.simulate_gene_network(jax.random.key(5), num_cells=40, noise=-1.0)


def test_simulator_statistics_match_the_official_csv(shared_data):
  """Per time: cell count and per-gene mean within 4 sampling standard errors of the
  difference of two draws (sqrt(2) x the spread over 8 simulator seeds). The per-gene
  variances are NOT within sampling error everywhere (model mismatch, up to ~5 standard
  errors: x1 at t=3 is 0.050 vs the CSV's 0.041, x2 at t=1 0.29 vs 0.24, seeds/ruot.md),
  so they are held to 25% of the CSV's value."""
  if shared_data is None or not (shared_data / "ruot/simulation_gene_data.csv").is_file():
    pytest.skip("shared data folder absent")
  official = data.load_csv(shared_data / "ruot/simulation_gene_data.csv")
  csv = np.array([_statistics(x) for x in official.xs])
  sim = _simulated_statistics(data.GeneNetwork())
  mean, spread = sim.mean(0), sim.std(0, ddof=1)
  # t = 0 counts are fixed (400) in both; elsewhere the tolerance is the sampling error.
  z = (csv - mean) / (np.sqrt(2.0) * np.maximum(spread, 1e-6))
  assert np.all(mean[:, 0] > 0) and mean[0, 0] == 400
  assert np.all(np.abs(z[1:, :3]) <= 4.0), z
  assert np.all(np.abs(csv[0, 1:3] - mean[0, 1:3]) <= 4.0 * np.sqrt(2) * spread[0, 1:3])
  rel = np.abs(mean[:, 3:] - csv[:, 3:]) / csv[:, 3:]
  assert np.all(rel <= 0.25), rel

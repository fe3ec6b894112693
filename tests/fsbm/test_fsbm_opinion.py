"""Opinion depolarisation: the mean-field polarising drift and its plumbing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import distributed, precision
from jaxlib_papers.fsbm import gpath, kernel, opinion, tasks, train
from jaxlib_papers.fsbm.configs import default


def test_directions_and_multiplier():
  xis = opinion.news_directions(50, 7, seed=3)
  assert xis.shape == (50, 7)
  np.testing.assert_allclose(np.linalg.norm(xis, axis=-1), 1.0, rtol=1e-6)
  # Slowly varying: neighbouring directions are close, far ones are not.
  assert np.min(np.sum(xis[1:] * xis[:-1], axis=-1)) > 0.9
  m = opinion.time_multiplier(101)
  assert m[0] > 0.99 and m[-1] < 1e-15 and np.all(np.diff(m) <= 0)


def test_mean_field_term_closed_form_and_symmetry():
  rng = np.random.default_rng(0)
  xi = jnp.asarray(opinion.news_directions(1, 5)[0])
  v = jnp.asarray(rng.standard_normal(5), jnp.float32)
  v = jnp.where(v @ xi > 0, v, -v)
  # A population sitting at one point v that agrees with xi: B = v |v|^(-3/4).
  y = jnp.tile(v, (6, 1))
  np.testing.assert_allclose(opinion.mean_field_term(y, xi),
                             v * jnp.linalg.norm(v) ** -0.75, rtol=1e-5)
  # Mirroring the whole population leaves B unchanged (sign(<-y, xi>) (-y) = sign(<y, xi>) y).
  y = jnp.asarray(rng.standard_normal((40, 5)), jnp.float32)
  np.testing.assert_allclose(opinion.mean_field_term(y, xi), opinion.mean_field_term(-y, xi),
                             rtol=1e-5, atol=1e-7)


def test_drift_values_and_broadcasting():
  drift = opinion.PolarizeDrift.create(4, num_times=11, strength=2.0)
  field = jnp.asarray(np.random.default_rng(1).standard_normal((11, 4)), jnp.float32)
  xi = drift.directions[3]
  x = jnp.stack([xi, -xi])                                   # agrees / disagrees at t = 0.3
  f = drift.drift(jnp.asarray(0.3), x, field)
  expected = 2.0 * drift.multiplier[3] * field[3]
  np.testing.assert_allclose(f[0], expected, rtol=1e-6)
  np.testing.assert_allclose(f[1], -expected, rtol=1e-6)
  # The CondSOC call shape: t [1, S], x [N, S, D] -> one table row per time.
  t = jnp.linspace(0.0, 1.0, 11)[None, :]
  xs = jnp.asarray(np.random.default_rng(2).standard_normal((3, 11, 4)), jnp.float32)
  fs = drift.drift(t, xs, field)
  assert fs.shape == (3, 11, 4)
  for n in range(3):
    for s in (0, 5, 10):
      np.testing.assert_allclose(fs[n, s], drift.drift(t[0, s], xs[n, s][None], field)[0],
                                 rtol=1e-6)


def test_population_field_matches_direct_loop_and_is_sharding_invariant():
  assert jax.device_count() == 8
  drift = opinion.PolarizeDrift.create(3, num_times=9)
  rng = np.random.default_rng(3)
  x0 = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32)
  x1 = jnp.asarray(rng.standard_normal((16, 3)), jnp.float32) + 2.0
  params = jax.vmap(lambda a, b: gpath.init_params(gpath.linear_mean_path(a, b, 5), 4))(x0, x1)
  key = jax.random.key(7)
  field = jax.jit(lambda p, a, b: kernel.population_field(drift, p, a, b, key, sigma=0.5))
  single = field(params, x0, x1)
  # Direct: the same noise, the samples built by hand, the term per grid time.
  grid = np.linspace(0.0, 1.0, 9)
  for i, s in enumerate(grid):
    noise = jax.random.normal(jax.random.fold_in(key, i), x0.shape)
    mean = (1.0 - s) * x0 + s * x1
    std = 0.5 * np.sqrt(s * (1.0 - s)) * np.log(2.0)       # softplus(0) = log 2
    y = mean + std * noise
    np.testing.assert_allclose(single[i], opinion.mean_field_term(y, drift.directions[i]),
                               rtol=1e-4, atol=1e-6)
  shard = distributed.data_sharding(distributed.make_mesh())
  sharded = field(jax.device_put(params, shard), jax.device_put(x0, shard),
                  jax.device_put(x1, shard))
  np.testing.assert_allclose(single, sharded, rtol=1e-5, atol=1e-6)


def test_reference_dynamics_polarise_and_keypoints_do_not():
  cfg = default.task_config("opinion", "smoke")
  drift = train.reference_drift(cfg)
  p0, _ = tasks.marginals("opinion", 100)
  x0 = jnp.asarray(p0.sample(np.random.default_rng(1), 400))
  path = jax.jit(lambda x: opinion.simulate_reference(drift, x, jax.random.key(0),
                                                      sigma=cfg.sigma, num_steps=100))(x0)
  start = opinion.polarisation_index(np.asarray(path[0]))
  mid = opinion.polarisation_index(np.asarray(path[70]))
  assert mid > 2.0 * start, (start, mid)
  kp = opinion.generate_keypoints(200, 50, 100, seed=0)
  assert kp.shape == (200, 50, 100) and np.all(np.isfinite(kp))
  kp_mid = opinion.polarisation_index(kp[:, 35])
  assert kp_mid < 0.6 * mid, (kp_mid, mid)


def test_polarisation_index_extremes():
  rng = np.random.default_rng(0)
  v = rng.standard_normal(50)
  camps = np.concatenate([np.tile(v, (10, 1)), np.tile(-v, (10, 1))])
  assert opinion.polarisation_index(camps) == pytest.approx(1.0, abs=1e-6)
  iso = rng.standard_normal((300, 100))
  assert opinion.polarisation_index(iso) < 0.1
  assert abs(opinion.polarisation_index(iso, num_pairs=5000) -
             opinion.polarisation_index(iso)) < 0.01
  with pytest.raises(ValueError, match="x must be"):
    opinion.polarisation_index(np.zeros(5))


def test_zero_strength_mean_field_drift_equals_no_drift():
  """The mean-field plumbing (table in the state, refreshed per R-step) changes
  nothing when the drift is zero: same losses, same networks.

  In float64: two float32 programs that differ by an exact zero drift may fuse their
  reductions differently and round apart by ~1e-6 (amplified by Adam's per-element
  normalisation and the next round's simulation), which says nothing about the plumbing. In
  float64 the two runs agree to round-off, far below what a drift of strength 1 changes."""
  cfg = default.task_config("opinion", "smoke", dim=4, batch_size=16, num_keypoints=12,
                            num_feedback=10, **{"csoc.num_iters": 5, "match.steps": 5,
                                                "num_sim_steps": 10, "opinion.strength": 0.0,
                                                "opinion.field_times": 10})
  as64 = lambda tree: jax.tree.map(
      lambda a: jnp.asarray(a, jnp.float64) if jnp.issubdtype(a.dtype, jnp.floating) else a,
      tree)
  with precision.enable_x64():
    built = train.build(cfg)
    kern_mf, data = built.kernel, built.data
    kern_none = kernel.make_kernel(train.settings_from_config(cfg), built.feedback,
                                   kernel.TaskTerms(tau=cfg.tau))
    outs = []
    for kern in (kern_mf, kern_none):
      state = as64(kern.init(jax.random.key(0)))
      step = jax.jit(kern.train_step)
      for i in range(2):
        state, metrics = step(state, as64(data(i)))
      outs.append((state, metrics))
    init = as64(kern_none.init(jax.random.key(0)).params)
  (s_mf, m_mf), (s_none, m_none) = outs
  assert s_mf.field.shape == (10, 4) and float(jnp.abs(s_mf.field).sum()) > 0
  assert s_none.field is None  # no table: nothing of zero size to checkpoint
  assert all(a.dtype == jnp.float64 for a in jax.tree.leaves(s_mf.params))
  for k in m_none:
    np.testing.assert_allclose(m_mf[k], m_none[k], rtol=1e-12)
  # Same networks: each parameter array moved the same way, relative to its training update
  # (a drift of strength 1 instead of 0 gives 0.05-0.3).
  for a, b, a0 in zip(*(jax.tree.leaves(p) for p in (s_mf.params, s_none.params, init))):
    a, b, a0 = (np.asarray(x, np.float64) for x in (a, b, a0))
    assert np.linalg.norm(a - b) <= 1e-9 * np.linalg.norm(a - a0), (
        a.shape, np.linalg.norm(a - b), np.linalg.norm(a - a0))

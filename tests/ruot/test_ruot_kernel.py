"""DeepRUOT kernels: closed forms, exact small problems, jit == eager."""

import jax
import jax.numpy as jnp
import numpy as np
import ot as pot
import pytest
import scipy.linalg

from jaxlib_papers.core import distributed
from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.ruot import kernel as K
from jaxlib_papers.ruot import losses as L
from jaxlib_papers.ruot.models import make_networks


def test_weighted_flow_matches_linear_ode_with_growth():
  """dx/dt = A x, d ln w/dt = c.x + b has a closed form; Euler is order 1, Heun order 2."""
  with enable_x64():
    a_mat = jnp.array([[-0.5, 1.0], [-1.0, -0.2]])
    c_vec = jnp.array([0.3, -0.7])
    b = 0.4
    rng = np.random.default_rng(0)
    x0 = jnp.asarray(rng.normal(size=(5, 2)))
    log_w0 = jnp.full((5,), -np.log(5.0))
    t_end = 1.5
    velocity = lambda t, x: x @ a_mat.T
    growth = lambda t, x: x @ c_vec + b
    expm = scipy.linalg.expm(np.asarray(a_mat) * t_end)
    x_true = np.asarray(x0) @ expm.T
    integral = np.linalg.solve(np.asarray(a_mat), expm - np.eye(2))  # int_0^T e^{As} ds
    log_w_true = np.asarray(log_w0) + b * t_end + np.asarray(x0) @ integral.T @ np.asarray(c_vec)

    errors = {}
    for method in ("euler", "heun"):
      for steps in (200, 400):
        ts = jnp.linspace(0.0, t_end, steps + 1)
        x, log_w = L.weighted_flow(velocity, growth, x0, log_w0, ts, method=method)
        assert x.dtype == jnp.float64
        errors[method, steps] = max(np.abs(np.asarray(x) - x_true).max(),
                                    np.abs(np.asarray(log_w) - log_w_true).max())
    assert errors["heun", 400] < 1e-5
    assert errors["euler", 400] < 1e-2
    assert 1.8 < errors["euler", 200] / errors["euler", 400] < 2.2    # order 1
    assert 3.6 < errors["heun", 200] / errors["heun", 400] < 4.4      # order 2


def test_mass_loss_zero_when_weights_match_counts():
  rng = np.random.default_rng(1)
  x = jnp.asarray(rng.normal(size=(6, 2)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(9, 2)), jnp.float32)
  counts = np.asarray(L.nearest_counts(x, y))
  d2 = ((np.asarray(y)[:, None] - np.asarray(x)[None]) ** 2).sum(-1)
  np.testing.assert_array_equal(counts, np.bincount(d2.argmin(1), minlength=6))
  num_initial = 6
  log_w = jnp.log(jnp.asarray(counts / num_initial, jnp.float32))  # log 0 = -inf -> w = 0
  assert float(L.mass_loss(x, log_w, y, num_initial)) < 1e-12  # float32 exp(log(.)) rounding
  assert float(L.mass_loss(x, log_w + 0.1, y, num_initial)) > 1e-3
  # Padded targets do not count.
  y_pad = jnp.concatenate([y, jnp.zeros((3, 2))])
  mask = jnp.concatenate([jnp.ones(9), jnp.zeros(3)])
  assert float(L.mass_loss(x, log_w, y_pad, num_initial, target_mask=mask)) < 1e-12


def test_ot_loss_matches_exact_small_problem():
  rng = np.random.default_rng(2)
  x = rng.normal(size=(5, 2)).astype(np.float32)
  y = (rng.normal(size=(4, 2)) + 0.5).astype(np.float32)
  log_w = np.log(rng.uniform(0.5, 2.0, size=5)).astype(np.float32)
  a = np.exp(log_w) / np.exp(log_w).sum()
  cost = pot.dist(x.astype(np.float64), y.astype(np.float64))  # squared Euclidean
  exact = pot.emd2(a.astype(np.float64), np.full(4, 0.25), cost)
  ours_exact = L.ot_loss(jnp.asarray(x), jnp.asarray(log_w), jnp.asarray(y), method="exact")
  np.testing.assert_allclose(float(ours_exact), exact, rtol=1e-5)
  ours_sinkhorn = L.ot_loss(jnp.asarray(x), jnp.asarray(log_w), jnp.asarray(y),
                            method="sinkhorn", epsilon=2e-3, threshold=1e-5,
                            max_iterations=5000)
  np.testing.assert_allclose(float(ours_sinkhorn), exact, rtol=2e-2)
  # The plan is a constant: the gradient is 2 sum_j pi_ij (x_i - y_j), none for log_w.
  plan = pot.emd(a.astype(np.float64), np.full(4, 0.25), cost)
  gx, gw = jax.grad(lambda xx, ww: L.ot_loss(xx, ww, jnp.asarray(y), method="exact"),
                    argnums=(0, 1))(jnp.asarray(x), jnp.asarray(log_w))
  expected = 2 * (plan.sum(1)[:, None] * x - plan @ y)
  np.testing.assert_allclose(np.asarray(gx), expected, atol=1e-5)
  assert np.all(np.asarray(gw) == 0)
  with pytest.raises(ValueError, match="ot method"):
    L.ot_plan(jnp.asarray(x), jnp.asarray(a), jnp.asarray(y), method="emd")


def test_exact_plans_under_vmap_are_each_problems_own_plan():
  """Seeds x intervals vmapped: one host callback solves the batch on threads, and every
  plan is the one the problem gets alone, bit for bit (a diverged one alone is NaN)."""
  rng = np.random.default_rng(3)
  x = rng.normal(size=(2, 3, 7, 2)).astype(np.float32)
  y = (rng.normal(size=(3, 5, 2)) + 0.5).astype(np.float32)  # shared by the outer axis
  a = rng.uniform(0.5, 2.0, size=(2, 3, 7)).astype(np.float32)
  a /= a.sum(-1, keepdims=True)
  x[1, 2, 0, 0] = np.nan
  plan = lambda xx, aa, yy: L.ot_plan(xx, aa, yy, method="exact")
  batched = jax.jit(jax.vmap(jax.vmap(plan), in_axes=(0, 0, None)))(x, a, y)
  assert batched.shape == (2, 3, 7, 5)
  for i in range(2):
    for j in range(3):
      alone = np.asarray(plan(jnp.asarray(x[i, j]), jnp.asarray(a[i, j]), jnp.asarray(y[j])))
      if (i, j) == (1, 2):
        assert np.all(np.isnan(batched[i, j])) and np.all(np.isnan(alone))
      else:
        np.testing.assert_array_equal(np.asarray(batched[i, j]), alone)
        np.testing.assert_allclose(alone.sum(1), a[i, j], rtol=1e-5)


def test_pinn_residual_zero_for_gaussian_with_linear_drift_and_constant_growth():
  """rho(t, x) = e^{c t} N(x; 0, s0^2 e^{2 a t} I) solves d_t rho + div(a x rho) = c rho."""
  with enable_x64():
    a, c, s0, sigma, dim = -0.3, 0.7, 0.8, 0.5, 2

    def log_rho(t, x):
      var = s0**2 * jnp.exp(2 * a * t)
      return c * t - 0.5 * jnp.sum(x**2, -1) / var - 0.5 * dim * jnp.log(2 * jnp.pi * var)

    potential = lambda t, x: 0.5 * sigma**2 * log_rho(t, x)
    velocity = lambda t, x: a * x
    growth = lambda t, x: jnp.full(x.shape[:1], c)
    x = jnp.asarray(np.random.default_rng(3).normal(size=(7, dim)))
    residual = L.pinn_residual(velocity, growth, potential, 0.6, x, sigma=sigma)
    rho = jnp.exp(log_rho(0.6, x))
    assert np.abs(np.asarray(residual)).max() < 1e-10 * max(1.0, float(rho.max()))
    relative = L.pinn_residual(velocity, growth, potential, 0.6, x, sigma=sigma, relative=True)
    assert np.abs(np.asarray(relative)).max() < 1e-10
    wrong = L.pinn_residual(velocity, lambda t, z: jnp.full(z.shape[:1], c + 0.5), potential,
                            0.6, x, sigma=sigma, relative=True)
    np.testing.assert_allclose(np.asarray(wrong), -0.5, atol=1e-10)


def test_initial_density_log_form_matches_paper_near_optimum_and_stays_finite_off_it():
  """Log form p^2 u^2 vs the paper's p^2 (e^u - 1)^2, u = 2 s / sigma^2 - log p."""
  sigma = 0.25
  rng = np.random.default_rng(5)
  x = jnp.asarray(rng.normal(size=(9, 2)), jnp.float32)
  target = L.kde_density(x, x, 0.4, 2.0)
  optimum = 0.5 * sigma**2 * jnp.log(target)          # s with exp(2 s / sigma^2) = p
  # Near the optimum (|u| <~ 0.1) the two forms agree to O(u) relative.
  near = lambda t, z: optimum + 1e-3 * jnp.sum(z, -1)
  log = L.initial_density_loss(near, 0.0, x, target, sigma=sigma, form="log")
  paper = L.initial_density_loss(near, 0.0, x, target, sigma=sigma, form="paper")
  assert float(log) > 1e-6
  np.testing.assert_allclose(float(log), float(paper), rtol=0.1)
  at_opt = L.initial_density_loss(lambda t, z: optimum, 0.0, x, target, sigma=sigma)
  assert float(at_opt) < 1e-10   # float32 rounding of log p only
  # s three above the optimum: u ~ 96, exp(u) overflows float32. The paper's form (what
  # stage 4 used before) is inf with a non-finite gradient; the log form stays finite.
  shift = lambda c: (lambda t, z: optimum + c)
  paper_value, paper_grad = jax.value_and_grad(lambda c: L.initial_density_loss(
      shift(c), 0.0, x, target, sigma=sigma, form="paper"))(jnp.float32(3.0))
  assert not (np.isfinite(float(paper_value)) and np.isfinite(float(paper_grad)))
  log_value, log_grad = jax.value_and_grad(lambda c: L.initial_density_loss(
      shift(c), 0.0, x, target, sigma=sigma))(jnp.float32(3.0))
  expected = float(jnp.mean(target**2)) * (2 * 3.0 / sigma**2) ** 2
  np.testing.assert_allclose(float(log_value), expected, rtol=1e-4)
  np.testing.assert_allclose(float(log_grad), 2 * expected / 3.0, rtol=1e-4)
  with pytest.raises(ValueError, match="form must be one of"):
    L.initial_density_loss(shift(0.0), 0.0, x, target, sigma=sigma, form="exp")


def test_score_matching_minimiser_is_bridge_score():
  """For x0 = x1 = 0 the bridge is N(0, sigma_t^2 I); its potential s = -sigma^2 |x|^2 /
  (4 sigma_t^2) zeroes the loss exactly for every draw."""
  with enable_x64():
    sigma, n = 0.5, 64
    key_tau, key_eps = jax.random.split(jax.random.key(0))
    tau = jax.random.uniform(key_tau, (n,), jnp.float64, 0.05, 0.95)
    eps = jax.random.normal(key_eps, (n, 2), jnp.float64)
    t0, t1 = 1.0, 3.0

    def potential(t, x):
      tau_of_t = (t - t0) / (t1 - t0)
      var = sigma**2 * (t1 - t0) * tau_of_t * (1 - tau_of_t)
      return -sigma**2 * jnp.sum(x**2, -1) / (4 * var)

    zeros = jnp.zeros((n, 2))
    loss = L.score_matching_loss(potential, zeros, zeros, t0, t1, tau, eps, sigma=sigma)
    assert float(loss) < 1e-20
    off = L.score_matching_loss(lambda t, x: 1.1 * potential(t, x), zeros, zeros, t0, t1, tau,
                                eps, sigma=sigma)
    assert float(off) > 1e-3


def _stage_of_seeds(stage: str, seeds: int, key: int = 2, data_seed: int = 5):
  """A small flow (stage 1's settings, exact host plans: a small compile) or score stage
  of ``seeds`` seeds on generated data."""
  nets = make_networks(2, width=8, depth=2)
  params = jax.vmap(nets.init)(jax.random.split(jax.random.key(key), seeds))
  rng = np.random.default_rng(data_seed)
  if stage == "flow":
    xs = [(rng.normal(size=(n, 2)) + shift).astype(np.float32)
          for n, shift in ((12, 0.0), (15, 0.3), (11, 0.6))]
    return K.make_flow_stage(nets, [0.0, 1.0, 3.0], xs, params, K.FlowStageSettings(
        trainable=("v", "g"), weights=K.FlowLossWeights(ot=0.1, mass=1.0), lr=1e-2,
        total_passes=2, passes_per_step=2, dt=0.25, ot_kwargs=dict(method="exact")))
  paired = tuple(rng.normal(size=(seeds, 2, 10, 2)).astype(np.float32) for _ in range(2))
  return K.make_score_stage(nets, [0.0, 1.0, 3.0], paired, params, K.ScoreStageSettings(
      lr=1e-2, total_steps=3, steps_per_call=3, sigma=0.25))


@pytest.fixture(scope="module")
def tiny_stage():
  return _stage_of_seeds("flow", 2, key=0, data_seed=4)


def test_flow_stage_jit_equals_eager_and_stops_at_total_passes(tiny_stage):
  state = tiny_stage.init(jax.random.key(1))
  eager_state, eager_metrics = tiny_stage.train_step(state, None)
  jit_step = jax.jit(tiny_stage.train_step)
  jit_state, jit_metrics = jit_step(state, None)
  for a, b in zip(jax.tree.leaves(eager_state.params), jax.tree.leaves(jit_state.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(float(eager_metrics["loss"]), float(jit_metrics["loss"]),
                             rtol=1e-5)
  assert float(jit_metrics["loss_max"]) >= float(jit_metrics["loss"])
  # The two seeds are different networks, so they learn differently.
  v_leaf = jax.tree.leaves(jit_state.params["v"])[0]
  assert not np.allclose(v_leaf[0], v_leaf[1])
  # passes_per_step = 2: a call is two passes (optimiser steps) of every seed; with
  # total_passes = 2 any later call leaves the state alone.
  np.testing.assert_array_equal(np.asarray(jit_state.step), [2, 2])
  assert np.all(np.isfinite(np.asarray(jit_state.best.value)))  # keep-best has a value
  final, _ = jit_step(jit_state, None)
  np.testing.assert_array_equal(np.asarray(final.step), [2, 2])
  for a, b in zip(jax.tree.leaves(jit_state), jax.tree.leaves(final)):
    if jnp.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, b = jax.random.key_data(a), jax.random.key_data(b)
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  # g is trained, s is frozen in stage 1.
  for a, b in zip(jax.tree.leaves(state.params["s"]), jax.tree.leaves(final.params["s"])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert not np.allclose(jax.tree.leaves(state.params["g"])[0],
                         jax.tree.leaves(final.params["g"])[0])


@pytest.mark.parametrize("stage", ["flow", "score"])
def test_seeds_split_over_devices_equal_one_device(stage):
  """One seed per device under the mesh of every device (``vmap_members(split=True)``: a
  ``shard_map``, each device's exact plans solved by its own host callback): every seed's
  params and the metrics are the one-device program's, and each device holds one seed's
  weights ([1, 8, 8] in XLA's program)."""
  mesh = distributed.make_mesh()
  if mesh.size < 2:
    pytest.skip("needs several devices (the test suite fakes 8 CPU devices)")
  kern = _stage_of_seeds(stage, mesh.size)
  state = jax.jit(kern.init)(jax.random.key(3))
  rep = distributed.replicated(mesh)
  split = jax.jit(distributed.traced_on(mesh, kern.train_step), in_shardings=(rep, None),
                  out_shardings=rep).lower(state, None).compile()
  assert "f32[1,8,8]" in split.as_text()
  (got, got_m), (want, want_m) = split(state, None), jax.jit(kern.train_step)(state, None)
  np.testing.assert_array_equal(np.asarray(got.step), np.asarray(want.step))
  for a, b in zip(jax.tree.leaves(got.params), jax.tree.leaves(want.params), strict=True):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
  for name in want_m:
    np.testing.assert_allclose(float(got_m[name]), float(want_m[name]), rtol=1e-5)
  trained = "v" if stage == "flow" else "s"      # the stage trains something
  assert any(not np.allclose(np.asarray(a), np.asarray(b)) for a, b in zip(
      jax.tree.leaves(got.params[trained]), jax.tree.leaves(state.params[trained])))

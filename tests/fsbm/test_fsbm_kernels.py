"""FSBM kernel tests: closed forms, finite differences, jit == eager, sharding."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import distributed, precision, timing
from jaxlib_papers.fsbm import feedback, gpath, kernel, models, tasks

SOFTPLUS_INV_ONE = math.log(math.e - 1.0)  # softplus(s) = 1: Brownian-bridge std


def _bridge_params(x0, x1, num_mean=7, num_gamma=5):
  mean_path = gpath.linear_mean_path(x0, x1, num_mean)
  p = gpath.init_params(mean_path, num_gamma)
  return p._replace(gamma_knots=jnp.full_like(p.gamma_knots, SOFTPLUS_INV_ONE))


def test_vector_field_embeds_a_shared_time_once():
  # The simulator's one t per step ([1]) is the field of that t at every point, and the
  # compiled step runs the time MLP for one point, not 128.
  net = models.VectorField(dim=2, hidden=32, time_embed_dim=16)
  x = jax.random.normal(jax.random.key(1), (128, 2))
  params = net.init(jax.random.key(0), x, jnp.zeros(128))
  per_point = net.apply(params, x, jnp.full(128, 0.7))
  for shared in (0.7, jnp.full((1,), 0.7)):
    np.testing.assert_allclose(net.apply(params, x, shared), per_point, rtol=1e-5, atol=1e-6)
  flops = lambda t: timing.program_cost(lambda t: net.apply(params, x, t), t).flops
  assert flops(jnp.full(128, 0.7)) - flops(jnp.full((1,), 0.7)) >= 127 * 2 * (16 + 32) * 32
  with pytest.raises(ValueError, match="t: expected a shape"):
    net.apply(params, x, jnp.zeros(3))


def test_brownian_bridge_drift_closed_form():
  """Straight mean + Brownian-bridge std: u_fwd = (x1-x)/(1-t), u_bwd = (x0-x)/t."""
  sigma = 1.3
  x0, x1 = jnp.array([-1.0, 2.0]), jnp.array([3.0, -0.5])
  params = _bridge_params(x0, x1)
  t = jnp.linspace(0.05, 0.95, 19)
  noise = jax.random.normal(jax.random.key(0), (3, 19, 2))
  sample = jax.jit(gpath.sample_and_drift, static_argnums=3)
  x, u_fwd = sample(params, x0, x1, sigma, t, noise, 1.0)
  _, u_bwd = sample(params, x0, x1, sigma, t, noise, -1.0)
  tt = t[None, :, None]
  np.testing.assert_allclose(u_fwd, (x1 - x) / (1 - tt), rtol=2e-4, atol=2e-4)
  np.testing.assert_allclose(u_bwd, (x0 - x) / tt, rtol=2e-4, atol=2e-4)
  # Brownian-bridge marginal std sigma sqrt(t (1 - t)).
  _, _, std, _ = jax.jit(gpath.mean_and_std, static_argnums=3)(params, x0, x1, sigma, t)
  np.testing.assert_allclose(std, sigma * np.sqrt(t * (1 - t)), rtol=1e-5)


def test_gaussian_path_marginals_and_time_derivatives():
  key = jax.random.key(1)
  x0, x1 = jnp.array([0.0, 1.0]), jnp.array([2.0, -1.0])
  k1, k2, k3 = jax.random.split(key, 3)
  params = gpath.PathParams(
      mean_knots=jax.random.normal(k1, (4, 2)) * 2.0,
      gamma_knots=jax.random.normal(k2, (7,)))
  t = jnp.array([0.13, 0.52, 0.77])  # off the knots (the slope jumps there)
  noise = jax.random.normal(k3, (40000, 3, 2))
  x, _ = jax.jit(gpath.sample_and_drift, static_argnums=3)(params, x0, x1, 0.8, t, noise)
  mean_and_std = jax.jit(gpath.mean_and_std, static_argnums=3)
  mean, dmean, std, dstd = mean_and_std(params, x0, x1, 0.8, t)
  np.testing.assert_allclose(x.mean(0), mean, atol=4 * float(std.max()) / 200)
  np.testing.assert_allclose(x.var(0), np.broadcast_to(std[:, None] ** 2, (3, 2)),
                             rtol=0.03)
  h = 1e-3
  m_p, _, s_p, _ = mean_and_std(params, x0, x1, 0.8, t + h)
  m_m, _, s_m, _ = mean_and_std(params, x0, x1, 0.8, t - h)
  np.testing.assert_allclose(dmean, (m_p - m_m) / (2 * h), rtol=1e-3, atol=1e-3)
  np.testing.assert_allclose(dstd, (s_p - s_m) / (2 * h), rtol=2e-3, atol=2e-3)
  # Endpoints are pinned.
  m_end, _, _, _ = mean_and_std(params, x0, x1, 0.8, jnp.array([0.0, 1.0]))
  np.testing.assert_allclose(m_end, jnp.stack([x0, x1]), atol=1e-6)


@pytest.mark.parametrize("ref", [0, 11])
def test_feedback_gradient_finite_differences_float64(ref):
  with precision.enable_x64():
    rng = np.random.default_rng(ref)
    kp = jnp.asarray(rng.normal(size=(6, 12, 2)).cumsum(1))
    inv_std = feedback.keypoint_inv_std(kp)
    x = kp[2] + jnp.asarray(rng.normal(size=(12, 2))) * 0.3
    assert x.dtype == jnp.float64
    g, grad, hess_ones = feedback.feedback_terms(x, kp, inv_std, ref)
    g_ad, grad_ad, hess_ad = feedback.feedback_terms_autodiff(x, kp, inv_std, ref)
    np.testing.assert_allclose(g, g_ad, rtol=1e-12)
    np.testing.assert_allclose(grad, grad_ad, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(hess_ones, hess_ad, rtol=1e-10, atol=1e-10)
    target = kp[feedback.nearest_keypoint(x[ref], kp[:, ref])]

    cost = jax.jit(lambda z: feedback.feedback_cost(z, target, inv_std, ref))

    h = 1e-6
    eye = np.eye(x.size).reshape(x.size, *x.shape)
    fd = np.array([(cost(x + h * e) - cost(x - h * e)) / (2 * h) for e in eye])
    np.testing.assert_allclose(grad.reshape(-1), fd, rtol=1e-6, atol=1e-6)
    # H 1 = directional derivative of grad G along ones.
    ones = jnp.ones_like(x)
    terms = jax.jit(feedback.feedback_terms)
    grad_p = terms(x + h * ones, kp, inv_std, ref)[1]
    grad_m = terms(x - h * ones, kp, inv_std, ref)[1]
    np.testing.assert_allclose(hess_ones, (grad_p - grad_m) / (2 * h), rtol=1e-5,
                               atol=1e-5)


def _guide(kw):
  return kernel.Guidance(kw.pop("keypoints"), kw.pop("inv_std"),
                         state_cost=kw.pop("state_cost", None),
                         interaction_cost=kw.pop("interaction_cost", None),
                         entropy_scale=kw.pop("entropy_scale", 0.0))


def _pair_loss(params, x0, x1, noise, **kw):
  """``kernel.condsoc_pair_loss`` from keyword arguments (settings grouped here)."""
  terms = kernel.LossTerms(with_feedback=kw.pop("with_feedback", True))
  problem = kernel.CondSOCProblem(kw.pop("sigma"), kw.pop("t"), _guide(kw))
  return kernel.condsoc_pair_loss(params, x0, x1, noise, problem,
                                  kernel.PairWeights(**kw), terms)


def _csolve(x0, x1, mean_path, key, *, settings, **kw):
  """``kernel.condsoc_solve`` from keyword arguments (settings grouped here)."""
  guide = _guide(kw)
  return kernel.condsoc_solve(x0, x1, mean_path, key, settings=settings, guide=guide,
                              weights=kernel.PairWeights(**kw))


def _small_problem(num_pairs=16, steps=20):
  settings = kernel.CondSOCSettings(
      sigma=1.0, num_mean_knots=5, num_gamma_knots=6, num_steps=steps,
      num_noise=2, lr_mean=0.05, lr_gamma=0.05, num_iters=6, micro_batch=256)
  kp = tasks.generate_keypoints("vneck", 10, steps, seed=0)
  rng = np.random.default_rng(0)
  p0, p1 = tasks.marginals("vneck")
  x0, x1 = jnp.asarray(p0.sample(rng, num_pairs)), jnp.asarray(p1.sample(rng, num_pairs))
  mean_path = jax.vmap(lambda a, b: gpath.linear_mean_path(a, b, 5))(x0, x1)
  return settings, jnp.asarray(kp), feedback.keypoint_inv_std(kp), x0, x1, mean_path


def _solve(settings, kp, inv_std, x0, x1, mean_path, key, sign, tau):
  return _csolve(x0, x1, mean_path, key, settings=settings, sign=sign,
                              tau=tau, keypoints=kp, inv_std=inv_std)


def test_condsoc_jit_equals_eager_and_decreases():
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  params = gpath.init_params(mp[0], settings.num_gamma_knots)
  t = kernel.time_grid(settings)
  noise = jax.random.normal(jax.random.key(0), (2, settings.num_steps, 2))

  def loss(p, sign):
    return _pair_loss(p, x0[0], x1[0], noise, sigma=1.0, t=t, sign=sign,
                                    tau=10.0, keypoints=kp, inv_std=inv_std)[0]

  # Eager op-by-op dispatch is slow on CPU, so only the forward pass runs eagerly.
  for sign in (1.0, -1.0):
    np.testing.assert_allclose(loss(params, sign), jax.jit(loss)(params, sign), rtol=1e-5)


@pytest.mark.parametrize("costs", ["none", "congestion", "entropy"])
def test_condsoc_sharded_equals_single_device(costs):
  """Also with the interaction cost, whose random pairing crosses the shards, and with the
  entropy cost, whose population (all 16 pairs: B <= mB) crosses them too."""
  assert jax.device_count() == 8, "conftest sets 8 fake devices"
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  key = jax.random.key(4)
  cost = {"none": {},
          "congestion": dict(state_cost=lambda x: tasks.obstacle_cost("vneck", x),
                             interaction_cost=lambda x, y: 5.0 * tasks.congestion(x, y)),
          "entropy": dict(state_cost=lambda x: tasks.obstacle_cost("vneck", x),
                          entropy_scale=0.5)}[costs]
  solve = jax.jit(lambda a, b, m: _csolve(a, b, m, key, settings=settings, sign=1.0,
                                          tau=10.0, keypoints=kp, inv_std=inv_std, **cost))
  p_single, l_single = solve(x0, x1, mp)
  mesh = distributed.make_mesh()
  shard = distributed.data_sharding(mesh)
  x0s, x1s, mps = (jax.device_put(a, shard) for a in (x0, x1, mp))
  p_shard, l_shard = solve(x0s, x1s, mps)
  assert len(p_shard.mean_knots.sharding.device_set) == 8
  np.testing.assert_allclose(l_single, l_shard, rtol=1e-5)
  assert np.all(np.isfinite(l_single)) and float(l_single[-1]) < float(l_single[0])
  for a, b in zip(jax.tree.leaves(p_single), jax.tree.leaves(p_shard)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sharded", [False, True])
def test_pair_chunks_give_every_pair_the_same_solve(sharded):
  """``pair_chunk``: the gradient over strided chunks of pairs, one after another, gives
  every pair the solve it gets with all pairs at once (on one device and with the pairs
  sharded over 8); with a cost that couples the pairs the setting is ignored."""
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  chunked = settings._replace(pair_chunk=4)
  key = jax.random.key(5)
  tau = jnp.linspace(0.0, 20.0, 16)   # per-pair weights follow their pairs into the chunks
  solve = lambda st: jax.jit(lambda a, b, m: _csolve(
      a, b, m, key, settings=st, sign=-1.0, tau=tau, keypoints=kp, inv_std=inv_std))
  p_all, l_all = solve(settings)(x0, x1, mp)
  args = (x0, x1, mp)
  if sharded:
    shard = distributed.data_sharding(distributed.make_mesh())
    args = tuple(jax.device_put(a, shard) for a in args)
  p_chunk, l_chunk = solve(chunked)(*args)
  np.testing.assert_allclose(l_all, l_chunk, rtol=1e-5)
  assert float(l_all[-1]) < float(l_all[0])
  for a, b in zip(jax.tree.leaves(p_all), jax.tree.leaves(p_chunk)):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  # Not chunked: all pairs at once when the pairs are coupled, or B is not a multiple.
  guide = kernel.Guidance(kp, inv_std, interaction_cost=lambda a, b: tasks.congestion(a, b))
  noise_shape = (16, settings.num_noise, settings.num_steps, 2)
  as_solve = lambda st, g, b=16: kernel._Solve(
      st, kernel.CondSOCProblem(1.0, kernel.time_grid(st), g), x0, x1,
      kernel.PairWeights(1.0, tau, tau), None, key, (b,) + noise_shape[1:])
  assert kernel._num_chunks(as_solve(chunked, guide._replace(interaction_cost=None)),
                            kernel.LossTerms()) == 4
  assert kernel._num_chunks(as_solve(chunked, guide), kernel.LossTerms()) == 1
  assert kernel._num_chunks(as_solve(chunked, guide, 18), kernel.LossTerms()) == 1


def test_tau_zero_has_no_feedback_term():
  """tau = 0 gives the pure control objective (the unguided baseline)."""
  settings, kp, inv_std, x0, x1, mp = _small_problem(num_pairs=2)
  params = gpath.init_params(mp[0], settings.num_gamma_knots)
  t = kernel.time_grid(settings)
  noise = jax.random.normal(jax.random.key(0), (2, settings.num_steps, 2))
  loss, aux = _pair_loss(params, x0[0], x1[0], noise, sigma=1.0, t=t,
                                       sign=1.0, tau=0.0, keypoints=kp, inv_std=inv_std)
  np.testing.assert_allclose(loss, aux["control"], rtol=1e-6)
  assert float(aux["feedback"]) > 0


def test_all_pairs_at_tau_zero_skip_the_feedback_terms_with_the_same_result():
  """With every tau = 0 the solve takes the branch without the feedback terms (they are
  multiplied by zero); a pair at tau = 0 ends where it ends when another pair's tau > 0
  sends the solve through the branch that computes them."""
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  solve = jax.jit(lambda tau: _solve(settings, kp, inv_std, x0, x1, mp, jax.random.key(3),
                                     -1.0, tau)[0])
  skipped = solve(jnp.zeros(16))
  computed = solve(jnp.zeros(16).at[15].set(10.0))
  for a, b in zip(jax.tree.leaves(skipped), jax.tree.leaves(computed)):
    np.testing.assert_allclose(a[:15], b[:15], rtol=1e-6, atol=1e-7)
    assert not np.allclose(a[15], b[15])  # tau = 10 moved the last pair
  no_fb = lambda p: _pair_loss(
      p, x0[0], x1[0], jnp.ones((2, settings.num_steps, 2)), sigma=1.0,
      t=kernel.time_grid(settings), sign=1.0, tau=0.0, keypoints=kp, inv_std=inv_std,
      with_feedback=False)
  loss, aux = no_fb(gpath.init_params(mp[0], settings.num_gamma_knots))
  assert float(aux["feedback"]) == 0.0 and float(loss) == float(aux["control"])


def _pinned_optimum(t, num_knots, x0, x1, f):
  """Closed-form mean knots minimising sum_s |mu'(t_s) - f_s|^2 over piecewise-linear
  means with mu(0) = x0, mu(1) = x1: on segment j (n_j grid times, width h) the slope is
  v_j = fbar_j + lam / n_j, lam fixed by sum_j h v_j = x1 - x0."""
  seg = np.clip(np.floor(t * (num_knots - 1)), 0, num_knots - 2).astype(int)
  counts = np.bincount(seg, minlength=num_knots - 1).astype(float)
  fbar = np.stack([f[seg == j].mean(axis=0) for j in range(num_knots - 1)])
  h = 1.0 / (num_knots - 1)
  lam = ((x1 - x0) / h - fbar.sum(axis=0)) / np.sum(1.0 / counts)
  slopes = fbar + lam[None] / counts[:, None]
  return x0[None] + h * np.concatenate([np.zeros((1, x0.size)), np.cumsum(slopes, 0)])


@pytest.mark.parametrize("profile", ["constant", "time-varying"])
def test_a_drift_that_does_not_depend_on_x_moves_the_pinned_mean_only_by_its_profile(
    profile):
  """The pinned-bridge closed form behind seeds/fsbm.md's opinion reading: with a base
  drift f(t) that does not depend on x, and antithetic noise (the cross term of
  |mu' - f + a gamma eps|^2 cancels), the objective's mean part is sum_s |mu' - f|^2 /
  (2 sigma^2), so the exact minimiser (:func:`_pinned_optimum`) has zero gradient in the
  mean knots. Here every spline segment holds as many grid times (asserted), so the
  drift-free optimum is the straight line and a constant f leaves it there; a
  time-varying f bends it, and the straight line is then not optimal."""
  with precision.enable_x64():
    settings = kernel.CondSOCSettings(
        sigma=0.5, num_mean_knots=6, num_gamma_knots=5, num_steps=50, num_noise=4,
        lr_mean=0.03, lr_gamma=0.02, num_iters=1, micro_batch=1)
    t = np.asarray(kernel.time_grid(settings, jnp.float64))
    x0, x1 = np.array([0.4, -1.2]), np.array([2.5, 3.0])
    amp = np.array([6.0, -4.0])
    f_of = {"constant": lambda tt: amp * np.ones_like(tt)[..., None],
            "time-varying": lambda tt: amp * (1.0 / (1.0 + np.exp(12.0 * (tt - 0.6))))[
                ..., None]}[profile]
    base_drift = lambda tt, x: jnp.broadcast_to(jnp.asarray(f_of(np.asarray(tt))), x.shape)
    guide = kernel.Guidance(jnp.zeros((1, 50, 2)), jnp.ones((50, 2)), base_drift=base_drift)
    problem = kernel.CondSOCProblem(settings.sigma, jnp.asarray(t), guide)
    eps = np.random.default_rng(0).normal(size=(2, 50, 2))
    noise = jnp.asarray(np.concatenate([eps, -eps]))
    gamma = jnp.asarray(np.random.default_rng(1).normal(0.0, 0.3, 5))

    def mean_grad(knots):
      params = gpath.PathParams(jnp.asarray(knots[1:-1]), gamma)
      loss = lambda p: kernel.condsoc_pair_loss(
          p, jnp.asarray(x0), jnp.asarray(x1), noise, problem,
          kernel.PairWeights(sign=1.0, tau=0.0, state_weight=0.0),
          kernel.LossTerms(with_feedback=False, with_state=False))[0]
      return np.asarray(jax.grad(loss)(params).mean_knots)

    optimum = _pinned_optimum(t, 6, x0, x1, f_of(t))
    np.testing.assert_allclose(optimum[-1], x1, rtol=1e-12)
    assert np.abs(mean_grad(optimum)).max() < 1e-9
    straight = np.asarray(gpath.linear_mean_path(jnp.asarray(x0), jnp.asarray(x1), 6))
    assert np.all(np.bincount(np.floor(t * 5).astype(int)) == 10)
    drift_free = _pinned_optimum(t, 6, x0, x1, np.zeros((50, 2)))
    np.testing.assert_allclose(drift_free, straight, atol=1e-12)
    bend = np.abs(optimum - drift_free).max()
    if profile == "constant":
      assert bend < 1e-12          # the pinned bridge absorbs a constant drift
    else:
      assert bend > 0.1 and np.abs(mean_grad(straight)).max() > 1e-2


def test_bad_inputs_raise():
  with pytest.raises(ValueError, match="keypoints"):
    feedback.keypoint_inv_std(jnp.zeros((1, 5, 2)))
  with pytest.raises(ValueError, match="csoc.S"):
    feedback.check_keypoints(np.zeros((4, 7, 2)), num_steps=9)
  with pytest.raises(ValueError, match="NaN"):
    feedback.check_keypoints(np.full((4, 7, 2), np.nan))


def test_state_cost_adds_its_mean_and_obstacle_cost_marks_obstacles():
  """The GSBM-style term: L(V) - L(0) = mean_{n,t} V(X_t) on the same noise."""
  settings, kp, inv_std, x0, x1, mp = _small_problem(num_pairs=2)
  params = gpath.init_params(mp[0], settings.num_gamma_knots)
  t = kernel.time_grid(settings)
  noise = jax.random.normal(jax.random.key(0), (2, settings.num_steps, 2))
  cost = lambda x: 3.0 * tasks.obstacle_cost("vneck", x)
  args = dict(sigma=1.0, t=t, sign=1.0, tau=0.0, keypoints=kp, inv_std=inv_std)
  plain, _ = _pair_loss(params, x0[0], x1[0], noise, **args)
  with_v, aux = _pair_loss(params, x0[0], x1[0], noise, state_cost=cost, **args)
  x, _ = gpath.sample_and_drift(params, x0[0], x1[0], 1.0, t, noise, 1.0)
  assert float(jnp.mean(cost(x))) > 0.1
  np.testing.assert_allclose(with_v - plain, jnp.mean(cost(x)), rtol=1e-4)
  np.testing.assert_allclose(aux["state"], jnp.mean(cost(x)), rtol=1e-6)
  for task, inside, outside in (("stunnel", [5.0, 6.0], [0.0, 0.0]),
                                ("vneck", [0.0, 3.0], [5.0, 0.0])):
    v_in, v_out = tasks.obstacle_cost(task, jnp.array([inside, outside]))
    assert bool(tasks.collision(task, np.array(inside))) and v_in > 1.0
    assert not bool(tasks.collision(task, np.array(outside))) and v_out < 1e-3


@pytest.mark.parametrize("tau", [0.0, 10.0])
def test_per_pair_state_weight_equals_separate_solves(tau):
  """The obstacle weight is per-pair data (one program for FSBM, tau = 0 and GSBM-style):
  pairs with weight 0 solve as with no state cost, pairs with weight w as with w V (with
  and without the feedback terms)."""
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  key = jax.random.key(2)
  v = lambda x: tasks.obstacle_cost("vneck", x)
  weight = jnp.where(jnp.arange(16) < 8, 0.0, 3.0)
  solve = lambda **kw: jax.jit(lambda a, b, m: _csolve(
      a, b, m, key, settings=settings, sign=1.0, tau=tau, keypoints=kp, inv_std=inv_std,
      **kw)[0])(x0, x1, mp)
  mixed = solve(state_cost=v, state_weight=weight)
  plain = solve()
  weighted = solve(state_cost=lambda x: 3.0 * v(x))
  for m, p, w in zip(jax.tree.leaves(mixed), jax.tree.leaves(plain), jax.tree.leaves(weighted)):
    np.testing.assert_allclose(m[:8], p[:8], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(m[8:], w[8:], rtol=1e-5, atol=1e-6)
    assert not np.allclose(p[8:], w[8:])  # the obstacle cost moved the weighted pairs


@pytest.mark.parametrize("tau", [0.0, 10.0])
def test_all_pairs_at_state_weight_zero_skip_the_state_cost(tau):
  """With every state weight 0 (FSBM and its tau = 0 baseline on an obstacle task) the
  solve leaves the state cost out instead of multiplying it by zero: a V that is NaN
  everywhere (0 x NaN would make every loss NaN) changes nothing, and the solve equals the
  one without a state cost."""
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  key = jax.random.key(5)
  solve = lambda **kw: jax.jit(lambda a, b, m: _csolve(
      a, b, m, key, settings=settings, sign=1.0, tau=tau, keypoints=kp, inv_std=inv_std,
      **kw))(x0, x1, mp)
  nan_cost = lambda x: jnp.full(x.shape[:-1], jnp.nan, x.dtype)
  p_skip, l_skip = solve(state_cost=nan_cost, state_weight=jnp.zeros(16))
  p_none, l_none = solve()
  assert np.all(np.isfinite(l_skip))
  np.testing.assert_allclose(l_skip, l_none, rtol=1e-6)
  for a, b in zip(jax.tree.leaves(p_skip), jax.tree.leaves(p_none)):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
  # One pair with weight > 0 sends the solve through the branch that evaluates V.
  _, l_on = solve(state_cost=nan_cost, state_weight=jnp.zeros(16).at[0].set(1.0))
  assert np.all(np.isnan(l_on))


def test_congestion_closed_form_and_gsbm_ratio():
  x = jnp.array([[0.0, 0.0], [1.0, 2.0]])
  np.testing.assert_allclose(tasks.congestion(x, x), [2.0, 2.0])
  np.testing.assert_allclose(tasks.congestion(x, x[::-1]), [2.0 / 6.0, 2.0 / 6.0])
  c = tasks.interaction_cost("stunnel")
  np.testing.assert_allclose(1500.0 * c(x, x[::-1]), 50.0 * tasks.congestion(x, x[::-1]))
  assert tasks.interaction_cost("vneck") is None
  assert tasks.interaction_cost("stunnel", enabled=False) is None


def _interaction_solve(num_pairs=4, weight=2.0):
  """A float64 ``kernel._Solve`` of the small problem with V = 0 and C = congestion."""
  settings, kp, inv_std, x0, x1, mp = _small_problem(num_pairs=num_pairs)
  guide = kernel.Guidance(kp, inv_std, state_cost=lambda x: jnp.zeros(x.shape[:-1], x.dtype),
                          interaction_cost=tasks.congestion)
  to64 = lambda a: jnp.asarray(np.asarray(a), jnp.float64)
  shape = (num_pairs, settings.num_noise, settings.num_steps, 2)
  solve = kernel._Solve(
      settings, kernel.CondSOCProblem(1.0, kernel.time_grid(settings, jnp.float64), guide),
      to64(x0), to64(x1),
      kernel.PairWeights(1.0, jnp.zeros(num_pairs), jnp.full(num_pairs, weight)),
      kernel.condsoc_optimizer(settings), jax.random.key(0), shape)
  params = jax.vmap(lambda m: gpath.init_params(m, settings.num_gamma_knots))(to64(mp))
  noise = jax.random.normal(jax.random.key(1), shape, jnp.float64)
  return solve, params, noise


def _assert_directional_derivative(grad, f, params, *, seed, h=1e-5, rtol=1e-6):
  """<grad, d> equals the central finite difference of f along a random direction d."""
  rng = np.random.default_rng(seed)
  direction = jax.tree.map(lambda a: jnp.asarray(rng.normal(size=a.shape)), params)
  shifted = lambda e: jax.tree.map(lambda a, d: a + e * d, params, direction)
  f = jax.jit(f)
  fd = (f(shifted(h)) - f(shifted(-h))) / (2 * h)
  ad = sum(jnp.sum(g * d) for g, d in zip(jax.tree.leaves(grad), jax.tree.leaves(direction)))
  np.testing.assert_allclose(ad, fd, rtol=rtol)


def test_interaction_cost_pairs_the_paths_and_differentiates_through_the_partner():
  """Each path's congestion is taken against its partner under the permutation, with the
  weight; the gradient includes the partner's side (not detached): it matches central
  finite differences of the objective in float64."""
  with precision.enable_x64():
    solve, params, noise = _interaction_solve()
    terms = kernel.LossTerms(with_feedback=False)
    perm = jax.random.permutation(jax.random.key(2), noise.shape[0] * noise.shape[1])
    total, losses = kernel._objective(params, noise, solve, terms, perm)
    plain = kernel._objective(params, noise, solve._replace(
        problem=solve.problem._replace(guide=solve.problem.guide._replace(
            interaction_cost=None))), terms)[1]
    x = _paths(params, solve, noise)
    flat = np.asarray(x).reshape(-1, *x.shape[2:])
    by_hand = np.array([2.0 / (1.0 + np.sum((flat[i] - flat[j]) ** 2, -1))
                        for i, j in enumerate(np.asarray(perm))]).reshape(x.shape[:3])
    np.testing.assert_allclose(losses - plain, 2.0 * by_hand.mean(axis=(1, 2)), rtol=1e-10)
    objective = lambda p: kernel._objective(p, noise, solve, terms, perm)[0]
    _assert_directional_derivative(jax.grad(objective)(params), objective, params, seed=0)
    # Detaching the partner would drop its side: the gradient would differ.
    partner_side = jax.grad(lambda p: jnp.sum(2.0 * tasks.congestion(
        jax.lax.stop_gradient(x.reshape(flat.shape)),
        _paths(p, solve, noise).reshape(flat.shape)[perm])))(params)
    assert float(jnp.max(jnp.abs(partner_side.mean_knots))) > 1e-3


def test_population_log_density_is_the_mixture_density_and_gsbm_ratio():
  rng = np.random.default_rng(5)
  x = rng.normal(size=(3, 4, 2))                  # [N, S, D]
  means = rng.normal(size=(5, 4, 2))              # [P, S, D]
  stds = rng.uniform(0.3, 2.0, size=(5, 4))       # [P, S]
  with precision.enable_x64():
    ours = kernel.population_log_density(jnp.asarray(x), jnp.asarray(means),
                                         jnp.asarray(stds))
  dens = np.exp(-0.5 * np.sum((x[:, None] - means[None]) ** 2, -1) / stds**2) / (
      2 * np.pi * stds**2)                        # [N, P, S], D = 2
  np.testing.assert_allclose(np.asarray(ours), np.log(dens.mean(axis=1)), rtol=1e-12)
  # The solve's fast form (x-gradient only, the mixture a constant) agrees with it.
  with precision.enable_x64():
    args = (jnp.asarray(x), jnp.asarray(means), jnp.asarray(stds))
    fast = kernel._detached_log_density(*args)
    ct = jnp.asarray(rng.normal(size=(3, 4)))
    g_fast = jax.grad(lambda a: jnp.sum(ct * kernel._detached_log_density(a, *args[1:])))(
        args[0])
    g_ref = jax.grad(lambda a: jnp.sum(ct * kernel.population_log_density(a, *args[1:])))(
        args[0])
  np.testing.assert_allclose(np.asarray(fast), np.asarray(ours), rtol=1e-12)
  np.testing.assert_allclose(np.asarray(g_fast), np.asarray(g_ref), rtol=1e-10, atol=1e-13)
  assert tasks.entropy_scale("vneck") * tasks.OBSTACLE_WEIGHT["vneck"] == 8.0
  assert tasks.entropy_scale("stunnel") == 0.0 and tasks.entropy_scale("vneck", False) == 0.0
  assert kernel.entropy_groups(16, 256) == 16 and kernel.entropy_groups(512, 256) == 256
  with pytest.raises(ValueError, match="micro-batch"):
    kernel.entropy_groups(300, 256)


def test_entropy_cost_takes_the_micro_batch_marginals_detached():
  """Each sample's cost is w s log p_t(x) under its own micro-batch's path marginals (two
  groups of 2 pairs here); the marginals are detached (as GSBM's), so the gradient is
  the finite difference of the objective with the population frozen, and a pair of the
  other micro-batch does not move a pair's loss."""
  with precision.enable_x64():
    solve, params, noise = _interaction_solve(num_pairs=4, weight=3.0)
    scale = 0.7
    guide = solve.problem.guide._replace(interaction_cost=None, entropy_scale=scale)
    solve = solve._replace(problem=solve.problem._replace(guide=guide),
                           settings=solve.settings._replace(micro_batch=2))
    terms = kernel.LossTerms(with_feedback=False)
    plain_solve = solve._replace(problem=solve.problem._replace(
        guide=guide._replace(entropy_scale=0.0)))
    t = solve.problem.t

    def marginals(p):
      means, _, stds, _ = jax.vmap(lambda pp, a, b: gpath.mean_and_std(
          pp, a, b, 1.0, t))(p, solve.x0, solve.x1)
      return means, stds

    def frozen(p, population):
      means, stds = population
      x = _paths(p, solve, noise)
      dens = jnp.concatenate([kernel.population_log_density(
          x[g:g + 2], means[g:g + 2], stds[g:g + 2]) for g in (0, 2)])
      plain = kernel._objective(p, noise, plain_solve, terms)[1]
      losses = plain + 3.0 * scale * dens.mean(axis=(1, 2))
      return jnp.sum(losses) / 2, losses

    total, losses = kernel._objective(params, noise, solve, terms)
    np.testing.assert_allclose(losses, frozen(params, marginals(params))[1], rtol=1e-12)
    grad = jax.grad(lambda p: kernel._objective(p, noise, solve, terms)[0])(params)
    _assert_directional_derivative(grad, lambda p: frozen(p, marginals(params))[0], params,
                                   seed=1)
    # Not detached, the population's own side would add to the gradient:
    live = jax.grad(lambda p: frozen(p, marginals(p))[0])(params)
    assert float(jnp.max(jnp.abs(live.mean_knots - grad.mean_knots))) > 1e-4
    moved = params._replace(mean_knots=params.mean_knots.at[3].add(1.0))
    moved_losses = kernel._objective(moved, noise, solve, terms)[1]
    np.testing.assert_allclose(moved_losses[:2], losses[:2], rtol=1e-13)
    assert not np.allclose(moved_losses[2], losses[2])


def _paths(params, solve, noise):
  return jax.vmap(lambda p, a, b, n: gpath.sample_and_drift(
      p, a, b, 1.0, solve.problem.t, n, 1.0)[0])(params, solve.x0, solve.x1, noise)


@pytest.mark.parametrize("tau", [0.0, 10.0])
def test_condsoc_keeps_std_end_knots_fixed(tau):
  """As in the official code, only the interior std knots are trained: the knots at t = 0
  and t = 1 end the solve at their initial 0 while their gradient is not 0 and the interior
  knots move."""
  settings, kp, inv_std, x0, x1, mp = _small_problem()
  params, _ = jax.jit(_solve, static_argnums=0)(settings, kp, inv_std, x0, x1, mp,
                                                 jax.random.key(3), 1.0, tau)
  gamma = np.asarray(params.gamma_knots)
  np.testing.assert_array_equal(gamma[:, [0, -1]], 0.0)
  assert np.min(np.abs(gamma[:, 1:-1]).max(axis=1)) > 1e-4
  t = kernel.time_grid(settings)
  noise = jax.random.normal(jax.random.key(0), (2, settings.num_steps, 2))
  init = gpath.init_params(mp[0], settings.num_gamma_knots)
  grad = jax.grad(lambda p: _pair_loss(
      p, x0[0], x1[0], noise, sigma=1.0, t=t, sign=1.0, tau=tau, keypoints=kp,
      inv_std=inv_std)[0])(init)
  assert np.all(np.abs(np.asarray(grad.gamma_knots)[[0, -1]]) > 0)

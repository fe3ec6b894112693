"""sde, metrics, ot, nn, config: closed forms, convergence orders and bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core import config as config_lib
from jaxlib_papers.core import metrics, nn, ot, precision, sde, timing

# ---------------------------------------------------------------- integrators

def _order(errors, steps):
  return -np.polyfit(np.log(steps), np.log(errors), 1)[0]


@pytest.mark.parametrize("method, expected", [("euler", 1.0), ("heun", 2.0)])
def test_ode_order_of_convergence(method, expected):
  # dy/dt = -2 t y  ->  y(t) = y0 exp(-t^2), on a pytree state (y, 2y).
  with precision.enable_x64():
    field = lambda t, y, _: jax.tree.map(lambda v: -2.0 * t * v, y)
    errors, steps = [], [10, 20, 40, 80]
    for n in steps:
      ts = jnp.linspace(0.0, 1.5, n + 1)
      y = sde.ode_solve(field, (jnp.array(1.0), jnp.array(2.0)), ts, method=method,
                        save_path=False)
      errors.append(abs(float(y[0]) - np.exp(-1.5**2)))
      np.testing.assert_allclose(float(y[1]), 2 * float(y[0]), rtol=1e-12)
  assert abs(_order(errors, steps) - expected) < 0.15


def test_ode_backward_in_time_inverts_forward():
  with precision.enable_x64():
    field = lambda t, y, a: a @ y
    mat = jnp.array([[0.0, 1.0], [-1.0, -0.1]])
    ts = jnp.linspace(0.0, 2.0, 2001)
    y1 = sde.ode_solve(field, jnp.array([1.0, 0.0]), ts, method="heun", args=mat,
                       save_path=False)
    y0 = sde.ode_solve(field, y1, ts[::-1], method="heun", args=mat, save_path=False)
    exact = jax.scipy.linalg.expm(2.0 * mat) @ jnp.array([1.0, 0.0])
  np.testing.assert_allclose(y1, exact, atol=1e-6)
  np.testing.assert_allclose(y0, [1.0, 0.0], atol=1e-6)


def test_ode_path_shape_and_initial_state():
  ts = jnp.linspace(0, 1, 5)
  path = sde.ode_solve(lambda t, y, _: jnp.ones_like(y), jnp.zeros((3, 2)), ts)
  assert path.shape == (5, 3, 2)
  np.testing.assert_allclose(path[:, 0, 0], ts, atol=1e-6)


def test_euler_maruyama_strong_order_with_brownian_refinement():
  # Geometric BM dX = mu X dt + s X dW, exact X_T = X0 exp((mu - s^2/2) T + s W_T).
  # Coarse paths reuse the fine path's Brownian increments (summed), so the strong error
  # is measured pathwise; Euler-Maruyama has strong order 1/2 for multiplicative noise.
  with precision.enable_x64():
    mu, s, horizon, n_paths, fine = 0.5, 0.8, 1.0, 4000, 512
    dw = jax.random.normal(jax.random.key(0), (fine, n_paths)) * np.sqrt(horizon / fine)
    exact = jnp.exp((mu - s**2 / 2) * horizon + s * dw.sum(0))
    errors, steps = [], [8, 16, 32, 64, 128]
    for n in steps:
      inc = dw.reshape(n, fine // n, n_paths).sum(1)
      def body(x, w, dt=horizon / n):
        return x + mu * x * dt + s * x * w, None
      x_end, _ = jax.lax.scan(body, jnp.ones(n_paths), inc)
      errors.append(float(jnp.mean(jnp.abs(x_end - exact))))
  assert abs(_order(errors, steps) - 0.5) < 0.15
  # and the library solver agrees in distribution with the exact law
  xs = sde.euler_maruyama(lambda t, x, _: mu * x, lambda t, x, _: s * x,
                          jnp.ones((20000, 1)), jnp.linspace(0, horizon, 129),
                          jax.random.key(1), save_path=False)
  np.testing.assert_allclose(float(xs.mean()), np.exp(mu * horizon), rtol=0.03)


def test_euler_maruyama_backward_brownian_bridge_variance():
  # Backward in time from x(1) = 0 with zero drift: Var X_0 = s^2 * 1.
  xs = sde.euler_maruyama(lambda t, x, _: jnp.zeros_like(x), 0.5, jnp.zeros((20000, 2)),
                          jnp.linspace(1.0, 0.0, 51), jax.random.key(2), save_path=True)
  assert xs.shape == (51, 20000, 2)
  np.testing.assert_allclose(float(xs[-1].var()), 0.25, rtol=0.05)


@pytest.mark.parametrize("ts", [jnp.zeros((1,)), jnp.zeros((2, 2))])
def test_bad_time_grid(ts):
  with pytest.raises(ValueError, match="ts must be a 1-D time grid"):
    sde.ode_solve(lambda t, y, _: y, jnp.ones(2), ts)


def test_unknown_ode_method():
  with pytest.raises(ValueError, match="method must be one of"):
    sde.ode_solve(lambda t, y, _: y, jnp.ones(2), jnp.linspace(0, 1, 3), method="rk4")


# ---------------------------------------------------------------- metrics and OT

def test_exact_wasserstein_small_problems():
  x = np.array([[0.0, 0.0], [1.0, 0.0]])
  y = np.array([[0.0, 1.0], [1.0, 1.0]])
  assert metrics.w2(x, y) == pytest.approx(1.0)
  assert metrics.w1(x, y) == pytest.approx(1.0)
  # weighted: all mass of x at 0 must split 1/4, 3/4 to points at distance 1 and 3
  np.testing.assert_allclose(
      metrics.wasserstein([[0.0]], [[1.0], [3.0]], b=[1.0, 3.0], p=1), 0.25 + 2.25)
  np.testing.assert_allclose(
      metrics.wasserstein([[0.0]], [[1.0], [3.0]], b=[1.0, 3.0], p=2),
      np.sqrt(0.25 * 1 + 0.75 * 9))
  # 1-D: exact W1 equals the sorted-samples formula
  rng = np.random.default_rng(0)
  u, v = rng.normal(size=50), rng.normal(1.0, 2.0, size=50)
  assert metrics.w1(u, v) == pytest.approx(np.mean(np.abs(np.sort(u) - np.sort(v))))


def test_gaussian_w2_closed_form_and_samples():
  with precision.enable_x64():
    m1, m2 = np.zeros(2), np.array([1.0, 2.0])
    c = np.array([[2.0, 0.5], [0.5, 1.0]])
    # same covariance: W2 is the mean distance
    assert float(metrics.gaussian_w2(m1, c, m2, c)) == pytest.approx(np.sqrt(5.0))
    # commuting (diagonal) covariances: sum of (sqrt a - sqrt b)^2
    assert float(metrics.gaussian_w2(m1, np.diag([1.0, 4.0]), m1, np.diag([9.0, 1.0]))) == \
        pytest.approx(np.sqrt((1 - 3) ** 2 + (2 - 1) ** 2))


def test_entropic_gaussian_closed_form_limits():
  with precision.enable_x64():
    a, b = np.array([[1.0, 0.2], [0.2, 0.6]]), np.array([[0.5, -0.1], [-0.1, 2.0]])
    cost, cross = ot.gaussian_entropic_ot(np.zeros(2), a, np.ones(2), b, 1e-6)
    w2 = metrics.gaussian_w2(np.zeros(2), a, np.ones(2), b)
    # epsilon -> 0: cost -> W2^2 (up to O(eps log eps))
    assert float(cost) == pytest.approx(float(w2) ** 2, abs=1e-4)
    # the coupling is a valid joint covariance
    joint = np.block([[a, np.asarray(cross)], [np.asarray(cross).T, b]])
    assert np.linalg.eigvalsh(joint).min() > -1e-6


def test_sinkhorn_matches_entropic_gaussian_on_a_grid():
  with precision.enable_x64():
    grid = np.linspace(-8.0, 9.0, 240)
    a = np.exp(-grid**2 / 2)
    b = np.exp(-(grid - 1.0) ** 2 / (2 * 0.5))
    a, b = a / a.sum(), b / b.sum()
    solve = jax.jit(lambda g, a, b: ot.sinkhorn(
        g, g, a, b, epsilon=0.5, threshold=1e-8, max_iterations=20000).reg_ot_cost)
    reg_ot_cost = solve(grid[:, None], a, b)
    cost, _ = ot.gaussian_entropic_ot(0.0, 1.0, 1.0, 0.5, 0.5)
  assert float(reg_ot_cost) == pytest.approx(float(cost), abs=1e-4)


def test_sinkhorn_divergence_mmd_energy():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(64, 2)), jnp.float32)
  y = jnp.asarray(rng.normal(size=(64, 2)), jnp.float32)
  z = x + 3.0
  for fn in (metrics.sinkhorn_divergence, metrics.mmd_rbf, metrics.energy_distance):
    same, diff = float(fn(x, y)), float(fn(x, z))
    assert same >= -1e-5 and diff > 10 * max(same, 1e-4), fn.__name__
  assert float(metrics.energy_distance(x, x)) == pytest.approx(0.0, abs=1e-5)
  # energy distance of point masses: 2|a-b|
  assert float(metrics.energy_distance(jnp.zeros((1, 2)), jnp.ones((1, 2)))) == \
      pytest.approx(2 * np.sqrt(2), rel=1e-5)


def test_exact_coupling_marginals():
  rng = np.random.default_rng(1)
  x, y = rng.normal(size=(7, 2)), rng.normal(size=(5, 2))
  b = rng.uniform(size=5)
  plan = ot.exact_coupling(x, y, b=b)
  np.testing.assert_allclose(plan.sum(1), np.full(7, 1 / 7), atol=1e-12)
  np.testing.assert_allclose(plan.sum(0), b / b.sum(), atol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: metrics.w2(np.ones((3, 2)), np.ones((3, 3))), "share a dimension"),
    (lambda: metrics.w2(np.array([[np.nan, 0.0]]), np.ones((3, 2))), "x contains NaN"),
    (lambda: metrics.w2(np.ones((2, 2)), np.ones((3, 2)), b=[1.0, 2.0]), r"b must be \(3,\)"),
    (lambda: ot.sinkhorn(np.ones((3, 2)), np.ones((3, 2)), epsilon=-0.1), "epsilon must be > 0"),
    (lambda: metrics.sinkhorn_divergence(np.ones((3, 2)), np.ones((3, 2)), epsilon=0.0),
     "epsilon must be > 0"),
    (lambda: ot.sinkhorn(np.ones(3), np.ones((3, 2))), r"x must be a \[n, d\] point cloud"),
    (lambda: metrics.mmd_rbf(np.ones((3, 2)), np.ones((3, 4))), "x, y must be"),
])
def test_bad_inputs_are_clear_errors(call, match):
  with pytest.raises(ValueError, match=match):
    call()


# ---------------------------------------------------------------- nn, config, precision

def test_time_mlp_shapes_and_zero_head():
  model = nn.TimeMLP(out_dim=3, hidden=16, depth=2, time_embed_dim=8, zero_init_last=True)
  x, t = jnp.ones((5, 4)), jnp.linspace(0, 1, 5)
  params = model.init(jax.random.key(0), x, t)
  out = model.apply(params, x, t)
  assert out.shape == (5, 3)
  np.testing.assert_allclose(out, 0.0)
  assert model.apply(params, x, 0.5).shape == (5, 3)  # scalar time broadcasts
  emb = nn.SinusoidalEmbedding(6).apply({}, jnp.array([0.0, 0.3]))
  assert emb.shape == (2, 6)


def test_time_mlp_embeds_a_shared_time_once():
  # A time shared by the batch (scalar or [1]) is the same field as the time given per point,
  # and its MLP runs once: the compiled program does the time MLP's arithmetic for one point.
  model = nn.TimeMLP(out_dim=3, hidden=32, depth=2, time_embed_dim=16)
  x = jax.random.normal(jax.random.key(1), (64, 4))
  params = model.init(jax.random.key(0), x, jnp.zeros(64))
  per_point = model.apply(params, x, jnp.full(64, 0.3))
  for shared in (0.3, jnp.full((1,), 0.3)):
    np.testing.assert_allclose(model.apply(params, x, shared), per_point, rtol=1e-5, atol=1e-6)
  apply = lambda t: model.apply(params, x, t)
  # time MLP per point: 2 * (16 * 32 + 32 * 32) flops in its two matmuls
  flops = lambda t: timing.program_cost(apply, t).flops
  saved = flops(jnp.full(64, 0.3)) - flops(jnp.full((1,), 0.3))
  assert saved >= 63 * 2 * (16 * 32 + 32 * 32)
  with pytest.raises(ValueError, match=r"t: expected a shape that broadcasts to .*\(64,\)"):
    model.apply(params, x, jnp.zeros(5))
  with pytest.raises(ValueError, match="t: expected"):
    model.apply(params, x, jnp.zeros((2, 64)))  # would make 2 x 64 outputs from 64 points


def test_silu_is_x_sigmoid_x_to_float32_rounding():
  """core.nn.silu (the tanh form) against the exact value in float64: within 2^-22
  max(|x|, 1), as jax.nn.silu; its gradient against the exact derivative."""
  rng = np.random.default_rng(0)
  x = np.concatenate([np.linspace(-100, 100, 200_001), rng.normal(0, 3, 100_000)])
  x = x.astype(np.float32)
  exact = x.astype(np.float64) / (1 + np.exp(-x.astype(np.float64)))
  scale = np.maximum(np.abs(x), 1.0)
  for f in (nn.silu, jax.nn.silu):
    err = np.abs(np.asarray(jax.jit(f)(x), np.float64) - exact) / scale
    assert err.max() <= 2.0 ** -22, (f, err.max())
  sig = 1 / (1 + np.exp(-x.astype(np.float64)))
  grad = np.asarray(jax.jit(jax.vmap(jax.grad(nn.silu)))(x), np.float64)
  np.testing.assert_allclose(grad, sig * (1 + x * (1 - sig)), rtol=0, atol=4e-6)


def test_presets_and_overrides():
  base = {"seed": 0, "loop": {"num_steps": 10}, "lr": 0.1}
  cfg = config_lib.make_config("cpu", base, {"cpu": {"loop.num_steps": 500}})
  assert cfg.loop.num_steps == 500 and cfg.preset == "cpu"
  assert config_lib.make_config("smoke", base, {"cpu": {}}).loop.num_steps == 10
  with pytest.raises(ValueError, match="unknown preset 'gpu': expected one of smoke, cpu, full"):
    config_lib.make_config("gpu", base, {})
  with pytest.raises(KeyError, match="no such key"):
    config_lib.make_config("cpu", base, {"cpu": {"loop.num_stepz": 5}})
  # fingerprints ignore the loop (length, cadence) but not the method's settings
  other = config_lib.make_config("smoke", {**base, "loop": {"num_steps": 99}}, {})
  assert config_lib.fingerprint_hash(other) == config_lib.fingerprint_hash(
      config_lib.make_config("smoke", base, {}))
  assert config_lib.fingerprint_hash(config_lib.make_config("smoke", {**base, "lr": 0.2}, {})) \
      != config_lib.fingerprint_hash(config_lib.make_config("smoke", base, {}))


def test_enable_x64_is_scoped():
  assert jnp.zeros(1).dtype == jnp.float32
  with precision.enable_x64():
    assert jnp.zeros(1).dtype == jnp.float64
    assert precision.x64_enabled()
  assert jnp.zeros(1).dtype == jnp.float32

"""Environment dynamics against hand-computed steps; Riccati against DP."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.linear_rl import envs


@pytest.fixture(autouse=True)
def _x64():
  with enable_x64():
    yield


def test_deep_sea_steps_by_hand():
  n = 4
  env = envs.deep_sea(n, randomize_actions=False)  # action 1 is "right"
  params = env.sample_params(jax.random.key(0))
  state = env.initial_state(params, None)
  total = 0.0
  for h in range(n):
    np.testing.assert_array_equal(
        env.feature(params, h, state, 1), np.eye(2 * n)[2 * h + 1])
    state, reward, mean = env.step(params, h, state, 1, None)
    assert float(state[0]) == min(h + 1, n - 1)
    total += float(mean)
    assert float(reward) == float(mean)
  assert total == 1.0 and float(env.optimal_value(params, state)) == 1.0
  # Left from column 0 stays at 0 and pays 0.01 / N.
  state, _, mean = env.step(params, 0, jnp.zeros(1), 0, None)
  assert float(state[0]) == 0 and float(mean) == pytest.approx(0.01 / n)
  state, _, _ = env.step(params, 2, jnp.array([2.0]), 0, None)
  assert float(state[0]) == 1
  # Right at the last step but not in the last column pays 0.
  _, _, mean = env.step(params, n - 1, jnp.array([2.0]), 1, None)
  assert float(mean) == 0.0
  # The per-seed map decides which index is "right".
  env = envs.deep_sea(n)
  params = env.sample_params(jax.random.key(5))
  right = np.asarray(params["right"])
  assert 0 < right.sum() < right.size  # both labellings occur
  for col in range(3):
    nxt, _, _ = env.step(params, 2, jnp.array([float(col)]),
                         int(right[2, col]), None)
    assert float(nxt[0]) == col + 1
  # max_value reads the two entries of each column.
  theta = jnp.arange(2.0 * n)
  np.testing.assert_array_equal(
      env.max_value(params, 0, jnp.array([[0.0], [2.0]]), theta), [1.0, 5.0])


def test_linear_system_steps_by_hand_and_optimal_value_by_brute_force():
  env = envs.linear_system(num_actions=5, horizon=3, reward_noise=False)
  params = env.sample_params(jax.random.key(1))
  a_mat, b_mat = np.asarray(params["A"]), np.asarray(params["B"])
  acts = np.asarray(params["actions"])
  s1 = np.asarray(env.initial_state(params, None))
  nxt, reward, mean = env.step(params, 0, jnp.asarray(s1), 3, None)
  np.testing.assert_allclose(nxt, a_mat @ s1 + b_mat @ acts[3], atol=1e-14)
  expected = 0.5 + np.asarray(params["w_s"]) @ s1 + np.asarray(
      params["w_a"]) @ acts[3]
  assert float(mean) == pytest.approx(expected, abs=1e-14)
  assert 0.0 <= float(mean) <= 1.0
  phi = np.asarray(env.feature(params, 0, jnp.asarray(s1), 3))
  np.testing.assert_allclose(phi, np.r_[s1, acts[3], 1.0] / np.sqrt(3))
  assert np.linalg.norm(phi) <= 1.0
  best = -np.inf
  for seq in itertools.product(range(5), repeat=3):
    s, total = s1, 0.0
    for a in seq:
      total += 0.5 + np.asarray(params["w_s"]) @ s + np.asarray(
          params["w_a"]) @ acts[a]
      s = a_mat @ s + b_mat @ acts[a]
    best = max(best, total)
  assert float(env.optimal_value(params, jnp.asarray(s1))) == pytest.approx(
      best, abs=1e-12)


def test_lqr_step_and_riccati_against_dynamic_programming():
  env = envs.lqr(a=0.5, b=1.0, q=1.0, r=0.5, action_bound=2.0, horizon=4)
  params = env.sample_params(None)
  x_max, u_max, scale = envs.lqr_scales(env)
  assert x_max == pytest.approx(4.0)
  nxt, _, mean = env.step(params, 0, jnp.array([0.7]), 1.5, None)
  assert float(nxt[0]) == pytest.approx(0.5 * 0.7 + 1.5)
  assert float(mean) == pytest.approx(1 - (0.7**2 + 0.5 * 1.5**2) / scale)
  gains, p, const = envs.lqr_riccati(0.5, 1.0, 1.0 / scale, 0.5 / scale, 4)
  # Direct DP in the quadratic feature class: fit r + V_{h+1}(x') exactly on
  # a grid of (x, u), with V_{h+1} maximised over u by brute force on a fine
  # grid refined by the closed-form quadratic maximiser.
  xs = np.linspace(-x_max, x_max, 9)
  us = np.linspace(-u_max, u_max, 9)
  xx, uu = [g.ravel() for g in np.meshgrid(xs, us, indexing="ij")]
  feats = np.asarray(jax.vmap(
      lambda x, u: env.feature(params, 0, x[None], u))(xx, uu))
  rewards = 1 - (xx**2 + 0.5 * uu**2) / scale
  theta = np.zeros(6)
  dp_gains = np.zeros(4)
  for h in range(3, -1, -1):
    nxt_states = 0.5 * xx + uu
    if h == 3:
      values = np.zeros_like(xx)
    else:
      u_fine = np.linspace(-u_max, u_max, 4001)
      xg, ug = np.meshgrid(nxt_states, u_fine, indexing="ij")
      fine = np.stack([xg**2 / x_max**2, xg * ug / (x_max * u_max),
                       ug**2 / u_max**2, xg / x_max, ug / u_max,
                       np.ones_like(xg)], -1) / np.sqrt(6)
      values = np.max(fine @ theta, axis=1)
      # brute force agrees with the closed-form maximiser used by agents
      closed = np.asarray(env.max_value(params, 0, nxt_states[:, None],
                                        jnp.asarray(theta)))
      assert np.abs(closed - values).max() < 1e-5
      values = closed
    theta = np.linalg.lstsq(feats, rewards + values, rcond=None)[0]
    assert np.abs(feats @ theta - rewards - values).max() < 1e-10
    dp_gains[h] = envs.lqr_gains_from_weights(env, theta[None])[0] if h < 3 \
        else 0.0
    x0 = 0.3
    v_dp = float(env.max_value(params, 0, jnp.array([[x0]]),
                               jnp.asarray(theta))[0])
    assert v_dp == pytest.approx(const[h] - p[h] * x0**2, abs=1e-10)
  np.testing.assert_allclose(dp_gains[:3], gains[:3], atol=1e-10)
  assert float(env.optimal_value(params, jnp.array([0.3]))) == pytest.approx(
      const[0] - p[0] * 0.09, abs=1e-12)


def test_lqr_greedy_handles_non_concave_weights():
  env = envs.lqr()
  params = env.sample_params(None)
  _, u_max, _ = envs.lqr_scales(env)
  key = jax.random.key(0)
  # u^2 coefficient > 0, positive linear term: the upper end point.
  theta = jnp.array([0.0, 0.0, 1.0, 0.0, 0.5, 0.0])
  assert float(env.greedy(params, 0, jnp.array([0.0]), theta, key)) == u_max
  # Symmetric convex: a coin flip between the end points.
  theta = jnp.array([0.0, 0.0, 1.0, 0.0, 0.0, 0.0])
  keys = jax.random.split(key, 400)
  acts = jax.vmap(lambda k: env.greedy(params, 0, jnp.array([0.0]), theta,
                                       k))(keys)
  assert set(np.unique(np.asarray(acts))) == {-u_max, u_max}
  assert abs(int(jnp.sum(acts > 0)) - 200) < 50
  assert int(env.num_nonconcave(jnp.stack([theta, -theta]))) == 1

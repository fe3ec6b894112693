"""Tests of the linear-algebra kernels and agents of linear_rl (float64)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.linear_rl import envs, kernel, train


@pytest.fixture(autouse=True)
def _x64():
  with enable_x64():
    yield


def _basis_of(features):
  d = features.shape[1]
  basis = jnp.zeros((d, d))
  rank = jnp.zeros((), jnp.int32)
  added = []
  for phi in features:
    basis, rank, a = kernel.span_update(basis, rank, phi)
    added.append(bool(a))
  return basis, rank, added


def test_projector_is_idempotent_and_kills_spanned_features():
  rng = np.random.default_rng(0)
  # 9 features in R^6 spanning a 3-dim subspace (plus exact duplicates).
  features = rng.normal(size=(9, 3)) @ rng.normal(size=(3, 6))
  features[5] = features[1]
  basis, rank, added = _basis_of(jnp.asarray(features))
  assert int(rank) == 3
  assert added[:3] == [True, True, True] and not any(added[3:])
  proj = kernel.projector(basis)
  np.testing.assert_allclose(proj @ proj, proj, atol=1e-12)
  np.testing.assert_allclose(proj, proj.T, atol=1e-14)
  comp = np.eye(6) - np.asarray(proj)
  assert np.abs(features @ comp.T).max() < 1e-12
  used = np.asarray(basis)[:, :3]
  np.testing.assert_allclose(used.T @ used, np.eye(3), atol=1e-13)
  assert np.abs(np.asarray(basis)[:, 3:]).max() == 0.0
  # A full-rank set fills the basis and then adds nothing.
  basis, rank, _ = _basis_of(jnp.asarray(rng.normal(size=(8, 6))))
  assert int(rank) == 6
  np.testing.assert_allclose(kernel.projector(basis), np.eye(6), atol=1e-12)


def test_noise_lies_in_null_space_with_the_stated_covariance():
  rng = np.random.default_rng(1)
  d = 5
  features = rng.normal(size=(2, d))
  basis, _, _ = _basis_of(jnp.asarray(features))
  cands = jnp.asarray(rng.normal(size=(40, d)))
  _, design, _ = kernel.d_optimal_design(cands, 200)
  keys = jax.random.split(jax.random.key(0), 20000)
  xi = jax.jit(jax.vmap(
      lambda k: kernel.null_space_noise(basis, design, k, 2.0)))(keys)
  proj = np.asarray(kernel.projector(basis))
  assert np.abs(np.asarray(xi) @ proj).max() < 1e-10
  comp = np.eye(d) - proj
  expected = 4.0 * np.linalg.pinv(comp @ np.asarray(design) @ comp,
                                  rcond=1e-10, hermitian=True)
  empirical = np.cov(np.asarray(xi).T)
  scale = np.abs(expected).max()
  # 20000 samples: relative standard error ~ sqrt(2 / 20000) = 1%.
  assert np.abs(empirical - expected).max() < 0.06 * scale
  # No noise at all once the data span everything.
  full, _, _ = _basis_of(jnp.asarray(rng.normal(size=(d, d))))
  assert float(jnp.abs(kernel.null_space_noise(
      full, design, jax.random.key(1), 1e6)).max()) < 1e-4


def test_regression_fits_exactly_under_completeness():
  env = envs.linear_system(num_actions=7, horizon=3, reward_noise=False)
  params = env.sample_params(jax.random.key(2))
  rng = np.random.default_rng(2)
  n = 12
  states = rng.normal(size=(n, 3))
  states /= 2 * np.linalg.norm(states, axis=1, keepdims=True)
  actions = rng.integers(0, 7, size=n)
  actions[:3] = 0  # few distinct actions: a rank-deficient design
  feats = jnp.stack([env.feature(params, 0, jnp.asarray(s), a)
                     for s, a in zip(states, actions)])
  nexts = jnp.stack([env.step(params, 0, jnp.asarray(s), a, None)[0]
                     for s, a in zip(states, actions)])
  theta_next = jnp.asarray(rng.normal(size=7))
  targets = env.max_value(params, 1, nexts, theta_next)
  basis, rank, _ = _basis_of(feats)
  counts = jnp.asarray(rng.integers(1, 4, size=n).astype(float))
  gram = (feats * counts[:, None]).T @ feats
  theta = kernel.min_norm_lstsq(basis, rank, gram, feats, targets, counts)
  assert np.abs(np.asarray(feats @ theta - targets)).max() < 1e-12
  # Min-norm: theta lies in the span of the data.
  proj = kernel.projector(basis)
  np.testing.assert_allclose(proj @ theta, theta, atol=1e-12)
  # On any feature in the span it predicts the completed value T theta.
  ds, da = 3, 3
  completed = jnp.concatenate([
      params["A"].T @ theta_next[:ds], params["B"].T @ theta_next[:ds],
      (theta_next[-1] + jnp.max(params["actions"] @ theta_next[ds:ds + da])
       )[None]])
  mix = jnp.asarray(rng.normal(size=n)) @ feats
  np.testing.assert_allclose(mix @ theta, mix @ completed, atol=1e-11)


def test_random_tie_breaking_has_no_index_bias():
  keys = jax.random.split(jax.random.key(3), 6000)
  picks = jax.jit(jax.vmap(
      lambda k: envs.random_argmax(jnp.zeros(6), k)))(keys)
  counts = np.bincount(np.asarray(picks), minlength=6)
  # Binomial(6000, 1/6): sd ~ 29; 5 sd either side.
  assert np.all(np.abs(counts - 1000) < 145), counts
  # Ties only among the maxima; a clear maximum always wins.
  picks = jax.jit(jax.vmap(lambda k: envs.random_argmax(
      jnp.array([0.0, 1.0, 1.0, -2.0]), k)))(keys[:2000])
  counts = np.bincount(np.asarray(picks), minlength=4)
  assert counts[0] == counts[3] == 0 and abs(counts[1] - 1000) < 112
  # DeepSea's greedy at theta = 0 goes either way.
  env = envs.deep_sea(4)
  params = env.sample_params(jax.random.key(0))
  acts = jax.jit(jax.vmap(lambda k: env.greedy(params, 0, jnp.zeros(1),
                                               jnp.zeros(8), k)))(keys[:2000])
  assert abs(int(jnp.sum(acts)) - 1000) < 112


def test_d_optimal_design_meets_kiefer_wolfowitz():
  rng = np.random.default_rng(4)
  cands = jnp.asarray(rng.normal(size=(30, 4)) * [1.0, 3.0, 0.3, 1.0])
  weights, gram, max_lev = kernel.d_optimal_design(cands, 400)
  assert abs(float(weights.sum()) - 1.0) < 1e-12 and float(weights.min()) >= 0
  lev = np.einsum("md,de,me->m", cands, np.linalg.inv(gram), cands)
  # At the optimum max leverage = d; FW gets within a few percent.
  assert lev.max() < 4 * 1.05 and float(max_lev[-1]) >= 4 - 1e-9
  assert float(max_lev[0]) > lev.max()


@pytest.fixture(scope="module")
def deep_sea_program():
  with enable_x64():
    env = envs.deep_sea(5)
    cfg = kernel.AgentConfig()
    program = jax.jit(jax.vmap(lambda k: kernel.run_episodes(env, cfg, 60, k)))
    keys = jax.vmap(jax.random.key)(jnp.arange(2))
    return env, program, keys


@pytest.fixture(scope="module")
def deep_sea_runs(deep_sea_program):
  env, program, keys = deep_sea_program
  with enable_x64():
    return env, program(keys)


def test_lemma3_out_of_span_episodes_at_most_dh(deep_sea_runs):
  env, out = deep_sea_runs
  m = out.metrics
  oos = np.asarray(m.out_of_span).sum(1)
  assert np.all(oos <= env.feature_dim * env.horizon)
  # Each out-of-span episode adds >= 1 dimension; the ranks add up.
  np.testing.assert_array_equal(np.asarray(m.new_dims).sum(1),
                                np.asarray(out.final_rank).sum(1))
  assert np.all(np.asarray(m.new_dims)[np.asarray(m.out_of_span)] >= 1)
  assert int(np.asarray(out.overflow).max()) == 0
  assert np.asarray(m.regret).min() > -1e-12


def test_lemma2_in_span_prediction_equals_sampled_return(deep_sea_runs):
  _, out = deep_sea_runs
  m = out.metrics
  in_span = ~np.asarray(m.out_of_span)
  assert in_span.sum() > 40
  gap = np.abs(np.asarray(m.predicted_value) - np.asarray(m.predicted_reward))
  assert gap[in_span].max() < 1e-10
  # Out of span the prediction is off (the noise is visible there).
  assert np.median(gap[~in_span]) > 1e-3


def test_jit_equals_eager_for_the_kernels():
  rng = np.random.default_rng(8)
  feats = jnp.asarray(rng.normal(size=(7, 3)) @ rng.normal(size=(3, 5)))
  basis, rank, _ = _basis_of(feats)  # eager
  jit_update = jax.jit(kernel.span_update)
  basis_j, rank_j = jnp.zeros((5, 5)), jnp.zeros((), jnp.int32)
  for phi in feats:
    basis_j, rank_j, _ = jit_update(basis_j, rank_j, phi)
  np.testing.assert_allclose(basis_j, basis, atol=1e-13)
  assert int(rank_j) == int(rank)
  targets = jnp.asarray(rng.normal(size=7))
  gram = feats.T @ feats
  np.testing.assert_allclose(
      jax.jit(kernel.min_norm_lstsq)(basis, rank, gram, feats, targets),
      kernel.min_norm_lstsq(basis, rank, gram, feats, targets), atol=1e-12)
  design = jnp.eye(5) + 0.1
  key = jax.random.key(3)
  np.testing.assert_allclose(
      jax.jit(kernel.null_space_noise)(basis, design, key, 1.5),
      kernel.null_space_noise(basis, design, key, 1.5), atol=1e-12)
  np.testing.assert_allclose(
      jax.jit(kernel.gaussian_from_precision)(gram + jnp.eye(5), targets[:5],
                                              key, 0.3)[1],
      kernel.gaussian_from_precision(gram + jnp.eye(5), targets[:5], key,
                                     0.3)[1], atol=1e-12)


def test_vmapped_seeds_are_independent(deep_sea_program, deep_sea_runs):
  # Same compiled program, seeds swapped: each seed's run must not depend on
  # its batch position or on the other seed.
  _, program, keys = deep_sea_program
  _, out = deep_sea_runs
  swapped = program(keys[::-1])
  for a, b in zip(jax.tree.leaves(swapped), jax.tree.leaves(out)):
    np.testing.assert_allclose(np.asarray(a, float)[::-1], np.asarray(b, float),
                               atol=1e-12)


def test_ucb_betas_in_one_program_equal_separate_runs():
  """LSVI-UCB's bonus scales vmapped into one program (train.run's DeepSea sweep) give
  each scale the run it gets alone, on the same seeds; the scales do change the run."""
  env = envs.deep_sea(4)
  cfg = kernel.AgentConfig(name="lsvi_ucb")
  both, _, _ = train.simulate_timed(env, cfg, 30, 2, betas=(0.0, 3.0))
  alone = train.simulate(env, cfg._replace(beta=3.0), 30, 2)
  for a, b in zip(jax.tree.leaves(both), jax.tree.leaves(alone)):
    np.testing.assert_allclose(np.asarray(a[1], float), np.asarray(b, float), atol=1e-12)
  assert not np.allclose(both.final_q_weights[0], both.final_q_weights[1])
  with pytest.raises(ValueError, match="betas"):
    train.simulate_timed(env, cfg, 30, 2, betas=(1.0, -1.0))


def test_bad_input_raises():
  env = envs.deep_sea(3)
  with pytest.raises(ValueError, match="agent name"):
    kernel.check_agent(env, kernel.AgentConfig(name="dqn"))
  with pytest.raises(ValueError, match="sigma_theta"):
    kernel.check_agent(env, kernel.AgentConfig(sigma_theta=-1.0))
  with pytest.raises(ValueError, match="epsilon"):
    kernel.check_agent(env, kernel.AgentConfig(name="eps_greedy", epsilon=2.0))
  with pytest.raises(ValueError, match="finite action set"):
    kernel.check_agent(envs.lqr(), kernel.AgentConfig(name="lsvi_ucb"))
  with pytest.raises(ValueError, match="num_episodes"):
    train.simulate(env, kernel.AgentConfig(), 0, 1)
  with pytest.raises(ValueError, match="size"):
    envs.deep_sea(1)
  with pytest.raises(ValueError, match="env name"):
    envs.make_env("atari")
  with pytest.raises(ValueError, match=r"\|a\|"):
    envs.lqr(a=1.5)
  with pytest.raises(ValueError, match="Riccati action"):
    envs.lqr(a=0.9, b=1.0, action_bound=1.0)


def test_run_returns_a_typed_result_with_seed_statistics(tmp_path):
  import dataclasses
  import json

  from jaxlib_papers.linear_rl.configs import default

  config = default.get_config("smoke")
  config.deep_sea.env.size = 3
  config.deep_sea.agents = ("nullspace",)
  config.run.num_episodes, config.run.num_seeds = 6, 2
  result = train.run(config, tmp_path)
  assert isinstance(result, train.RunResult) and list(result.agents) == ["nullspace"]
  ours = result.agents["nullspace"]
  assert np.asarray(ours.regret).shape == (2, 6) and len(ours.first_goal_episode) == 2
  (row,) = result.summary
  assert row["agent"] == "nullspace" and row["num_seeds"] == 2
  np.testing.assert_allclose(row["cumulative_regret"], np.mean(ours.cumulative_regret))
  np.testing.assert_allclose(row["cumulative_regret_std"], np.std(ours.cumulative_regret))
  with pytest.raises(dataclasses.FrozenInstanceError):
    result.experiment = "lqr"  # type: ignore[misc]
  written = json.loads((tmp_path / "results.json").read_text())
  assert written["agents"]["nullspace"]["cumulative_regret"] == ours.cumulative_regret
  assert written["summary"] == result.summary
  config.experiment = "bandit"
  with pytest.raises(ValueError, match="config.experiment"):
    train.run(config)

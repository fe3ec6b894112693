"""The exact two-token toy: CCA's optimum against the brief's table and the CFG target."""

import jax
import numpy as np
import pytest

from jaxlib_papers.cca import reproduce, toy
from jaxlib_papers.core.precision import enable_x64

COND, PRIOR = toy.TOY_CONDITIONALS, toy.TOY_PRIOR

# (beta, lambda) -> optimum for class 0, computed independently with scipy BFGS (the brief).
TABLE = [
    (1.0, 1.2, [0.5333, 0.3, 0.1333, 0.0333]),
    (0.5, 1.6 ** 0.5, [0.64, 0.27, 0.08, 0.01]),
    (1.0, 0.0, [0.4, 0.3, 0.2, 0.1]),
    (1.0, 1.0, [0.5087, 0.3071, 0.1457, 0.0385]),
    (1.0, 4.0, [0.8162, 0.1252, 0.0478, 0.0108]),
]


@pytest.mark.parametrize("beta,lam,expected", TABLE)
def test_exact_optimum_matches_table(beta, lam, expected):
  with enable_x64():
    optimum = toy.exact_optimum(beta, lam)
  np.testing.assert_allclose(optimum[0], expected, atol=6e-5)
  # Class 1 is class 0 reversed (the toy's symmetry).
  np.testing.assert_allclose(optimum[1], optimum[0][::-1], atol=1e-10)


@pytest.mark.parametrize("beta", [1.0, 0.5])
def test_optimum_is_cfg_target_at_lambda_z_to_beta(beta):
  scale = 1.0 / beta
  z = toy.partition(COND, PRIOR, scale)
  np.testing.assert_allclose(z, [1.2, 1.2] if scale == 1 else [1.6, 1.6])  # the brief's Z
  with enable_x64():
    optimum = toy.exact_optimum(beta, float(z[0] ** beta))
    off = toy.exact_optimum(beta, float(z[0] ** beta) * 1.5)
  target = toy.cfg_target(COND, PRIOR, scale)
  assert toy.total_variation(optimum, target) < 1e-6
  assert toy.total_variation(off, target) > 1e-2  # another lambda: another distribution


def test_lambda_zero_is_reference_and_strength_rises_with_lambda():
  lambdas = [0.5, 1.0, 1.2, 2.0, 4.0, 8.0]
  with enable_x64():
    np.testing.assert_allclose(toy.exact_optimum(1.0, 0.0), COND, atol=1e-9)
    scales = [toy.best_fit_scale(toy.exact_optimum(1.0, lam)) for lam in lambdas]
  assert np.all(np.diff(scales) > 0), scales
  assert abs(scales[2] - 1.0) < 1e-4  # lambda = Z: the s = 1 target exactly


def test_token_level_cfg_is_not_the_sequence_target():
  tokenwise = toy.token_cfg(COND, PRIOR, 1.0)
  np.testing.assert_allclose(tokenwise[0], [0.5407, 0.3041, 0.1241, 0.0310], atol=6e-5)
  assert abs(toy.total_variation(tokenwise, toy.cfg_target(COND, PRIOR, 1.0)) - 0.0115) < 1e-4


def test_exact_optimum_needs_float64():
  with pytest.raises(RuntimeError, match="float64"):
    toy.exact_optimum(1.0, 1.2)


def test_sampled_minibatch_cca_reaches_exact_optimum():
  """The kernel's own loss on sampled minibatches (pure shuffled negatives, no null rows),
  run by core.train_loop, converges to the exact optimum (the s = 1 CFG target)."""
  assert reproduce.sampled_toy_tv(600) < 0.02
  assert toy.total_variation(COND, toy.cfg_target(COND, PRIOR, 1.0)) > 0.13  # the start


@pytest.mark.parametrize("seed", [0, 1])
def test_any_vocabulary_optimum_is_cfg_target(seed):
  """V = 3 tokens per position: 9 classes whose conditionals are the 9 cyclic shifts of one
  random distribution (uniform p(x), so Z_c(s) is the same for every class and one lambda
  = Z^beta makes the optimum the CFG target for all of them)."""
  base = np.random.default_rng(seed).dirichlet(np.ones(9))
  cond = np.stack([np.roll(base, k) for k in range(9)])
  prior = np.full(9, 1 / 9)
  z = toy.partition(cond, prior, 1.0)
  np.testing.assert_allclose(z, z[0], rtol=1e-12)
  with enable_x64():
    optimum = toy.exact_optimum(1.0, float(z[0]), cond, prior)
    off = toy.exact_optimum(1.0, float(z[0]) * 1.5, cond, prior)
  target = toy.cfg_target(cond, prior, 1.0)
  assert toy.total_variation(optimum, target) < 1e-6
  assert toy.total_variation(off, target) > 1e-2
  tokens, labels = toy.sample_pairs(jax.random.key(seed), 64, cond, prior)
  assert tokens.shape == (64, 2) and int(tokens.max()) <= 2 and int(labels.max()) <= 8


@pytest.mark.parametrize("cond, prior, message", [
    (np.full((2, 5), 0.2), PRIOR, r"\[K, V\^2\]"),
    (COND, np.array([1.0]), r"prior must be \[K\] = \[2\]"),
    (np.array([[0.5, 0.5, 0.0, 0.0], [0.25] * 4]), PRIOR, "positive entries"),
])
def test_bad_toy_is_named(cond, prior, message):
  with enable_x64(), pytest.raises(ValueError, match=message):
    toy.exact_optimum(1.0, 1.2, cond, prior)

"""The evaluation protocol against sklearn and closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.stats import ortho_group
from sklearn.linear_model import LinearRegression
from sklearn.metrics import r2_score

from jaxlib_papers.identifiability import data as D
from jaxlib_papers.identifiability import evaluate as E


@pytest.mark.parametrize("intercept", [True, False])
def test_heldout_r2_matches_sklearn(intercept):
  rng = np.random.default_rng(0)
  h = rng.normal(size=(400, 6)).astype(np.float32)
  y = (np.tanh(h[:, :3]) + 0.3 * rng.normal(size=(400, 3)) + 2.0).astype(np.float32)
  model = LinearRegression(fit_intercept=intercept).fit(h[:200], y[:200])
  expected = r2_score(y[200:], model.predict(h[200:]))
  assert float(E.heldout_r2(jnp.asarray(h), jnp.asarray(y), intercept)) == pytest.approx(
      expected, abs=1e-4)


def test_singular_value_mae_zero_for_scaled_orthogonal():
  kappa = 10.0
  z = np.asarray(D.uniform_sphere(jax.random.key(0), 1000, 5))
  rotation = ortho_group.rvs(5, random_state=0)
  h = kappa * z @ rotation
  assert float(E.singular_value_mae(jnp.asarray(h), jnp.asarray(z), 1 / kappa)) < 1e-5
  # a non-orthogonal linear map is detected
  skew = h @ np.diag([1.0, 1.0, 1.0, 2.0, 0.5])
  assert float(E.singular_value_mae(jnp.asarray(skew), jnp.asarray(z), 1 / kappa)) > 0.02


def test_same_class_cosine():
  centers = np.asarray(D.uniform_sphere(jax.random.key(1), 4, 6))
  rows = np.tile(centers, (5, 1)) * np.arange(1, 21)[:, None]   # row i -> class i mod 4
  assert float(E.same_class_cosine(jnp.asarray(rows), 4)) == pytest.approx(1.0, abs=1e-5)
  noise = np.asarray(D.uniform_sphere(jax.random.key(2), 4000, 6))
  assert abs(float(E.same_class_cosine(jnp.asarray(noise), 4))) < 0.05
  with pytest.raises(ValueError, match="rows per class"):
    E.same_class_cosine(jnp.asarray(rows[:6]), 4)


def test_bayes_cross_entropy_is_the_floor():
  """The true posterior beats any other temperature on the mixture's own samples."""
  problem = D.make_problem(jax.random.key(3), 5, 20, mixing_candidates=16)
  batch = D.sample_batch(jax.random.key(4), problem, 10.0, 20000, 100)
  bayes = float(E.bayes_cross_entropy(batch.z, batch.label, problem.centers, 10.0, 20))
  for kappa in (5.0, 8.0, 12.5, 20.0):
    assert bayes < float(E.bayes_cross_entropy(batch.z, batch.label, problem.centers,
                                               kappa, 20))
  # DIET labels: exactly ln(N / |C|) more (N divisible by |C|).
  diet = float(E.bayes_cross_entropy(batch.z, batch.index, problem.centers, 10.0, 100))
  assert diet == pytest.approx(bayes + np.log(5.0), abs=1e-4)

"""The data-generating process: vMF closed form, mixing, conditionals, sprites."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.identifiability import data as D


@pytest.mark.parametrize("dim,kappa", [(3, 1.0), (5, 10.0), (5, 50.0), (10, 5.0)])
def test_vmf_mean_resultant_length_matches_closed_form(dim, kappa):
  n = 20000
  mean = D.normalize(jnp.arange(1.0, dim + 1.0))
  z, rejected = jax.jit(D.sample_vmf)(jax.random.key(dim), jnp.tile(mean, (n, 1)), kappa)
  np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
  cos = np.asarray(z @ mean)
  expected = D.mean_resultant_length(dim, kappa)
  assert abs(cos.mean() - expected) < 5 * cos.std() / np.sqrt(n) + 1e-4, (cos.mean(), expected)
  assert int(rejected) <= 5
  # The tangent part is isotropic: the mean of z is A_d(kappa) mu, nothing orthogonal.
  np.testing.assert_allclose(np.asarray(z.mean(0)), expected * np.asarray(mean), atol=0.02)


def test_mean_resultant_length_limits():
  assert D.mean_resultant_length(3, 1e-4) == pytest.approx(1e-4 / 3, rel=1e-3)   # kappa / d
  assert D.mean_resultant_length(5, 500.0) == pytest.approx(1 - 2 / 500.0, abs=1e-4)


def test_mixing_is_invertible_and_well_conditioned():
  key = jax.random.key(0)
  mixing = D.make_mixing(key, 5, num_layers=4, num_candidates=256)
  assert mixing.shape == (4, 5, 5)
  np.testing.assert_allclose(np.linalg.norm(mixing, axis=1), 1.0, atol=1e-5)   # columns
  cond = np.linalg.cond(np.asarray(mixing))
  raw = np.asarray(jax.random.uniform(key, (256, 5, 5), minval=-1, maxval=1))
  assert cond.max() < np.median(np.linalg.cond(raw / np.linalg.norm(raw, axis=1, keepdims=True)))
  z = D.uniform_sphere(jax.random.key(1), 64, 5)
  x = D.mix(mixing, z)
  assert not np.allclose(np.asarray(x), np.asarray(z @ np.linalg.multi_dot(
      [np.asarray(m).T for m in mixing])))   # nonlinear
  np.testing.assert_allclose(np.asarray(D.unmix(mixing, x)), np.asarray(z), atol=1e-4)


def test_batch_labels_and_conditionals():
  problem = D.make_problem(jax.random.key(2), 4, 7, mixing_candidates=64)
  batch = D.sample_batch(jax.random.key(3), problem, 20.0, 512, 70)
  assert batch.x.shape == batch.z.shape == (512, 4)
  np.testing.assert_array_equal(batch.label, batch.index % 7)
  assert batch.index.min() >= 0 and batch.index.max() < 70
  for kind in ("laplace", "normal"):
    z, _ = D.sample_conditional(jax.random.key(4), problem.centers[batch.label], 0.5, kind)
    np.testing.assert_allclose(np.linalg.norm(z, axis=1), 1.0, atol=1e-5)
    # scale kappa / 10 = 0.05: samples stay close to their cluster vector
    assert float(jnp.mean(jnp.sum(z * problem.centers[batch.label], 1))) > 0.98
  with pytest.raises(ValueError, match="conditional"):
    D.sample_conditional(jax.random.key(4), problem.centers, 1.0, "cauchy")
  with pytest.raises(ValueError, match="dim"):
    D.make_mixing(jax.random.key(0), 1)


def test_sprites_render():
  s = D.render_sprites(size=16, num_scales=3, num_positions=4, supersample=2)
  assert s.images.shape == (3 * 3 * 16, 16, 16)
  assert s.images.min() >= 0 and s.images.max() <= 1
  mass = s.images.sum((1, 2))
  for shape in range(3):   # bigger sprites have more ink
    sel = s.shape == shape
    per_scale = [mass[sel & (s.scale == r)].mean() for r in np.unique(s.scale)]
    assert np.all(np.diff(per_scale) > 0)
  ys, xs = np.mgrid[:16, :16]
  cx = (s.images * (xs + 0.5) / 16).sum((1, 2)) / mass    # centroid follows position
  assert np.corrcoef(cx, s.pos_x)[0, 1] > 0.99
  with pytest.raises(ValueError, match="size"):
    D.render_sprites(size=4)

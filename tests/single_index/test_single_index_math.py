"""The links' exponents, the closed-form smoothed loss and its gradient (float64 unless
the test is about float32)."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlib_papers.core.precision import enable_x64
from jaxlib_papers.single_index import kernel, links, losses


@pytest.mark.parametrize("name", sorted(links.LINKS))
def test_builtin_links_exponents_by_monte_carlo(name):
  link = links.LINKS[name]
  m = links.check_link(link, noise_std=0.1)   # raises if a declaration disagrees
  k, s = link.information_exponent, link.generative_exponent
  assert abs(m.label[k - 1]) > 0.3 and np.all(np.abs(m.label[:k - 1]) < 0.1)
  assert abs(m.transformed[s - 1]) > 0.3


def test_monte_carlo_coefficients_match_the_brief_table():
  assert links.measure_exponents(links.LINKS["he3"]).transformed[0] == pytest.approx(
      -0.441, abs=0.01)
  assert links.measure_exponents(links.LINKS["he4"]).transformed[1] == pytest.approx(
      0.466, abs=0.01)
  bin3 = links.measure_exponents(links.LINKS["bin3"])
  assert bin3.label[2] == pytest.approx(0.453, abs=0.01)
  assert abs(bin3.label[0]) < 0.01   # 4 phi(a) - 2 phi(0) = 0 at a^2 = 2 ln 2


def test_a_link_with_wrong_exponents_is_rejected_naming_them():
  he3 = links.LINKS["he3"]
  with pytest.raises(ValueError, match=r"'he3': declared information_exponent k\* = 2.*"
                                       r"first nonzero one is at j = 3"):
    links.check_link(he3._replace(information_exponent=2, generative_exponent=1))
  with pytest.raises(ValueError, match=r"declared generative_exponent s\* = 2.*first "
                                       r"nonzero one is at j = 1"):
    links.check_link(he3._replace(generative_exponent=2))
  with pytest.raises(ValueError, match=r"bin3.*generative_exponent s\* = 1.*j = 3"):
    links.check_link(links.LINKS["bin3"]._replace(generative_exponent=1))
  # sign(y) on He4 (the brief: "never recovered"): E[T h2] < 0 at even s*.
  with pytest.raises(ValueError, match=r"E\[T\(y\) h_2\(z\)\] != 0 \(and > 0 for even"):
    links.check_link(links.LINKS["he4"]._replace(transform=jnp.sign))
  with pytest.raises(ValueError, match=r"1 <= generative_exponent <= information_exp"):
    links.check_link(he3._replace(generative_exponent=4))


def test_hermite_polynomials_are_orthonormal():
  nodes, weights = np.polynomial.hermite_e.hermegauss(30)
  weights = weights / weights.sum()
  with enable_x64():
    h = np.stack([np.asarray(links.hermite(j, nodes)) for j in range(6)])
  np.testing.assert_allclose((h * weights) @ h.T, np.eye(6), atol=1e-10)
  for j in range(6):
    np.testing.assert_allclose(np.polyval(links.hermite_coefficients(j)[::-1], nodes), h[j],
                               atol=1e-9)


@pytest.mark.parametrize("degree", [1, 2, 3, 4])
def test_closed_form_smoothed_loss_equals_monte_carlo(degree):
  # S = E_{z perp w, |z| = 1} h_p(<w + lam z, x> / |w + lam z|), estimated directly.
  rng = np.random.default_rng(degree)
  d, lam, n = 10, 10 ** 0.25 * 1.5, 200_000
  w = rng.standard_normal(d)
  w /= np.linalg.norm(w)
  x = 1.3 * rng.standard_normal(d)
  g = rng.standard_normal((n, d))
  g -= np.outer(g @ w, w)
  z = g / np.linalg.norm(g, axis=1, keepdims=True)
  values = np.polyval(links.hermite_coefficients(degree)[::-1],
                      (w + lam * z) @ x / np.linalg.norm(w + lam * z, axis=1))
  with enable_x64():
    closed = float(losses.smoothed_hermite(w @ x, np.sum(x * x - 1),
                                           losses.Oracle(degree, lam, d)))
  assert abs(closed - values.mean()) < 5 * values.std() / math.sqrt(n)


def test_no_smoothing_is_the_hermite_and_p2_is_a_rescaling():
  with enable_x64():
    a, e = jnp.linspace(-2, 2, 7), jnp.linspace(-3, 5, 7)
    np.testing.assert_allclose(losses.smoothed_hermite(a, e, losses.Oracle(3, 0.0, 50)),
                               links.hermite(3, a), atol=1e-14)
    d, lam = 50, 50 ** 0.25
    slope = jax.jit(losses.oracle_slope, static_argnums=2)(a, e, losses.Oracle(2, lam, d))
    expected = 2 * a * (1 - lam ** 2 / (d - 1)) / ((1 + lam ** 2) * math.sqrt(2))
    np.testing.assert_allclose(slope, expected, rtol=1e-12)


@pytest.mark.parametrize("degree,radius", [(1, 0.0), (3, 0.0), (3, 1.7), (4, 2.1)])
def test_step_is_the_riemannian_gradient_of_the_loss(degree, radius):
  rng = np.random.default_rng(degree)
  with enable_x64():
    d = 9
    oracle = losses.Oracle(degree, radius, d)
    w = jnp.asarray(rng.standard_normal(d))
    w = w / jnp.linalg.norm(w)
    x, label, eta = jnp.asarray(rng.standard_normal(d)), 0.7, 1e-3

    @jax.jit
    def both(w, x):
      euclid = jax.grad(losses.correlation_loss)(w, x, label, oracle)
      riemann = euclid - (euclid @ w) * w
      expected = (w - eta * riemann) / jnp.linalg.norm(w - eta * riemann)
      return kernel.spherical_step(w, x, label, eta, oracle), expected

    ours, expected = both(w, x)
    np.testing.assert_allclose(ours, expected, atol=1e-14)


def test_float32_closed_form_agrees_with_float64():
  rng = np.random.default_rng(0)
  d = 1024
  x = rng.standard_normal((64, d))
  w = rng.standard_normal(d)
  w /= np.linalg.norm(w)
  a, e = x @ w, np.sum(x * x - 1, axis=1)
  slope = jax.jit(losses.oracle_slope, static_argnums=2)
  for degree in (3, 4):
    oracle = losses.Oracle(degree, d ** 0.25, d)
    with enable_x64():
      ref = np.asarray(slope(a, e, oracle))
    low = np.asarray(slope(a.astype(np.float32), e.astype(np.float32), oracle))
    assert low.dtype == np.float32
    # S = O(lam^-p): compare at the scale of the result, not of its O(1) terms.
    np.testing.assert_allclose(low, ref, atol=2e-5 * np.abs(ref).max())

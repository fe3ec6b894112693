"""The paper's oracle in closed form: the spherically smoothed Hermite correlation loss.

Per fresh sample (x, y) and unit w, let a = <w, x>, r^2 = ||x||^2 - a^2. The loss is

  l(w) = -T(y) S(a, r^2),   S = E_xi h_p((a + lam r xi) / sqrt(1 + lam^2)),

with xi the first coordinate of a uniform point of S^{d-2}. This is Damian et al.'s
smoothing (L_lam g)(w) = E_{z perp w, |z|=1} g((w + lam z) / |w + lam z|) of the correlation
loss g(w) = -T(y) h_p(<w, x>), in closed form (<z, x> = r xi, |w + lam z| = sqrt(1 + lam^2)).

Expanding h_p(u) = sum_k c_k u^k and using E xi^{2m} = prod_{i<m} (2i+1)/(d-1+2i):

  S = sum_k c_k s^{-k} sum_m C(k, 2m) (2m-1)!! lam^{2m} a^{k-2m} mu_m,
  mu_m = prod_{i<m} r^2 / (d-1+2i),   s^2 = 1 + lam^2.

With mu_m = 1 every inner sum is a Gaussian moment, and the whole is the rescaling
s^{-p} h_p(a) (Mehler). So S = s^{-p} h_p(a) + sum_k c_k s^{-k} sum_{m>=1} (...) nu_m with
nu_m = mu_m - 1 = O(1/sqrt(d)) computed by the recursion nu_m = nu_{m-1} + delta_{m-1}
(1 + nu_{m-1}), delta_i = (r^2 - (d-1) - 2i) / (d-1+2i): the O(1) terms that cancel are
never formed (float32 agrees with float64; the smoothing's gain lives in these
fluctuations of ||x||^2).

S is written as a function of (a, e) with e = ||x||^2 - d (so r^2 = e + d - a^2); then
dS/da at fixed e is the whole derivative of S(<w, x>, ||x||^2 - <w, x>^2) along x, and the
Riemannian gradient of l is -T(y) dS/da (x - a w).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import ArrayLike

from jaxlib_papers.single_index.links import hermite, hermite_coefficients


class Oracle(NamedTuple):
  """The smoothed correlation oracle of one run (static Python numbers).

  Attributes:
    degree: p, the Hermite degree of the activation (k* for vanilla, s* for LT); a Python
      int.
    radius: lam >= 0, the smoothing radius (d^{1/4} in the paper's rate); a Python 0
      skips the smoothing terms, an array (traced) keeps them.
    dim: d >= 3 (an int, or a traced scalar where no shape depends on it).
  """
  degree: int
  radius: float
  dim: int


def _double_factorial_odd(m: int) -> int:
  return math.prod(range(1, 2 * m, 2))   # (2m - 1)!!, 1 for m = 0


def smoothed_hermite(a: ArrayLike, excess: ArrayLike, oracle: Oracle) -> jax.Array:
  """S(a, r^2) with r^2 = excess + d - a^2, in closed form (no Monte Carlo).

  Args:
    a: <w, x> (any shape).
    excess: ||x||^2 - d (same shape), computed as sum(x^2 - 1) for accuracy.
    oracle: degree p, radius lam, dimension d.

  Returns:
    S, same shape as ``a``.
  """
  a, excess = jnp.asarray(a), jnp.asarray(excess)
  p, d = int(oracle.degree), oracle.dim
  if p < 2 or (isinstance(oracle.radius, (int, float)) and oracle.radius == 0):
    return hermite(p, a) / (1.0 + jnp.asarray(oracle.radius) ** 2) ** (p / 2)
  lam2 = jnp.asarray(oracle.radius, a.dtype) ** 2
  scale2 = 1.0 + lam2
  value = hermite(p, a) / scale2 ** (p / 2)
  coefficients = hermite_coefficients(p)
  # nu_m = mu_m - 1 for m = 1..p//2.
  nus, nu = [], jnp.zeros_like(a)
  for i in range(p // 2):
    delta = (excess + 1.0 - a * a - 2.0 * i) / (d - 1 + 2 * i)
    nu = nu + delta * (1.0 + nu)
    nus.append(nu)
  for k in range(2, p + 1):
    if coefficients[k] == 0.0:
      continue
    inner = sum(math.comb(k, 2 * m) * _double_factorial_odd(m) * lam2 ** m
                * a ** (k - 2 * m) * nus[m - 1] for m in range(1, k // 2 + 1))
    value = value + coefficients[k] / scale2 ** (k / 2) * inner
  return value


def oracle_slope(a: ArrayLike, excess: ArrayLike, oracle: Oracle) -> jax.Array:
  """dS/da at fixed ||x||^2 (= dS/da - 2a dS/dr^2), elementwise, exact (autodiff of the
  closed form in two scalars)."""
  grad = jax.grad(lambda u, e: smoothed_hermite(u, e, oracle))
  a, excess = jnp.asarray(a), jnp.asarray(excess)
  flat = jax.vmap(grad)(a.reshape(-1), jnp.broadcast_to(excess, a.shape).reshape(-1))
  return flat.reshape(a.shape)


def correlation_loss(w: ArrayLike, x: ArrayLike, label: ArrayLike, oracle: Oracle
                     ) -> jax.Array:
  """l(w) = -T(y) S(<w, x>, ||x||^2 - <w, x>^2) for one sample.

  Args:
    w: [d] (on the sphere; the formula reads r^2 = ||x||^2 - <w, x>^2).
    x: [d] the sample.
    label: [] the transformed label T(y).
    oracle: the oracle settings.
  """
  w, x = jnp.asarray(w), jnp.asarray(x)
  return -jnp.asarray(label) * smoothed_hermite(w @ x, jnp.sum(x * x - 1.0), oracle)
